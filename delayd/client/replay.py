"""Replay (`delayd replay --host HOST --since TIME`): send again the finished URL tasks of a host since a
time, each as a new run of the same task (the same record, so the same `webhook-id`: a merchant's
de-duplication sees the same message), for a merchant that lost what it was sent.

It walks each bucket's `done:ok` / `done:failed` index from `since` to the time it started (a task it
re-queues that finishes again meanwhile is not walked twice) in pages of PAGE entries: per page, the
members (one ZRANGEBYSCORE), their specs (one round trip), the host of each from its `url`, and one
retry.lua call per task of the host (one round trip), which re-queues it only if it is still finished
in that span. So any number of tasks streams through in bounded memory, three round trips per page.
"""
from __future__ import annotations

import json
from typing import Any, Callable, NamedTuple

import redis

from delayd.model.origin import origin
from delayd.store.steps import Batch, Steps, Stream, command
from delayd.store.transitions import Store

PAGE = 500


class Replayed(NamedTuple):
    examined: int   # finished tasks looked at (every host's)
    matched: int    # of which were URL tasks of the host
    requeued: int   # of which went back to run now (0 for a dry run)


def host_of(spec: Any) -> str | None:
    """The origin of a stored spec's `url`, or None (not a URL task, or unreadable)."""
    try:
        url = json.loads(spec).get("url")
        return origin(url) if isinstance(url, str) else None
    except (TypeError, ValueError, AttributeError):  # (a port written past the add gate: no host's)
        return None


def replay_steps(store: Store, named: list[str], since_ms: int, statuses: tuple[str, ...], dry_run: bool = False,
                 progress: Callable[[Replayed], None] | None = None) -> Steps[Replayed]:
    """Re-queue the tasks of `statuses` whose URL's origin is in `named`, finished from `since_ms` on."""
    seconds, micros = yield command("TIME")
    span = (since_ms, seconds * 1000 + micros // 1000)
    examined = matched = requeued = 0
    for keys in store.keys:
        for status in statuses:
            low, skip = span[0], 0  # the next page: from score `low`, past `skip` entries still there at it
            while True:
                page, = yield Batch([command("ZRANGEBYSCORE", keys.done(status), low, span[1], "WITHSCORES", "LIMIT",
                                             skip, PAGE, withscores=True)])
                if isinstance(page, Exception) and not isinstance(page, redis.exceptions.ResponseError):
                    raise page
                if not page or isinstance(page, Exception):  # (WRONGTYPE: an index of another type, nothing to replay)
                    break
                specs = yield Batch([command("HGET", keys.task(member), "spec") for member, _ in page])
                chosen = {member for (member, _), spec in zip(page, specs) if host_of(spec) in named}
                gone: set[str] = set()
                if chosen and not dry_run:
                    members = sorted(chosen)
                    answers = yield Stream([store.retry_call(m, status, span) for m in members], window=None)
                    gone = {m for m, code in zip(members, answers.replies) if int(code) == 1}
                examined, matched, requeued = examined + len(page), matched + len(chosen), requeued + len(gone)
                if progress:
                    progress(Replayed(examined, matched, requeued))
                last = page[-1][1]
                kept = sum(1 for member, score in page if score == last and member not in gone)
                low, skip = last, (skip if last == low else 0) + kept
                if len(page) < PAGE:
                    break
    return Replayed(examined, matched, requeued)
