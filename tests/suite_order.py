"""The suite's own order of files under pytest-xdist (hooked in by tests/conftest.py), kept apart from conftest
so that a test can import it by a name no other folder's conftest shadows."""
from __future__ import annotations

import json
from pathlib import Path

# The test files that take longest (seconds, measured by `--record-durations`; only those of SLOW_FILE seconds
# or more are kept). Under pytest-xdist the workers hand the files out in collection order: these go first,
# longest first, so that no long file starts near the end while the other worker has run out of files.
DURATIONS = Path(__file__).parent / "durations.json"
SLOW_FILE = 10.0


def longest_first(items: list, seconds: dict[str, float]) -> None:
    """Sorts `items` (anything with a nodeid) file by file: the files of `seconds` first, longest first, then the
    others, most tests first; each file's items stay together and in their order."""
    tests: dict[str, int] = {}
    for item in items:
        tests[_file_of(item.nodeid)] = tests.get(_file_of(item.nodeid), 0) + 1
    items.sort(key=lambda item: (-seconds.get(_file_of(item.nodeid), 0.0), -tests[_file_of(item.nodeid)]))


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class DurationRecorder:
    """--record-durations: adds up each file's setup, call and teardown times (the reports reach the
    controller from xdist's workers too) and merges the slow ones into tests/durations.json at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[_file_of(report.nodeid)] = self.seconds.get(_file_of(report.nodeid), 0.0) + report.duration

    def pytest_sessionfinish(self, session) -> None:
        known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        for path, seconds in self.seconds.items():
            known.pop(path, None)
            if seconds >= SLOW_FILE:
                known[path] = round(seconds, 1)
        DURATIONS.write_text(json.dumps(dict(sorted(known.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
