"""A walk over every task (of a topic, with a status), written once as steps
(delayd.store.steps) for Client.iter_tasks and AsyncClient.iter_tasks.

The walk goes bucket by bucket through each bucket's own indexes (ready lists, the
delayed zset, parked tasks, tasks held back by a limit, leases, the finished zsets), a page of at
most PAGE members at a time; a member seen twice in a bucket (a ready list may hold a stale
entry) is listed once. Each page's records are read in one round trip. A corrupt
record is listed too, as `Read.unreadable` (delayd.model.record), with what is wrong in its
last_error. `records_steps` is the one read of task records (the dashboard's pages use it too).
"""
from __future__ import annotations

from typing import Any, Sequence

import redis

from delayd.model import record as record_mod
from delayd.model.task import DEFAULT_RETRIES, FINISHED, Task
from delayd.store.keys import BucketKeys
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store

PAGE = 500  # members of one index read per round trip


class Walk:
    """Where a listing is. `page_steps` moves it on; `done` once every bucket was read.
    `default_retries`: the reader's `retries` setting, for tasks that give none."""

    def __init__(self, store: Store, topic: str | None = None, status: str | None = None,
                 default_retries: int = DEFAULT_RETRIES):
        self.store, self.topic, self.status = store, topic, status
        self.default_retries = default_retries
        self.bucket = 0
        self.read = 0                 # records read so far (for a progress report)
        self.done = store.buckets == 0
        self._sources: list[tuple[str, Any]] | None = None  # the bucket's indexes still to read
        self._offset = 0
        self._seen: set[str] = set()

    def _sources_steps(self, keys: BucketKeys) -> Steps[list[tuple[str, Any]]]:
        """The indexes of a bucket that hold tasks with the walk's status, as (list|zset, key)."""
        sources: list[tuple[str, Any]] = []
        if self.status in (None, "delayed"):
            sources += [("list", key) for key in (*keys.ready, *keys.ready_url)] + [("zset", keys.delayed)]
            sources += [("zset", keys.parked(topic)) for topic in (yield command("HKEYS", keys.paused))]
            sources += [("zset", keys.held(topic)) for topic in (yield command("ZRANGE", keys.limited, 0, -1))]
        if self.status in (None, "running"):
            sources.append(("zset", keys.leases))
        return sources + [("zset", keys.done(s)) for s in FINISHED if self.status in (None, s)]

    def page_steps(self) -> Steps[list[Task]]:
        """The tasks of the next page of one index (possibly none); sets `done` after the last."""
        keys = self.store.keys[self.bucket]
        if self._sources is None:
            self._sources, self._offset, self._seen = (yield from self._sources_steps(keys)), 0, set()
        if not self._sources:
            self.bucket += 1
            self._sources = None
            self.done = self.bucket >= self.store.buckets
            return []
        kind, key = self._sources[0]
        try:
            page = yield command("LRANGE" if kind == "list" else "ZRANGE", key, self._offset, self._offset + PAGE - 1)
        except redis.exceptions.ResponseError:  # WRONGTYPE: the scripts set it aside
            page = []
        if len(page) < PAGE:
            self._sources.pop(0)
            self._offset = 0
        else:
            self._offset += PAGE
        members = [m for m in page
                   if m not in self._seen and (self.topic is None or m.rpartition(":")[0] == self.topic)]
        self._seen.update(members)
        if not members:
            return []
        self.read += len(members)
        reads = yield from records_steps(self.store, members, self.default_retries, keys)
        tasks = [read.task or read.unreadable() for read in reads if not read.gone]  # corrupt: shown, not hidden
        return [task for task in tasks if self.status in (None, task.status)]


def records_steps(store: Store, members: Sequence[str], default_retries: int = DEFAULT_RETRIES,
                  keys: BucketKeys | None = None) -> Steps[list[record_mod.Read]]:
    """The records of `members` (delayd.model.record.read), in one round trip (none for no members),
    from `keys`' bucket (None: each member's own). A reply that is an error other than WRONGTYPE
    (not a hash) is raised."""
    if not members:
        return []
    replies = yield Batch([command("HGETALL", (keys or store.keys_for(m)).task(m)) for m in members])
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, redis.exceptions.ResponseError):
            raise reply
    return [record_mod.read(member, reply, default_retries) for member, reply in zip(members, replies)]
