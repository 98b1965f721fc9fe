"""Handlers for tests/daemon/test_limits_daemon.py (tests/ is on the daemons' PYTHONPATH): each run
writes what the receiver saw to the file params['path'], one line per event, appended whole."""
import os
import time


def _line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode() + b"\n")
    finally:
        os.close(fd)


def stamp(task):
    """'start <unix s> <key>': when the run started."""
    _line(task.params["path"], f"start {time.time():.6f} {task.key} {os.getpid()}")
    return "success"


def occupy(task):
    """'start ...', hold the slot params['seconds'], then 'end ...': the runs in flight at any moment."""
    _line(task.params["path"], f"start {time.time():.6f} {task.key} {os.getpid()}")
    time.sleep(float(task.params.get("seconds", 0.2)))
    _line(task.params["path"], f"end {time.time():.6f} {task.key} {os.getpid()}")
    return "success"
