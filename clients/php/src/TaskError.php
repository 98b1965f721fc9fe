<?php
// An invalid task (one line, fit for a user), as delayd.model.task.TaskError in Python.
declare(strict_types=1);

namespace Delayd;

class TaskError extends \InvalidArgumentException
{
}
