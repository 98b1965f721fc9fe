"""How `delayd reload` learns that the master recorded the reload's outcome, without polling:
the CLI leaves a FIFO named reload-<pid>.wait in the state directory (where status.json is)
and sleeps on it until a deadline; the master writes a byte to every such FIFO once it has
written status.json. It is the same with the embedded Redis or an external one, and when the
reload fails (the outcome is in status.json either way).

The CLI opens its FIFO read-write before giving it its name, so that it never sees an end of
file and the master never finds a named FIFO nobody is about to read; a FIFO left by a killed
CLI has no reader, and the master removes it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import select
import time
from pathlib import Path

SUFFIX = ".wait"


class Waiter:
    """The CLI's end, made before the SIGHUP: `wait(deadline)` returns True once the master has
    written, False at the deadline; used as a context manager, the FIFO is removed on exit."""

    def __init__(self, state_dir: str | Path):
        self.path = Path(state_dir) / f"reload-{os.getpid()}{SUFFIX}"
        building = self.path.with_suffix(".new")
        with contextlib.suppress(FileNotFoundError):
            building.unlink()
        os.mkfifo(building, 0o600)
        try:
            self.fd = os.open(building, os.O_RDWR | os.O_NONBLOCK)  # a writer of its own: no EOF, never blocks
            os.replace(building, self.path)
        except OSError:
            building.unlink()
            raise

    def wait(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        os.read(self.fd, 512)  # every wake-up so far: the caller rereads status.json once for all
        return True

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def wake_reload_waiters(state_dir: str | Path) -> None:
    """The master's end: a byte to each waiting CLI; a FIFO without a reader (its CLI died) is removed."""
    for path in Path(state_dir).glob(f"reload-*{SUFFIX}"):
        if not path.is_fifo():
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        try:
            os.write(fd, b"\n")
        except OSError:
            pass  # full (a reader that stopped reading) or gone: it rereads status.json anyway
        finally:
            os.close(fd)
