"""Handlers of the soak run (tests/ is on the daemon's PYTHONPATH, see daemon_helper.py).

`planned` records every run in the soak's ledger (a Redis of its own, so that the ledger does not
weigh on the Redis whose memory the soak measures), then answers as the task's params plan it.
"""
from __future__ import annotations

import time

from delayd.examples import _redis, record

LATE = "soak:late"        # "<due_at> <lateness ms>" per run of a task with params["late"]
_kept: list[bytes] = []   # what params["leak"] leaks (the soak's --leak-bytes, to show the RSS check fails)


def planned(task) -> str | bool:
    """Record the run (RPUSH "<key>:<run>" to params['list']); then answer by params['plan']:
    "ok" (success on run params['succeed_on'], default 1; a retry before), "fail", or "raise"
    (an exception until run succeed_on). With params['late'], the run's lateness is recorded too."""
    started = time.time()
    params = task.params
    record(task)
    if params.get("late"):
        _redis(str(params["redis"])).rpush(LATE, f"{task.due_at:.3f} {(started - task.due_at) * 1000:.3f}")
    if params.get("leak"):
        _kept.append(b"x" * int(params["leak"]))   # written, so resident (bytes(n) may be untouched calloc)
    if params["plan"] == "fail":
        return "fail"
    if task.runs < int(params.get("succeed_on", 1)):
        if params["plan"] == "raise":
            raise RuntimeError(f"planned error before run {params['succeed_on']}")
        return "retry"
    return "success"
