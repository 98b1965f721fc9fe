<?php
// Written by scripts/build-clients from delayd/version.py and delayd/store/keys.py: do not edit.
declare(strict_types=1);

namespace Delayd;

final class Version
{
    public const VERSION = '1.0.0';
    public const PROTOCOL = 1;
    public const LAYOUT = 1;
}
