"""The tests' Daemon helper (tests/daemon_helper.py): a daemon whose start times out is not left behind."""
from __future__ import annotations

import psutil
import pytest
from daemon_helper import Daemon
from redis_server import wait_for

pytestmark = pytest.mark.system


def left_running(state_dir: str) -> list[psutil.Process]:
    """Live processes with a file of `state_dir` open (the master and its children hold its log)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any(f.path.startswith(state_dir + "/")
                                                             for f in proc.open_files()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_a_daemon_whose_start_times_out_is_killed_before_the_error(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_QUEUES="2")  # it starts 2 queues, 1 expected
    with pytest.raises(AssertionError, match="daemon children up"):
        d.start(timeout=3)
    assert d.proc.poll() is not None
    wait_for(lambda: not left_running(str(d.state_dir)), 10, message="the master's children gone")
