"""The pidfile and the lock that makes one master per state directory.

The lock is an `flock` on `<pidfile>.lock`, held by the master for its whole life:
the kernel drops it when the process dies, so a `kill -9` never leaves a lock
that blocks the next start (unlike the `lockfile` package's existence check).
The lock is the truth about whether a master runs: a master that has exited
has let go of it even while it is a zombie its parent has not reaped yet, so
`stop`, `status`, `restart` and `start` ask the lock, not the process table.
Others test it with a shared lock (`locked`, `wait_unlocked`), which never blocks
a master's exclusive one for longer than the test itself.
A second lock, on `<pidfile>.starting`, covers the starting window: a master takes it
before the main lock and lets go of it once its pidfile is written (or when it dies),
so `stop` can wait for a starting master to say who it is (`wait_started`) and then
stop it, instead of finding nothing to signal.
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


def starting_path(path: Path) -> Path:
    return path.with_name(path.name + ".starting")


def _open_lock(lock: Path) -> int | None:
    try:
        return os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def locked(path: Path) -> bool:
    """True while a master holds the lock of this pidfile."""
    fd = _open_lock(lock_path(path))
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
    """Block until no master holds the lock (True), or `timeout` seconds pass (False)."""
    return _wait_free(lock_path(path), timeout)


def wait_started(path: Path, timeout: float) -> bool:
    """Block until no master is in its starting window (True: it wrote its pidfile, or
    died), or `timeout` seconds pass (False)."""
    return _wait_free(starting_path(path), timeout)


def _wait_free(lock: Path, timeout: float) -> bool:
    """Block until nobody holds `lock` exclusively (True), or `timeout` seconds pass (False).

    The kernel wakes a blocked flock the moment the holder lets go or exits: no polling.
    The wait runs in a daemon thread, so that a timeout can leave it behind."""
    fd = _open_lock(lock)
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
        self.starting_fd: int | None = None

    def acquire(self) -> None:
        """Take the starting lock, then the lock, or raise AlreadyRunning naming the running master."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.starting_fd = _take(starting_path(self.path))
        self.lock_fd = _take(self.lock_path) if self.starting_fd is not None else None
        if self.starting_fd is None or self.lock_fd is None:
            self.close()
            pid = read_pid(self.path)
            raise AlreadyRunning(f"delayd is already running (pid {pid or '?'}, pidfile {self.path})")
        # The lock is ours, so any pidfile left behind is stale (its master is dead).

    def descriptors(self) -> list[int]:
        """The locks' descriptors, which a daemonized master must keep."""
        return [fd for fd in (self.lock_fd, self.starting_fd) if fd is not None]

    def close(self) -> None:
        """Close our descriptors without unlocking: the launcher's copies, after the fork
        (the daemon's copies keep the locks)."""
        for fd in self.descriptors():
            os.close(fd)
        self.lock_fd = self.starting_fd = None

    def write(self, pid: int | None = None) -> None:
        """Write the pidfile; this ends the starting window (the starting lock is let go)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            fh.write(f"{pid or os.getpid()}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        if self.starting_fd is not None:
            fcntl.flock(self.starting_fd, fcntl.LOCK_UN)  # for every copy of it, the launcher's too
            os.close(self.starting_fd)
            self.starting_fd = None

    def release(self) -> None:
        """Remove the pidfile. The lock stays until this process exits, so that a
        `delayd stop` waiting on it returns only once the master is gone."""
        if read_pid(self.path) == os.getpid():
            self.path.unlink(missing_ok=True)


def _take(lock: Path) -> int | None:
    """An open descriptor holding `lock` exclusively, or None if a master holds it."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    for attempt in range(PROBE_RETRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if attempt + 1 == PROBE_RETRIES or not _only_probes(fd):
                break
            time.sleep(0.01)  # a `status` or `stop` is testing the lock for a moment
    os.close(fd)
    return None


def _only_probes(fd: int) -> bool:
    """Whether the lock we could not take is held only shared (by others testing it), not by a master."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
