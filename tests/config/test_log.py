"""Log lines: their timestamps say their zone, so lines from hosts in other zones compare."""
from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime

import pytest

from delayd.log import Formatter


@pytest.fixture
def zone(monkeypatch):
    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()
    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("name, offset", [("UTC", "+00:00"), ("Asia/Kolkata", "+05:30"),
                                          ("America/St_Johns", "-03:30")])
def test_a_line_has_local_time_with_its_utc_offset(zone, name, offset):
    zone(name)
    created = 1_796_000_000.25  # a winter day (St John's: -03:30, no DST)
    record = logging.LogRecord("delayd", logging.INFO, __file__, 1, "started", None, None)
    record.created = created
    for style in ("text", "json"):
        line = Formatter(style).format(record)
        ts = json.loads(line)["ts"] if style == "json" else line.split()[0].removeprefix("ts=")
        assert ts.endswith(offset), line
        assert datetime.fromisoformat(ts).timestamp() == created
    assert os.environ["TZ"] == name
