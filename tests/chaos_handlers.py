"""Handlers for the chaos run (tests/ is on the daemon's PYTHONPATH, see daemon_helper.py)."""
import time

from delayd.examples import record


def slow_record(task):
    """Sleep params['seconds'], then record the run like delayd.examples:record.

    The chaos run adds a few of these just before it SIGSTOPs a queue process, so
    that the stopped process certainly holds runs whose leases will lapse.
    """
    time.sleep(float(task.params.get("seconds", 1.0)))
    return record(task)
