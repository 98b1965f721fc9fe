"""The pidfile and the lock that makes one master per state directory.

The lock is an `flock` on `<pidfile>.lock`, held by the master for its whole life:
the kernel drops it when the process dies, so a `kill -9` never leaves a lock
that blocks the next start (unlike the `lockfile` package's existence check).
The pidfile itself is written atomically (temp file + rename), so a reader never
sees it half-written, and it is removed only while it still holds our pid.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import psutil

MASTER_TITLE = "delayd: master"


class AlreadyRunning(RuntimeError):
    pass


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_master(pid: int) -> bool:
    """True if `pid` is a live delayd master (not a reused pid of another program)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return " ".join(proc.cmdline()).startswith(MASTER_TITLE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def running_master(path: Path) -> int | None:
    """The pid of the master this pidfile names, if it is really running."""
    pid = read_pid(path)
    return pid if pid and is_master(pid) else None


class PidFile:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise AlreadyRunning naming the running master."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = read_pid(self.path)
            raise AlreadyRunning(f"delayd is already running (pid {pid or '?'}, pidfile {self.path})") from None
        self.lock_fd = fd
        # The lock is ours, so any pidfile left behind is stale (its master is dead).

    def write(self, pid: int | None = None) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            fh.write(f"{pid or os.getpid()}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def release(self) -> None:
        if read_pid(self.path) == os.getpid():
            self.path.unlink(missing_ok=True)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
