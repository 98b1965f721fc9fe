<?php
// A store this client cannot use (another protocol or layout version, a bad bucket count),
// or a reply of Redis it did not expect (one line).
declare(strict_types=1);

namespace Delayd;

class StoreError extends \RuntimeException
{
}
