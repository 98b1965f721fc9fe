"""The wire format of a task: its record in Redis (a hash, docs/redis-layout.md) and back.

A record is data that anyone with Redis access can write, so everything read back is parsed
defensively: `read` is the one decoder of a record as Redis answers it (a hash, nothing when
the task is gone, or an error when its key is not a hash), and `from_record` raises TaskError
for a record that does not parse. Nothing is ever eval-ed or unpickled.
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, NamedTuple

from delayd.model import attempts as attempts_mod
from delayd.model import make
from delayd.model.checks import MAX_PARAMS_DEPTH, nested_deeper, stored_trace_ok
from delayd.model.fields import SPEC, SPEC_NAMES
from delayd.model.json_rules import loads_spec
from delayd.model.task import DEFAULT_RETRIES, STATUSES, Task, TaskError, is_utf8, printable

NOT_A_HASH = "its key is not a hash"

_compact = json.JSONEncoder(separators=(",", ":"))
_compact_json = _compact.encode
_json_text = json.encoder.encode_basestring_ascii  # a str as JSON, as json.dumps writes it


def _value_encoder() -> Any:
    """`_compact_json` for JSON's own values (a task's params, intervals, timeout, every), its C encoder made
    once (`encode` makes one per call) and without the markers that find a container inside itself: these
    are JSON's own trees (Task.new's copy and checked numbers, or decoded from the record), which hold none."""
    make = json.encoder.c_make_encoder
    if make is None:  # (a Python without the json module's C part)
        return _compact_json
    encode = make(None, _compact.default, _json_text, None, ":", ",", False, False, True)
    return lambda value: "".join(encode(value, 0))


_value_json = _value_encoder()


# spec_json(task): the immutable part of the task, as stored in Redis (defaults left out). Topic and id are not
# in it: they are the record's member (`topic:id`), which the key and every index already hold, so a record
# always runs as the task its key names. Written piece by piece (the same text as json.dumps with compact
# separators; every add pays for it), in the order of the table of fields (the target first: add.lua flags a URL
# task by its spec starting `{"url":`), each when its rule says (delayd.model.fields; made by delayd.model.make).
spec_json: Callable[[Task], str] = make.spec_json(_json_text, _value_json)
# The fields a spec may have (docs/protocol.md, section 3), and those that must be integers.
SPEC_FIELDS = SPEC_NAMES
_INTEGERS = frozenset(f.name for f in SPEC if f.check and f.check.kind == "int")


def _check_read_as_written(spec: dict[str, Any], text: str) -> None:
    """Raise TaskError for what the daemon would read otherwise than it was written: an unknown field (ignored),
    `push` that is no string or `intervals` that are no list of numbers (Task.new's conveniences take others),
    a trace that is not W3C's, a URL task whose spec (`text`) does not start with its URL (not flagged for the
    URL queues). The add script refuses these unless its producer said it checked them
    (docs/protocol.md, section 7): a record so written is set aside at its first claim, never run."""
    unknown = spec.keys() - SPEC_FIELDS
    if unknown:
        raise TaskError(f"spec has an unknown field {min(unknown)!r}")
    if "push" in spec and not isinstance(spec["push"], str):
        raise TaskError("push is not a string")
    intervals = spec.get("intervals", [0])
    if not isinstance(intervals, list) or not intervals or not all(type(gap) in (int, float) for gap in intervals):
        raise TaskError("intervals are not a list of numbers")
    if "trace" in spec and not stored_trace_ok(spec["trace"]):
        raise TaskError("trace is not a W3C trace context")
    if "url" in spec and not text.startswith('{"url":'):
        raise TaskError('the spec of a URL task does not start with {"url":')


def from_record(member: str, record: dict[str, Any], default_retries: int = DEFAULT_RETRIES) -> Task:
    """Rebuild task `member` (`topic:id`) from its Redis hash; raise TaskError if corrupt.
    `default_retries`: the reader's `retries` setting, for a task that gives none.

    Bytes that are not UTF-8 reach us as lone surrogates (connections decode with
    surrogateescape, see delayd.store.connection): a spec or error holding any is corrupt
    (in a number or the status they fail to parse; in a name, Task.new refuses them)."""
    for name in ("spec", "error"):
        value = record.get(name)
        if isinstance(value, str) and not value.isascii() and not is_utf8(value):
            raise TaskError(f"field {name!r} is not UTF-8 text")
    try:
        if nested_deeper(record["spec"], MAX_PARAMS_DEPTH + 1):  # (written past the add script's gate)
            raise TaskError(f"spec is nested more than {MAX_PARAMS_DEPTH + 1} levels deep (an add refuses params "
                            f"nested more than {MAX_PARAMS_DEPTH})")
        spec = loads_spec(record["spec"])  # (as the add script reads it, or TaskError)
        _check_read_as_written(spec, record["spec"])
        topic, _, id = member.rpartition(":")
        trace = spec.pop("trace", None)  # (the spec's own fields are Task.new's arguments, but its trace)
        for name in _INTEGERS.intersection(spec):
            spec[name] = _integer(spec[name])
        task = Task.new(topic, id, priority=int(record.get("priority", 2)), params_limit=None, **spec)
        task.default_retries = default_retries
        task.trace = trace
        status = record.get("status", "delayed")
        if status not in STATUSES:
            raise TaskError(f"unknown status {status!r}")
        task.status = status
        task.created_at = _seconds(record.get("created"))
        task.due_at = _seconds(record.get("due"))
        task.last_run_at = _seconds(record.get("last_run"))
        task.runs = int(record.get("runs", 0))
        task.claim = int(record["claim"] if "claim" in record else record.get("created", 0))  # default: created
        task.last_error = record.get("error") or None
        task.last_due_at = _seconds(record.get("last_due"))
        task.attempts = attempts_mod.decode(record.get("attempts"))
    except KeyError as exc:
        raise TaskError(f"record has no {exc.args[0]!r} field") from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise TaskError(f"record does not parse: {exc}") from None
    return task


class Read(NamedTuple):
    """A record as read: the task, or why there is none."""

    member: str
    task: Task | None            # None: gone, or corrupt (`error` says why)
    error: str | None            # why the record is corrupt (NOT_A_HASH: its key is of another type)
    record: dict[str, Any]       # the fields as stored ({} when gone or not a hash)

    @property
    def gone(self) -> bool:
        """No record (expired or removed since the index naming it was read)."""
        return self.task is None and self.error is None

    def unreadable(self) -> Task:
        """What a listing shows of a corrupt record: its name, status, times and why it is corrupt.

        Its target is unknown (None); a name that is not UTF-8 shows its bytes as \\xNN escapes."""
        record = self.record
        topic, _, id = printable(self.member).rpartition(":")
        status = record.get("status")
        error = printable(str(record.get("error") or ""))
        task = Task(topic=topic, id=id, status=status if status in STATUSES else "failed",
                    last_error=error if error.startswith("quarantined: ") else f"corrupt record: {self.error}")
        for attr, name in (("created_at", "created"), ("due_at", "due"), ("last_run_at", "last_run"),
                           ("runs", "runs")):
            with contextlib.suppress(ValueError, TypeError):
                value = record.get(name)
                setattr(task, attr, int(value or 0) if attr == "runs" else _seconds(value))
        return task


def read(member: str, reply: dict[str, Any] | Exception, default_retries: int = DEFAULT_RETRIES) -> Read:
    """The record of `member` from Redis's reply to HGETALL of its key: a hash, {} (gone) or the
    error reply (WRONGTYPE: the key is not a hash). The one decoder of records."""
    if isinstance(reply, Exception):
        return Read(member, None, NOT_A_HASH, {})
    if not reply:
        return Read(member, None, None, {})
    try:
        return Read(member, from_record(member, reply, default_retries), None, reply)
    except TaskError as exc:
        return Read(member, None, str(exc), reply)


def _integer(value: Any) -> Any:
    """A number read as the add script reads one that must be an integer: by its value (3.0 and 1e3 are 3 and
    1000; cjson gives every number as a double)."""
    return int(value) if type(value) is float and value.is_integer() else value


def _seconds(ms: str | None) -> float | None:
    """A stored time (ms) in seconds; ValueError for one that is not a time (even one too large
    for a float: it would raise OverflowError, which readers of records do not expect)."""
    if ms in (None, ""):
        return None
    try:
        return int(ms) / 1000.0
    except OverflowError:
        raise ValueError("a time out of range") from None
