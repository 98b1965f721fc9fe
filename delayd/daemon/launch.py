"""`delayd start`: the pre-flight checks, then the master, daemonized (the launcher waits on a
pipe for the daemon's one-line answer: up, or why not) or in the foreground."""
from __future__ import annotations

import logging
import os
import select
import sys
import time
from pathlib import Path

import daemon

from delayd import log as log_mod
from delayd.config import Config, Recipe
from delayd.daemon.master import Master
from delayd.daemon.pidfile import AlreadyRunning, PidFile, read_pid
from delayd.daemon.preflight import StartError, preflight

START_TIMEOUT = 60.0


def start(config: Config, reread: Recipe, foreground: bool) -> int:
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
        answers: list[str] = []
        code = Master(config, pidfile, reread, ready=answers.append).run()
        if answers and answers[0] != "ok":  # said last, after the log of the stop (on stderr too)
            print(f"delayd: error: {without_error_prefix(answers[0])}", file=sys.stderr)
        return code

    read_end, write_end = os.pipe()
    if os.fork():  # the launcher: wait until the daemon says it is up (or why not)
        os.close(write_end)
        pidfile.close()
        answer = read_answer(read_end, START_TIMEOUT + config.heartbeat_timeout)
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


def without_error_prefix(answer: str) -> str:
    return answer[len("error: "):] if answer.startswith("error: ") else answer


def read_answer(fd: int, timeout: float) -> str:
    """The daemon's start-up answer on the pipe: 'ok', the reason it failed, or '' if it said nothing."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return without_error_prefix(data.decode(errors="replace").strip())
