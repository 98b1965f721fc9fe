"""The dashboard's task list, as steps (delayd.store.steps): pages of tasks by status, topic and id
prefix, with bounded work (Client.browse, AsyncClient.browse).

Tasks live in per-bucket indexes (docs/redis-layout.md): `delayed` (due time; a paused
topic's due tasks in `paused:<topic>`, those a limit holds back in `limited:<topic>`, by due
time too), `leases` (lease expiry) and
`done:<status>` (finish time). A page walks one status's index of
every bucket with browse.lua, which keeps the members of the wanted topic and id
prefix and stops after `limit` matches or `budget` entries examined, whichever comes
first. So a page costs at most `budget` entries of Redis work however many tasks are
stored: a rare topic among a million tasks comes back as pages that say how far the
search got, with a cursor to go on, never as one scan of everything.

The buckets are merged in one order (newest first; the next due first for `delayed`).
A bucket that stopped early has examined everything down to its stop entry, so only
matches at or above the highest such stop are sure to be in order; the page ends
there and the cursor resumes from it.
"""
from __future__ import annotations

import base64
import json
import math
import re
from typing import NamedTuple

from delayd.client.listing import records_steps
from delayd.model.task import DEFAULT_RETRIES, Task
from delayd.store.keys import BucketKeys
from delayd.store.replies import Score
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store

# (status, index of a bucket, order): the statuses a list without one walks, in this order
SOURCES: tuple[tuple[str, str], ...] = (("running", "desc"), ("delayed", "asc"), ("failed", "desc"),
                                        ("ok", "desc"), ("deleted", "desc"))
ORDER = dict(SOURCES)
BUDGET = 20_000   # index entries one page may examine, over every bucket
CURSOR_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,65536}")  # base64url without padding, of bounded length


class Row(NamedTuple):
    member: str
    score: Score                       # the index's time (ms): due, lease expiry or finish
    status: str                        # the index it was found in
    task: Task | None                  # None: the record is corrupt (error says why)
    error: str | None


class Page(NamedTuple):
    rows: list[Row]
    cursor: str | None                 # where the next page starts; None: nothing more
    examined: int                      # index entries looked at for this page
    indexed: int                       # entries in the indexes walked
    problems: list[str]                # indexes that could not be read, and why


def index_key(keys: BucketKeys, status: str) -> str:
    return {"delayed": keys.delayed, "running": keys.leases}.get(status) or keys.done(status)


def indexes_steps(store: Store, status: str, topic: str) -> Steps[list[str]]:
    """The indexes a status's list walks: one per bucket, and for `delayed` also the parked tasks
    of each paused topic or of a topic with tasks of a disabled host set aside (`paused:<topic>`,
    scored by due time like `delayed`) and the tasks a limit holds back (`limited:<topic>`, by due
    time too): such due tasks wait there, and are still delayed."""
    indexes = [index_key(keys, status) for keys in store.keys]
    if status == "delayed":
        b = store.buckets
        replies = yield Batch([command("HKEYS", keys.paused) for keys in store.keys]
                              + [command("ZRANGE", keys.limited, 0, -1) for keys in store.keys]
                              + [command("SMEMBERS", keys.aside) for keys in store.keys])
        for keys, paused, held, aside in zip(store.keys, replies[:b], replies[b:2 * b], replies[2 * b:]):
            parked = {*(paused if isinstance(paused, list) else []), *(aside if isinstance(aside, (list, set)) else [])}
            indexes += [keys.parked(t) for t in sorted(parked) if topic in ("", t)]
            indexes += [keys.held(t) for t in (held if isinstance(held, list) else []) if topic in ("", t)]
    return indexes


def encode_cursor(source: int, start: tuple[Score, str] | None) -> str:
    data = [source, *start] if start else [source]
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


class BadCursor(ValueError):
    """A cursor that this server did not issue (answered 400)."""

    def __init__(self, why: str = "not one this server gave"):
        super().__init__(f"cursor: {why}; start again without it")


