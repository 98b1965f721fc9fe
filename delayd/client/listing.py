"""A walk over every task (of a topic, with a status), written once as steps
(delayd.store.steps) for Client.iter_tasks and AsyncClient.iter_tasks.

The order is defined, whatever state each task is in: bucket by bucket (a task's bucket is fixed by
its key: delayd.store.keys.bucket_of), and by key within a bucket. A bucket's members are gathered
from its own indexes first (ready lists, the delayed zset, parked tasks, tasks held back by a limit,
leases, the finished zsets: NAMES at a time), each once, then sorted; their records are read a page
of at most PAGE per round trip. So a page taken by offset (`delayd ls --offset N`, `Client.list`)
follows the one before it even when tasks started, finished or were deleted in between (a task then
moves to another index, which listed index by index was shown twice or not at all); only a task added
or removed for good in between shifts the ones after it. The cost: one bucket's names held at a time.
A corrupt record is listed too, as `Read.unreadable` (delayd.model.record), with what is wrong in its
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

PAGE = 500      # records read per round trip
NAMES = 10_000  # members of one index read per round trip


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
        self._members: list[str] | None = None  # the bucket's members, by key; None: not gathered yet
        self._at = 0                            # how many of them were read

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

    def _members_steps(self, keys: BucketKeys) -> Steps[list[str]]:
        """The members of the bucket's indexes (of the walk's topic), each once (a ready list may hold
        a stale entry), by key."""
        members: set[str] = set()
        for kind, key in (yield from self._sources_steps(keys)):
            start = 0
            while True:
                try:
                    page = yield command("LRANGE" if kind == "list" else "ZRANGE", key, start, start + NAMES - 1)
                except redis.exceptions.ResponseError:  # WRONGTYPE: the scripts set it aside
                    page = []
                members.update(m for m in page if self.topic is None or m.rpartition(":")[0] == self.topic)
                if len(page) < NAMES:
                    break
                start += NAMES
        return sorted(members)

    def page_steps(self) -> Steps[list[Task]]:
        """The tasks of the next page of the bucket's members (possibly none); sets `done` after the last."""
        keys = self.store.keys[self.bucket]
        if self._members is None:
            self._members, self._at = (yield from self._members_steps(keys)), 0
        members = self._members[self._at:self._at + PAGE]
        self._at += PAGE
        if self._at >= len(self._members):
            self.bucket += 1
            self._members = None
            self.done = self.bucket >= self.store.buckets
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
