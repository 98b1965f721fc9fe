"""The dashboard's schedules page, as steps (delayd.store.steps): recurring tasks (every/cron) in
name order (Client.schedules, AsyncClient.schedules).

Recurring tasks are found through each bucket's `recurring` index (docs/redis-layout.md),
a zset of members at score 0 that add, finish and delete keep: add puts a recurring task
in, its last run (finish with SCHEDULE_ENDS), a quarantine or a delete takes it out. A
page is one ZRANGEBYLEX of at most `limit` names per bucket (a topic, and an id prefix
within it, are a range of names), merged in name order, then one pipelined HGETALL per
task shown: bounded work however many tasks are stored, and none at all for tasks that
do not recur.

Name order is Redis's byte order. A bucket that returned `limit` names may hold more, so
only names up to the smallest such last name are sure to be complete; the page ends there
and the cursor (the last name shown) resumes after it.
"""
from __future__ import annotations

import base64
from typing import NamedTuple

from delayd.client.browse import CURSOR_SHAPE, BadCursor
from delayd.client.listing import records_steps
from delayd.model.task import DEFAULT_RETRIES, Task
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store

PAGE_SIZE = 50
GONE = "the record is gone (expired after its last run, or removed); delete the task to drop it from this list"


class Schedule(NamedTuple):
    member: str
    task: Task | None     # None: the record is corrupt, not a hash or gone (error says which)
    error: str | None


class SchedulePage(NamedTuple):
    rows: list[Schedule]
    cursor: str | None    # where the next page starts; None: nothing more
    problems: list[str]   # indexes that could not be read, and why


def name_bytes(member: str) -> bytes:
    return member.encode("utf-8", "surrogateescape")


def encode_cursor(member: str) -> str:
    return base64.urlsafe_b64encode(name_bytes(member)).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> bytes | None:
    """The name to resume after (None: from the top); a cursor that is not base64url raises BadCursor."""
    if not cursor:
        return None
    try:
        if CURSOR_SHAPE.fullmatch(cursor):
            return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except ValueError:  # a length that base64 cannot have
        pass
    raise BadCursor()


def name_range(topic: str, prefix: str, after: bytes | None) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX bounds: names of `topic` whose id starts with `prefix` (any name without a
    topic), after `after`."""
    head = name_bytes(f"{topic}:{prefix}") if topic else b""
    low = b"[" + head if head else b"-"
    if after is not None and (not head or after >= head):
        low = b"(" + after
    stripped = head.rstrip(b"\xff")
    high = b"(" + stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else b"+"
    return low, high


def wanted(member: str, topic: str, prefix: str) -> bool:
    """The range holds sub-topics' names too (topic `a` also finds `a:b:1`); ids hold no ':'."""
    found_topic, _, id = member.rpartition(":")
    return (not topic or found_topic == topic) and id.startswith(prefix)


def page_steps(store: Store, topic: str = "", prefix: str = "", cursor: str | None = None,
               limit: int = PAGE_SIZE, default_retries: int = DEFAULT_RETRIES) -> Steps[SchedulePage]:
    """One page of recurring tasks of `topic` (any) whose id starts with `prefix`, in name order: one
    round trip for the names, one for their records."""
    low, high = name_range(topic, prefix, decode_cursor(cursor))
    replies = yield Batch([command("ZRANGEBYLEX", keys.recurring, low, high, "LIMIT", 0, limit) for keys in store.keys])
    names, problems, stops = [], [], []
    for keys, reply in zip(store.keys, replies):
        if isinstance(reply, Exception):
            problems.append(f"{keys.recurring} is not a sorted set: it is left as it is for a person to look at")
            continue
        names += reply
        if len(reply) >= limit:
            stops.append(name_bytes(reply[-1]))
    names.sort(key=name_bytes)
    stop = min(stops) if stops else None
    if stop is not None:
        names = [n for n in names if name_bytes(n) <= stop]
    next_cursor = encode_cursor(names[limit - 1]) if len(names) > limit else \
        encode_cursor(stop.decode("utf-8", "surrogateescape")) if stop is not None else None
    shown = [n for n in names[:limit] if wanted(n, topic, prefix)]
    reads = yield from records_steps(store, shown, default_retries)
    rows = [Schedule(read.member, read.task, GONE if read.gone else read.error) for read in reads]
    return SchedulePage(rows, next_cursor, problems)
