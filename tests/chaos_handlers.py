"""Handlers for the chaos run (tests/ is on the daemon's PYTHONPATH, see daemon_helper.py)."""
import os
import time

from delayd.examples import _redis, record

STARTED = "chaos:slow_started"     # "<pid> <task key>" per slow run that began


def slow_record(task):
    """Say which process runs it, sleep params['seconds'], then record the run like examples:record.

    The chaos run adds a few of these just before it SIGSTOPs a queue process and
    picks, as its victim, a process that has said it is running one: so the stopped
    process certainly holds a run whose lease will lapse.
    """
    _redis(str(task.params["redis"])).rpush(STARTED, f"{os.getpid()} {task.key}")
    time.sleep(float(task.params.get("seconds", 1.0)))
    return record(task)
