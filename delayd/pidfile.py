"""The pidfile and the lock that makes one master per state directory.

The lock is an `flock` on `<pidfile>.lock`, held by the master for its whole life:
the kernel drops it when the process dies, so a `kill -9` never leaves a lock
that blocks the next start (unlike the `lockfile` package's existence check).
The lock is the truth about whether a master runs: a master that has exited
has let go of it even while it is a zombie its parent has not reaped yet, so
`stop`, `status`, `restart` and `start` ask the lock, not the process table.
Others test it with a shared lock (`locked`, `wait_unlocked`), which never blocks
a master's exclusive one for longer than the test itself.
The pidfile itself is written atomically (temp file + rename), so a reader never
sees it half-written, and it is removed only while it still holds our pid.
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import psutil

MASTER_TITLE = "delayd: master"
PROBE_RETRIES = 20


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


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _open_lock(path: Path) -> int | None:
    try:
        return os.open(lock_path(path), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def locked(path: Path) -> bool:
    """True while a master holds the lock of this pidfile."""
    fd = _open_lock(path)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops our shared lock too


def wait_unlocked(path: Path, timeout: float) -> bool:
    """Block until no master holds the lock (True), or `timeout` seconds pass (False).

    The kernel wakes a blocked flock the moment the holder exits: no polling. The
    wait runs in a daemon thread, so that a timeout can leave it behind."""
    fd = _open_lock(path)
    if fd is None:
        return True
    free = threading.Event()

    def wait() -> None:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.close(fd)
        free.set()

    threading.Thread(target=wait, daemon=True, name="delayd-wait-unlocked").start()
    return free.wait(timeout)


def running_master(path: Path) -> int | None:
    """The pid of the master this pidfile names, if it holds the lock (it is really running)."""
    if not locked(path):
        return None
    pid = read_pid(path)
    return pid if pid and is_master(pid) else None


class PidFile:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.lock_path = lock_path(self.path)
        self.lock_fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise AlreadyRunning naming the running master."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        for attempt in range(PROBE_RETRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 == PROBE_RETRIES or not _only_probes(fd):
                    os.close(fd)
                    pid = read_pid(self.path)
                    raise AlreadyRunning(f"delayd is already running (pid {pid or '?'}, pidfile {self.path})") \
                        from None
                time.sleep(0.01)  # a `status` or `stop` is testing the lock for a moment
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
        """Remove the pidfile. The lock stays until this process exits, so that a
        `delayd stop` waiting on it returns only once the master is gone."""
        if read_pid(self.path) == os.getpid():
            self.path.unlink(missing_ok=True)


def _only_probes(fd: int) -> bool:
    """Whether the lock we could not take is held only shared (by others testing it), not by a master."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
