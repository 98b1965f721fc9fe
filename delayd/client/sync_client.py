"""The Client: add, read, list, delete and retry tasks; read counts.

    from delayd import Client
    c = Client.from_url("redis://:secret@127.0.0.1:6379/0")
    c.add("order:cancel", 42, call="shop.tasks:cancel_order", delay=1800)
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator

from redis.cluster import RedisCluster

from delayd.client.base import (
    ADD_BATCH,
    NEXT_CRON,
    TASK_FIELDS,
    BaseClient,
    Built,
    to_ms,
)
from delayd.client.errors import (
    AddInterrupted,
    DelaydError,
    DurabilityError,
    RedisUnavailable,
    counting_adds,
    redis_errors,
    refusal,
)
from delayd.client.listing import Walk
from delayd.model.task import Task
from delayd.store import connection, held
from delayd.store import stats as stats_mod
from delayd.store.keys import BucketKeys
from delayd.store.steps import Steps, run

__all__ = ["Client", "DelaydError", "DurabilityError", "RedisUnavailable", "AddInterrupted", "ADD_BATCH",
           "TASK_FIELDS", "to_ms", "refusal"]


def _sync(operation: Callable[..., Steps[Any]]) -> Callable[..., Any]:
    """A Client method running one of BaseClient's steps on the Client's connection."""
    @redis_errors
    def method(self: "Client", *args: Any, **kwargs: Any) -> Any:
        return run(self.redis, operation(self, *args, **kwargs))
    method.__name__ = operation.__name__.removesuffix("_steps")
    method.__doc__ = operation.__doc__
    return method


class Client(BaseClient):
    """Access to one delayd store (a Redis URL and a key prefix)."""

    def connect(self, url: str) -> Any:
        self._held = held.held(client := connection.connect(url))  # for single adds: see delayd/store/held.py
        return client

    @property
    def on_cluster(self) -> bool:
        return isinstance(self.redis, RedisCluster)

    def close(self) -> None:
        self.redis.close()

    store = property(_sync(BaseClient.store_steps))

    # -- writing ---------------------------------------------------------------------
    @redis_errors
    def add(self, topic: Any, id: Any, *, nx: bool = False, durable: bool = False, **fields: Any) -> bool:
        """Add (or replace) a task. With nx=True, return False and change nothing if it exists.

        durable=True returns only once the write is on a replica or on disk (see delayd.store.durable);
        DurabilityError when this Redis cannot confirm that (then nothing is written).
        """
        item = self.build(topic, id, **fields)
        store = self._store
        if store is None or item[1] == NEXT_CRON:  # else prepared_steps would need no request
            store, (item,) = run(self.redis, self.prepared_steps([item]))
        keys = store.keys_for(item[0].key)
        if durable:
            wait = run(self.redis, self.durable_steps())
            return bool(self._add_calls([(keys, [item])], nx, wait))
        return bool(store.add(keys, [item], nx, held=self._held)[0])

    @redis_errors
    def add_many(self, items: Iterable[dict[str, Any]], nx: bool = False, durable: bool = False) -> int:
        """Add many tasks (dicts of add()'s keyword arguments) in one round trip per batch.

        Every item is validated before anything is written; returns how many were written.
        AddInterrupted (a RedisUnavailable) if a call is refused or the connection fails midway:
        it says how many were written (adding them again with nx=True skips those).
        durable=True: as for add(), each batch is confirmed on a replica or on disk.
        """
        return self.add_built(self.build_many(items), nx, durable)

    @redis_errors
    def add_built(self, built: list[Built], nx: bool = False, durable: bool = False) -> int:
        """Write tasks already validated by build() (what add_many does after validating)."""
        store, built = run(self.redis, self.prepared_steps(built))
        wait = run(self.redis, self.durable_steps()) if durable else ()
        return self._add_calls(self.batches(store, built), nx, wait)

    def _add_calls(self, calls: list[tuple[BucketKeys, list[Built]]], nx: bool,
                   wait: tuple[Any, ...] = ()) -> int:
        if self.on_cluster:
            # redis-py's cluster pipeline refuses EVALSHA: one script call per bucket batch.
            # A batch that fails raises AddInterrupted, counting what the replies before it wrote.
            with counting_adds(self, sum(len(entries) for _, entries in calls)) as replies:
                replies += (self.store.add(keys, entries, nx) for keys, entries in calls)
                return sum(sum(reply) for reply in replies)
        with held.checked_out(self.redis) as conn:
            return run(conn, self.write_steps(calls, nx, wait))

    delete = _sync(BaseClient.delete_steps)
    retry = _sync(BaseClient.retry_steps)
    run_now = _sync(BaseClient.run_now_steps)
    pause = _sync(BaseClient.pause_steps)
    resume = _sync(BaseClient.resume_steps)
    paused = _sync(BaseClient.paused_steps)

    # -- reading ---------------------------------------------------------------------
    get = _sync(BaseClient.get_steps)
    count = _sync(BaseClient.count_steps)
    daemons = _sync(BaseClient.daemons_steps)

    @redis_errors
    def stats(self) -> dict[str, Any]:
        """Counts per status (and ready per priority), oldest due lag, runs and tasks/s over
        the last minute, lateness p50/p99: overall, per topic and per bucket (see delayd.store.stats)."""
        return stats_mod.collect(self.redis, self.store)

    @redis_errors
    def iter_tasks(self, topic: str | None = None, status: str | None = None,
                   progress: Callable[[int, int, int], None] | None = None) -> Iterator[Task]:
        """Every task (of a topic, with a status), bucket by bucket (delayd.client.listing).

        A corrupt record is listed too, as `Task.unreadable`: no target, and a last_error
        that says what is wrong (quarantined ones: the quarantine reason).

        `progress(bucket, buckets, records_read)` is called before each page of reads."""
        walk = Walk(self.store, topic, status, self.config.retries)
        while not walk.done:
            if progress:
                progress(walk.bucket, walk.store.buckets, walk.read)
            yield from run(self.redis, walk.page_steps())

    def list(self, topic: str | None = None, status: str | None = None, limit: int = 100,
             offset: int = 0, progress: Callable[[int, int, int], None] | None = None) -> list[Task]:
        """A page of tasks, filtered by topic and status."""
        return list(itertools.islice(self.iter_tasks(topic, status, progress), offset, offset + limit))
