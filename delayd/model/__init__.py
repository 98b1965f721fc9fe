"""What a task is: the record's fields and validation, schedules, the delivery log, time."""
