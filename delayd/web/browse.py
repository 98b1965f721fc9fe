"""The dashboard's task list: pages of tasks by status, topic and id prefix, with bounded work.

Tasks live in per-bucket indexes (docs/redis-layout.md): `delayed` (due time), `leases`
(lease expiry) and `done:<status>` (finish time). A page walks one status's index of
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
from typing import Any, NamedTuple

from ..store import BucketKeys, Script, Store
from ..task import Task, TaskError

BROWSE = Script("browse")
# (status, index of a bucket, order): the statuses a list without one walks, in this order
SOURCES: tuple[tuple[str, str], ...] = (("running", "desc"), ("delayed", "asc"), ("failed", "desc"),
                                        ("ok", "desc"), ("deleted", "desc"))
ORDER = dict(SOURCES)
BUDGET = 20_000   # index entries one page may examine, over every bucket


class Answer(NamedTuple):
    """browse.lua's reply for one bucket."""

    matches: list[tuple[str, int]]     # (member, score), in order
    examined: int
    stop: tuple[int, str] | None       # the last entry examined; None when the index was read to its end
    size: int


class Row(NamedTuple):
    member: str
    score: int                         # the index's time (ms): due, lease expiry or finish
    status: str                        # the index it was found in
    task: Task | None                  # None: the record is corrupt (error says why) or gone
    error: str | None


class Page(NamedTuple):
    rows: list[Row]
    cursor: str | None                 # where the next page starts; None: nothing more
    examined: int                      # index entries looked at for this page
    indexed: int                       # entries in the indexes walked


def index_key(keys: BucketKeys, status: str) -> str:
    return {"delayed": keys.delayed, "running": keys.leases}.get(status) or keys.done(status)


def decode(reply: list[Any]) -> Answer:
    flat, examined, stop_score, stop_member, size = reply
    matches = [(flat[i], int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
    stop = (int(float(stop_score)), stop_member) if stop_member else None
    return Answer(matches, int(examined), stop, int(size))


def encode_cursor(source: int, start: tuple[int, str] | None) -> str:
    data = [source, *start] if start else [source]
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[int, tuple[int, str] | None]:
    """(source index, entry to resume after or None); a cursor that does not parse starts from the top."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if len(data) == 1:
            return int(data[0]), None
        source, score, member = data
        if isinstance(member, str):
            return int(source), (int(score), member)
    except (ValueError, TypeError):
        pass
    return 0, None


def walk(store: Store, status: str, start: tuple[int, str] | None, topic: str, prefix: str, limit: int,
         budget: int) -> tuple[list[tuple[int, str]], tuple[int, str] | None, int, int]:
    """One status over every bucket: (matches as (score, member) in order, resume point or None,
    entries examined, entries in the indexes)."""
    desc = ORDER[status] == "desc"
    per_bucket = max(limit, budget // store.buckets)
    answers = [decode(BROWSE(store.redis, [index_key(keys, status)],
                             [ORDER[status], *(start or ("", "")), topic, prefix, limit, per_bucket]))
               for keys in store.keys]
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
    return found, resume, sum(a.examined for a in answers), sum(a.size for a in answers)


def page(store: Store, status: str | None, topic: str = "", prefix: str = "", cursor: str | None = None,
         limit: int = 50, budget: int = BUDGET) -> Page:
    """One page of tasks with `status` (None: every status, running first) of `topic` whose id starts
    with `prefix`. Reads at most about `budget` index entries."""
    sources = [i for i, (s, _) in enumerate(SOURCES) if status in (None, s)]
    source, start = decode_cursor(cursor) if cursor else (sources[0], None)
    if source not in sources:
        source, start = sources[0], None
    hits: list[tuple[str, int, int]] = []
    examined = indexed = 0
    next_cursor = None
    while True:
        found, resume, looked, size = walk(store, SOURCES[source][0], start, topic, prefix, limit - len(hits),
                                           max(limit, budget - examined))
        hits += [(member, score, source) for score, member in found]
        examined, indexed = examined + looked, indexed + size
        if resume is not None:
            next_cursor = encode_cursor(source, resume)
            break
        if source + 1 not in sources:
            break
        source, start = source + 1, None
        if len(hits) >= limit or examined >= budget:
            next_cursor = encode_cursor(source, None)
            break
    return Page(read_tasks(store, hits), next_cursor, examined, indexed)


def read_tasks(store: Store, hits: list[tuple[str, int, int]]) -> list[Row]:
    """The records of the members found, in one pipelined round trip."""
    if not hits:
        return []
    pipe = store.redis.pipeline(transaction=False)
    for member, _, _ in hits:
        pipe.hgetall(store.keys_for(member).task(member))
    rows = []
    for (member, score, source), record in zip(hits, pipe.execute()):
        status = SOURCES[source][0]
        if not record:
            continue  # expired or removed since the index was read
        try:
            rows.append(Row(member, score, status, Task.from_record(member, record), None))
        except TaskError as exc:
            rows.append(Row(member, score, status, None, str(exc)))
    return rows
