"""The heartbeat a child touches, and the one byte its first beat writes to the master's wake-up
pipe (the master sleeps until its children are up, instead of looking every few ms)."""
from __future__ import annotations

import os
import tempfile
import time

from delayd.workers.process import Heartbeat


def test_the_first_beat_says_up_once_and_every_beat_touches_the_file():
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as file:
        os.utime(file.fileno(), (0, 0))
        beat = Heartbeat(file.fileno(), write_end)
        beat.beat()
        assert os.fstat(file.fileno()).st_mtime >= time.monotonic() - 5  # the monotonic clock, not the wall's
        assert os.read(read_end, 10) == b"u"
        assert os.read(read_end, 10) == b""  # the write end is closed: the master's reader sees no more
        beat.last -= 2
        beat.beat()  # later beats touch the file only
        assert beat.up is None
    os.close(read_end)


def test_a_beat_outlives_a_master_that_stopped_reading():
    read_end, write_end = os.pipe()
    os.close(read_end)
    with tempfile.TemporaryFile() as file:
        beat = Heartbeat(file.fileno(), write_end)
        beat.beat()  # EPIPE (SIGPIPE is ignored by Python): no exception
        assert beat.up is None
