"""Daemon control for the CLI: stop, status and reload of a running master (the start is in
launch.py, which alone imports the master and everything it runs, so that these stay quick)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from delayd.config import Config
from delayd.daemon.pidfile import (
    locked,
    running_master,
    wait_started,
    wait_unlocked,
)
from delayd.daemon.reload_wait import Waiter


def looked_in(config: Config) -> str:
    """Where stop and status looked for the master, for their "not running" message: a
    DELAYD_STATE_DIR set after the start (or not set for it) is the usual reason."""
    return f"pidfile {config.pidfile}" if config.pidfile else f"state directory {config.state_dir}"


def signal_master(config: Config, sig: int) -> int | None:
    pid = running_master(config.pid_path)
    if pid:
        os.kill(pid, sig)
    return pid


def stop(config: Config, timeout: float | None) -> int:
    """SIGTERM to the master and wait until it is gone; a master still starting (its lock
    held, its pidfile not written yet) is waited for first, then stopped alike."""
    timeout = config.graceful_timeout + 15 if timeout is None else timeout
    deadline = time.monotonic() + timeout  # one timeout for the start-up wait and the stop
    pid = signal_master(config, signal.SIGTERM)
    if not pid and locked(config.pid_path):
        if not wait_started(config.pid_path, timeout):
            print(f"delayd: error: the master is still starting after {timeout:g} s (no pidfile yet); "
                  "not stopped", file=sys.stderr)
            return 1
        pid = signal_master(config, signal.SIGTERM)
    if not pid:
        print(f"delayd is not running ({looked_in(config)})")
        return 0
    # The master has stopped when its lock is free, even if it is a zombie nobody reaped yet.
    if not wait_unlocked(config.pid_path, max(0.0, deadline - time.monotonic())) and locked(config.pid_path):
        print(f"delayd: error: the master (pid {pid}) did not stop within {timeout:g} s", file=sys.stderr)
        return 1
    print(f"delayd stopped (pid {pid})")
    return 0


def cpu_average(proc: psutil.Process) -> float:
    """CPU use since the process started, in % of one core."""
    times = proc.cpu_times()
    age = max(1e-3, time.time() - proc.create_time())
    return round(100.0 * (times.user + times.system) / age, 2)


# status() of a master that holds the lock but has not written its pidfile yet (it checks Redis
# and the layout first: seconds with a slow Redis; for a moment at exit too, once it removed it).
STARTING = {"running": False, "starting": True}


def read_status(config: Config) -> dict[str, Any]:
    """state_dir/status.json as the master last wrote it (no slots if there is none)."""
    try:
        return json.loads((Path(config.state_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return {"slots": []}


class ReloadFailed(RuntimeError):
    """The master refused the new config, a new child did not come up, or no outcome came; one line."""


def reload(config: Config) -> int | None:
    """SIGHUP to the master, then wait for the outcome it records in status.json (its reload count
    goes up; the master wakes this wait through reload_wait's FIFO). Returns the master's pid (None:
    not running); raises ReloadFailed. A master whose status.json cannot be read (none written yet) is
    only signalled."""
    if not running_master(config.pid_path):
        return None
    try:
        waiter = Waiter(config.state_dir)
    except OSError as exc:
        raise ReloadFailed(f"cannot wait for the outcome in {config.state_dir}: {exc.strerror or exc}; "
                           "the master was not signalled") from None
    with waiter:
        before = read_status(config).get("reloads")
        pid = signal_master(config, signal.SIGHUP)
        if not pid or before is None:
            return pid
        timeout = config.heartbeat_timeout + 15  # the master waits up to heartbeat_timeout for new children
        deadline = time.monotonic() + timeout
        while (outcome := read_status(config)).get("reloads") == before:
            if not waiter.wait(deadline):
                raise ReloadFailed(f"the master (pid {pid}) did not report the reload's outcome within "
                                   f"{timeout:g} s; see {config.log_path}")
    if outcome.get("reload_error"):
        raise ReloadFailed(outcome["reload_error"])
    return pid


def status(config: Config) -> dict[str, Any] | None:
    """Master and children as psutil sees them, with restart counts; STARTING, or None if not running."""
    pid = running_master(config.pid_path)
    if not pid:
        return dict(STARTING) if locked(config.pid_path) else None
    slots = read_status(config)
    by_pid = {s["pid"]: s for s in slots.get("slots", []) if s.get("pid")}
    try:
        master = psutil.Process(pid)
    except psutil.NoSuchProcess:  # it exited since the lock was tested
        return None
    procs = []
    for proc in [master] + master.children():
        try:
            with proc.oneshot():
                slot = by_pid.get(proc.pid, {})
                procs.append({
                    "pid": proc.pid, "title": " ".join(proc.cmdline()).strip() or proc.name(),
                    "state": proc.status(), "uptime": round(time.time() - proc.create_time(), 1),
                    "cpu_percent": cpu_average(proc), "rss": proc.memory_info().rss,
                    "restarts": slot.get("restarts", 0), "crash_looping": slot.get("crash_looping", False),
                })
        except psutil.NoSuchProcess:
            continue
    children = slots.get("slots", [])
    down = [s["name"] for s in children if not s.get("pid")]
    return {"running": True, "pid": pid, "redis": slots.get("redis"), "processes": procs,
            "waiting_to_restart": down,
            "crash_looping": [s["name"] for s in children if s.get("crash_looping")],
            "children": children,
            "problems": [problem(s) for s in children if not s.get("pid") or s.get("crash_looping")]}


def problem(slot: dict[str, Any]) -> str:
    """One line on a child that is down or crash-looping: what `status` reports as degraded."""
    state = "crash-looping" if slot.get("crash_looping") else "down, waiting to restart"
    restarts = slot.get("restarts", 0)
    text = f"{slot['name']} is {state} (restarted {restarts} time{'' if restarts == 1 else 's'})"
    return text + (f": {slot['last_error']}" if slot.get("last_error") else "")
