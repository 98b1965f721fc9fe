"""The delivery log: one entry per run of a task, the last `attempts_kept` kept on its record.

Stored compactly in the record's `attempts` field, one JSON array per line, oldest first:
`[run, at_ms, ms, outcome, status, error]` (finish.lua appends a line and trims to the
count kept). Read back as dicts with those names, `at` in Unix seconds; `status` is the
HTTP status of a URL run (else null), `error` the error or the answer, cut to 200
characters.
"""
from __future__ import annotations

import json
from typing import Any

from delayd.model.clock import local_time

FIELDS = ("run", "at", "ms", "outcome", "status", "error")
ERROR_CHARS = 200


def encode(run: int, at_ms: int, ms: float, outcome: str, status: int | None, error: str) -> str:
    """One line of the log: the compact JSON array, written out directly (one per run of
    every task, so no json.dumps of the whole list; `outcome` is one of finish's plain words)."""
    if len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS - 1] + "…"
    text = json.dumps(error, ensure_ascii=False) if error else '""'
    return f'[{run},{at_ms},{ms!r},"{outcome}",{"null" if status is None else status},{text}]'


def decode(text: str | None) -> list[dict[str, Any]]:
    """The log as dicts, oldest first; lines that do not parse are skipped (never fatal)."""
    out: list[dict[str, Any]] = []
    if not text:
        return out
    for line in text.split("\n"):
        try:
            values = json.loads(line)
        except ValueError:
            continue
        if isinstance(values, list) and len(values) == len(FIELDS):
            entry = dict(zip(FIELDS, values))
            at = entry["at"]
            if isinstance(at, (int, float)):  # ms; a time no clock can show (or no float can hold) is unknown
                entry["at"] = at / 1000.0 if abs(at) < 2 ** 53 else None
            out.append(entry)
    return out


def describe(entries: list[dict[str, Any]], tz: str | None = None) -> list[str]:
    """The log as `delayd get` prints it: a heading, then one line per run, newest last (times as
    clock.local_time shows them, in the task's zone `tz` too for a cron task)."""
    if not entries:
        return []
    out = [f"attempts     (last {len(entries)}, newest last)"]
    for a in entries:
        when = local_time(a["at"], tz) if isinstance(a["at"], float) else "?"
        status = "" if a["status"] is None else f" HTTP {a['status']}"
        out.append(f"  run {a['run']:<4} {when} {a['ms']:>9} ms  {a['outcome']}{status}"
                   + (f"  {a['error']}" if a["error"] else ""))
    return out