def decode_cursor(cursor: str) -> tuple[int, tuple[Score, str] | None]:
    """(source index, entry to resume after or None), from a cursor shaped exactly as encode_cursor
    makes them (base64url of [source] or [source, score, member]); anything else raises BadCursor.
    A cursor only says where a walk starts, so a well-shaped one costs what any page does."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))) \
            if CURSOR_SHAPE.fullmatch(cursor) else None
    except (ValueError, RecursionError):  # RecursionError: deep nesting; UnicodeDecodeError is a ValueError
        raise BadCursor() from None
    if isinstance(data, list) and data and _is_int(data[0]) and 0 <= data[0] < len(SOURCES):
        if len(data) == 1:
            return data[0], None
        score, member = data[1:] if len(data) == 3 else (None, None)
        if (_is_int(score) or isinstance(score, float) and not math.isnan(score)) and isinstance(member, str):
            return data[0], (score, member)
    raise BadCursor()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Walked(NamedTuple):
    found: list[tuple[Score, str]]     # matches as (score, member), in order
    resume: tuple[Score, str] | None   # where the next page starts; None: every index was read to its end
    examined: int
    size: int
    problems: list[str]


def walk_steps(store: Store, status: str, start: tuple[Score, str] | None, topic: str, prefix: str, limit: int,
               budget: int) -> Steps[Walked]:
    """One status over every bucket (its indexes: indexes_steps)."""
    desc = ORDER[status] == "desc"
    indexes = yield from indexes_steps(store, status, topic)
    per_index = max(limit, budget // len(indexes))
    answers = yield from store.browse_steps(indexes, ORDER[status], start, topic, prefix, limit, per_index)
    found = sorted(((score, member) for a in answers for member, score in a.matches), reverse=desc)
    # A bucket that stopped early has examined everything up to its stop entry, so only the
    # matches up to the first such stop (in this order) are sure to be complete and in order.
    stops = [a.stop for a in answers if a.stop is not None]
    resume = (max(stops) if desc else min(stops)) if stops else None
    if resume is not None:
        found = [e for e in found if (e >= resume if desc else e <= resume)]
    if len(found) >= limit:
        found = found[:limit]
        resume = found[-1]
    return Walked(found, resume, sum(a.examined for a in answers), sum(a.size for a in answers),
                  [a.problem for a in answers if a.problem])


class Found(NamedTuple):
    hits: list[tuple[str, Score, int]]  # (member, score, source index), in the list's order
    cursor: str | None
    examined: int
    indexed: int
    problems: list[str]


def find_steps(store: Store, status: str | None, topic: str = "", prefix: str = "", cursor: str | None = None,
               limit: int = 50, budget: int = BUDGET) -> Steps[Found]:
    """The members of one page (see `page_steps`), without reading their records."""
    sources = [i for i, (s, _) in enumerate(SOURCES) if status in (None, s)]
    source, start = decode_cursor(cursor) if cursor else (sources[0], None)
    if source not in sources:
        raise BadCursor(f"it is for a list of another status than {status}")
    hits: list[tuple[str, Score, int]] = []
    problems: list[str] = []
    examined = indexed = 0
    next_cursor = None
    while True:
        walked = yield from walk_steps(store, SOURCES[source][0], start, topic, prefix, limit - len(hits),
                                       max(limit, budget - examined))
        hits += [(member, score, source) for score, member in walked.found]
        examined, indexed = examined + walked.examined, indexed + walked.size
        problems += walked.problems
        if walked.resume is not None:
            next_cursor = encode_cursor(source, walked.resume)
            break
        if source + 1 not in sources:
            break
        source, start = source + 1, None
        if len(hits) >= limit or examined >= budget:
            next_cursor = encode_cursor(source, None)
            break
    return Found(hits, next_cursor, examined, indexed, problems)


def page_steps(store: Store, status: str | None, topic: str = "", prefix: str = "", cursor: str | None = None,
               limit: int = 50, budget: int = BUDGET, default_retries: int = DEFAULT_RETRIES) -> Steps[Page]:
    """One page of tasks with `status` (None: every status, running first) of `topic` whose id starts
    with `prefix`. Reads at most about `budget` index entries, then the records of the page in one
    round trip: a record that is corrupt (or not a hash) is a row with the reason, one that is gone
    meanwhile is left out. `default_retries`: the reader's `retries`."""
    found = yield from find_steps(store, status, topic, prefix, cursor, limit, budget)
    reads = yield from records_steps(store, [member for member, _, _ in found.hits], default_retries)
    rows = [Row(member, score, SOURCES[source][0], read.task, read.error)
            for (member, score, source), read in zip(found.hits, reads) if not read.gone]
    return Page(rows, found.cursor, found.examined, found.indexed, found.problems)
