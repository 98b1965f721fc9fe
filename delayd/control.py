"""Daemon control for the CLI: start (daemonized or in the foreground), stop, status."""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

import daemon
import psutil

from . import log as log_mod
from .config import Config
from .master import Master
from .preflight import StartError, preflight
from .pidfile import AlreadyRunning, PidFile, locked, read_pid, running_master, wait_started, wait_unlocked

START_TIMEOUT = 60.0


def start(config: Config, reread: Callable[[], Config], foreground: bool) -> int:
    """Start the master; `reread` builds the config again on reload (the same file, flags, environment)."""
    log_mod.setup(config.log_level, config.log_format, None)  # pre-flight warnings go to the terminal
    try:
        Path(config.state_dir).mkdir(parents=True, exist_ok=True)
        pidfile = PidFile(config.pid_path)
        pidfile.acquire()
        preflight(config)
    except (StartError, AlreadyRunning, OSError) as exc:
        print(f"delayd: error: {exc}", file=sys.stderr)
        return 1
    if foreground:
        if config.log_file:
            log_mod.setup(config.log_level, config.log_format, config.log_file)
        return Master(config, pidfile, reread).run()

    read_end, write_end = os.pipe()
    if os.fork():  # the launcher: wait until the daemon says it is up (or why not)
        os.close(write_end)
        pidfile.close()
        answer = read_answer(read_end)
        if answer == "ok":
            print(f"delayd started (pid {read_pid(config.pid_path)}, log {config.log_path})")
            return 0
        print(f"delayd: error: {answer or 'the daemon exited during start-up'} (log: {config.log_path})",
              file=sys.stderr)
        return 1
    os.close(read_end)
    code = 1
    try:
        handler = log_mod.setup(config.log_level, config.log_format, str(config.log_path))
        stream = handler.stream
        context = daemon.DaemonContext(
            detach_process=True, umask=0o027, working_directory=config.state_dir,
            files_preserve=[write_end, *pidfile.descriptors(), stream.fileno()],
            stdout=stream, stderr=stream,
            signal_map={},  # the master installs its own handlers (no SIGTERM -> SystemExit)
        )
        context.open()

        def ready(message: str) -> None:
            os.write(write_end, message.encode() + b"\n")
            os.close(write_end)

        code = Master(config, pidfile, reread, ready=ready).run()
    except BaseException:  # noqa: BLE001 - whatever escaped the master's own guard: leave a trace
        logging.getLogger("delayd.master").critical("master_crashed", exc_info=True)
    finally:
        logging.shutdown()
        os._exit(code)


def read_answer(fd: int) -> str:
    data = b""
    deadline = time.monotonic() + START_TIMEOUT
    while b"\n" not in data and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    text = data.decode(errors="replace").strip()
    return text[len("error: "):] if text.startswith("error: ") else text


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


def status(config: Config) -> dict[str, Any] | None:
    """Master and children as psutil sees them, with restart counts; STARTING, or None if not running."""
    pid = running_master(config.pid_path)
    if not pid:
        return dict(STARTING) if locked(config.pid_path) else None
    try:
        slots = json.loads((Path(config.state_dir) / "status.json").read_text())
    except (OSError, ValueError):
        slots = {"slots": []}
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
    down = [s["name"] for s in slots.get("slots", []) if not s.get("pid")]
    return {"running": True, "pid": pid, "redis": slots.get("redis"), "processes": procs,
            "waiting_to_restart": down,
            "crash_looping": [s["name"] for s in slots.get("slots", []) if s.get("crash_looping")]}
