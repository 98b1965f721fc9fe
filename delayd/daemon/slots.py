"""The master's bookkeeping of its children: slots, restart backoff, heartbeat files.

    slot          one child the master keeps alive: ("redis", 0), ("bucket", 3), ("queue", 1)
    restart       a dead child's slot is started again after a backoff that doubles
                  with each quick death (1 s .. 60 s) and resets once a child ran STABLE s;
                  a spawn that fails (fork, mkstemp: EAGAIN, EMFILE) backs off the same way
    heartbeat     each Python child touches its own unlinked temp file with the monotonic
                  clock (system-wide on Linux, so a wall-clock step changes nothing); one
                  silent for heartbeat_timeout gets SIGABRT, then SIGKILL; a child that dies of an
                  exception writes why into it (delayd.workers.process.leave_note), the slot's `last_error`
    retiring      a child replaced by a reload or removed by SIGTTOU: told to stop, it keeps
                  its own heartbeat file until it exits, and is killed if it outlives its
                  graceful timeout; a reload holds the old children aside, running, until the
                  new ones are up (or takes them back if one is not)
"""
from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass

STABLE = 10.0            # a child that ran this long resets its slot's backoff
BACKOFF_MAX = 60.0
CRASH_LOOP = 5           # quick deaths in a row before a slot is reported as crash-looping
KILL_AFTER_ABORT = 5.0   # seconds between SIGABRT and SIGKILL for a hung child, and after a retiring
                         # child's graceful timeout


@dataclass(eq=False)
class Slot:
    kind: str
    index: int
    pid: int | None = None
    started: float = 0.0
    restarts: int = 0
    quick_deaths: int = 0
    start_at: float = 0.0            # monotonic time of the next (re)start
    heartbeat: int | None = None     # fd of the current child's heartbeat file
    aborted_at: float | None = None
    spawned_at: float = 0.0          # monotonic time of the last spawn (the heartbeat's clock)
    last_error: str = ""             # why its last child died: its note, else how it exited

    @property
    def name(self) -> str:
        return self.kind if self.kind in ("redis", "web") else f"{self.kind} {self.index}"

    @property
    def crash_looping(self) -> bool:
        return self.quick_deaths >= CRASH_LOOP

    def died(self, ran: float) -> float:
        """Count the death of this slot's child after `ran` seconds; returns the delay before its restart."""
        self.pid = None
        self.restarts += 1
        return self.back_off(quick=ran < STABLE)

    def back_off(self, quick: bool = True) -> float:
        """Schedule the next start: at once after a stable run, else after a doubling delay."""
        self.quick_deaths = self.quick_deaths + 1 if quick else 0
        delay = 0.0 if self.quick_deaths == 0 else min(BACKOFF_MAX, 2.0 ** (self.quick_deaths - 1))
        self.start_at = time.monotonic() + delay
        return delay


@dataclass(eq=False)
class Retiring:
    """A child that was told to stop and is not replaced by a restart when it exits."""
    pid: int
    kind: str
    name: str
    heartbeat: int | None
    kill_at: float | None  # monotonic; None once SIGKILL was sent, or while a reload holds it (Master.hold)


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def heartbeat_file(slot: Slot) -> int:
    """A fresh unlinked temp file for the next child of `slot`; returns its fd."""
    fd, path = tempfile.mkstemp(prefix=f"delayd-{slot.kind}{slot.index}-")
    os.unlink(path)
    return fd


def backdate(fd: int) -> float:
    """Empty the heartbeat file (the last child's note) and set it a second into the past, so that
    "up" means the child itself touched it. Returns now (monotonic)."""
    os.ftruncate(fd, 0)
    now = time.monotonic()
    os.utime(fd, (now - 1, now - 1))
    return now


def read_note(fd: int) -> str:
    """What a dead child wrote into its heartbeat file ('' if nothing)."""
    return os.pread(fd, 4096, 0).decode(errors="replace").strip()


def silent_for(fd: int) -> float:
    """Seconds since the child last touched its heartbeat file."""
    return time.monotonic() - os.fstat(fd).st_mtime


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
