"""The suite's own order under pytest-xdist (tests/conftest.py): the files of tests/durations.json first, longest
first, then the others by their number of tests, so that no long file starts near the end of a run."""
from __future__ import annotations

import json
from types import SimpleNamespace

from suite_order import DURATIONS, SLOW_FILE, longest_first


def test_known_files_go_first_longest_first_then_the_others_by_their_tests():
    ids = ["a.py::t1", "a.py::t2", "b.py::t", "c.py::t1", "c.py::t2", "c.py::t3", "d.py::t", "e.py::t"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    longest_first(items, {"d.py": 120.0, "b.py": 30.0})
    assert [i.nodeid for i in items] == ["d.py::t", "b.py::t", "c.py::t1", "c.py::t2", "c.py::t3", "a.py::t1",
                                         "a.py::t2", "e.py::t"]


def test_the_committed_durations_name_files_that_exist_each_slow():
    seconds = json.loads(DURATIONS.read_text())
    root = DURATIONS.parent.parent
    assert seconds and all((root / path).is_file() and value >= SLOW_FILE for path, value in seconds.items())
