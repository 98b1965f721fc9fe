"""The master as `delayd stop/status/start` and signals see it: real processes, real Redis."""
from __future__ import annotations

import psutil

from daemon_helper import Daemon, delayd


def test_stop_returns_when_the_master_exited_even_unreaped(redis_url, tmp_path):
    # The harness (Popen) does not reap the master: it stays a zombie after it exits.
    d = Daemon(redis_url, tmp_path / "d").start()
    try:
        out = delayd("stop", "--timeout", "20", env=d.env)
        assert out.returncode == 0, out.stderr
        assert "stopped" in out.stdout
        assert psutil.Process(d.proc.pid).status() == psutil.STATUS_ZOMBIE  # nobody reaped it yet
        out = delayd("status", env=d.env)
        assert out.returncode == 3 and "not running" in out.stdout
        out = delayd("restart", "--timeout", "20", env=d.env)  # nothing to stop, then a daemonized start
        assert out.returncode == 0 and "started" in out.stdout, out.stderr
        out = delayd("stop", "--timeout", "20", env=d.env)
        assert out.returncode == 0 and "stopped" in out.stdout, out.stderr
    finally:
        d.stop()


def test_a_long_task_timeout_alone_gets_a_longer_lease(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", DELAYD_TASK_TIMEOUT="300").start()
    try:
        started = next(line for line in d.log().splitlines() if "master_started" in line)
        assert "lease_s=360.0" in started and "task_timeout" in started
    finally:
        d.stop()
