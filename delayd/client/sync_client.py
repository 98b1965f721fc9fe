"""The Client: add, read, list, delete and retry tasks; read counts.

    from delayd import Client
    c = Client.from_url("redis://:secret@127.0.0.1:6379/0")
    c.add("order:cancel", 42, call="shop.tasks:cancel_order", delay=1800)
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator

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
    redis_errors,
    refusal,
)
from delayd.client.listing import Walk
from delayd.model.task import Task
from delayd.store import connection
from delayd.store.keys import BucketKeys
from delayd.store.steps import Steps
from delayd.store.transport import Transport

__all__ = ["Client", "DelaydError", "DurabilityError", "RedisUnavailable", "AddInterrupted", "ADD_BATCH",
           "TASK_FIELDS", "to_ms", "refusal"]


def _sync(operation: Callable[..., Steps[Any]]) -> Callable[..., Any]:
    """A Client method running one of BaseClient's steps on the Client's connection."""
    @redis_errors
    def method(self: "Client", *args: Any, **kwargs: Any) -> Any:
        return self.transport.run(operation(self, *args, **kwargs))
    method.__name__ = operation.__name__.removesuffix("_steps")
    method.__doc__ = operation.__doc__
    return method


class Client(BaseClient):
    """Access to one delayd store (a Redis URL and a key prefix)."""

    def connect(self, url: str) -> Any:
        client = connection.connect(url)
        self.transport = Transport(client, hold=True)  # single calls on a kept connection: delayd/store/held.py
        return client

    def close(self) -> None:
        connection.close(self.redis)

    store = property(_sync(BaseClient.store_steps))

    # -- writing ---------------------------------------------------------------------
    @redis_errors
    def add(self, /, topic: Any, id: Any, *, nx: bool = False, durable: bool = False, **fields: Any) -> bool:
        """Add (or replace) a task. With nx=True, return False and change nothing if it exists.

        durable=True returns only once the write is on a replica or on disk (see delayd.store.durable);
        DurabilityError when this Redis cannot confirm that (then nothing is written).
        """
        item = self.build(topic, id, **fields)
        if nx:
            self.refuse_nx([item], nx)
        store = self._store
        if store is None or item[1] == NEXT_CRON:  # else prepared_steps would need no request
            store, (item,) = self.transport.run(self.prepared_steps([item]))
        keys = store.keys_for(item[0].key)
        if durable:
            return bool(self._write([(keys, [item])], nx, durable))
        return bool(self.transport.call(store.add_call(keys, [item], nx)))

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
        self.refuse_nx(built, nx)
        store, built = self.transport.run(self.prepared_steps(built))
        return self._write(self.batches(store, built), nx, durable)

    def _write(self, calls: list[tuple[BucketKeys, list[Built]]], nx: bool, durable: bool) -> int:
        wait = self.transport.run(self.durable_steps()) if durable else ()
        return self.transport.run(self.write_steps(calls, nx, wait))

    delete = _sync(BaseClient.delete_steps)
    retry = _sync(BaseClient.retry_steps)
    run_now = _sync(BaseClient.run_now_steps)
    pause = _sync(BaseClient.pause_steps)
    resume = _sync(BaseClient.resume_steps)
    paused = _sync(BaseClient.paused_steps)
    retry_failed = _sync(BaseClient.retry_failed_steps)
    set_limit = _sync(BaseClient.set_limit_steps)
    clear_limit = _sync(BaseClient.clear_limit_steps)
    limits = _sync(BaseClient.limits_steps)

    # -- reading (delayd.client.reads) -------------------------------------------------
    get = _sync(BaseClient.get_steps)
    count = _sync(BaseClient.count_steps)
    daemons = _sync(BaseClient.daemons_steps)
    inspect = _sync(BaseClient.inspect_steps)
    browse = _sync(BaseClient.browse_steps)
    schedules = _sync(BaseClient.schedules_steps)
    last_hour = _sync(BaseClient.last_hour_steps)
    hosts = _sync(BaseClient.hosts_steps)
    disable_host = _sync(BaseClient.disable_host_steps)
    enable_host = _sync(BaseClient.enable_host_steps)
    replay = _sync(BaseClient.replay_steps)
    topics = _sync(BaseClient.topics_steps)

    stats = _sync(BaseClient.stats_steps)

    @redis_errors
    def iter_tasks(self, topic: str | None = None, status: str | None = None,
                   progress: Callable[[int, int, int], None] | None = None) -> Iterator[Task]:
        """Every task (of a topic, with a status), bucket by bucket and by key within a bucket
        (delayd.client.listing: an order that offsets keep while tasks change state).

        A corrupt record is listed too, as `Task.unreadable`: no target, and a last_error
        that says what is wrong (quarantined ones: the quarantine reason).

        `progress(bucket, buckets, records_read)` is called before each page of reads."""
        walk = Walk(self.store, topic, status, self.config.retries)
        while not walk.done:
            if progress:
                progress(walk.bucket, walk.store.buckets, walk.read)
            yield from self.transport.run(walk.page_steps())

    def list(self, topic: str | None = None, status: str | None = None, limit: int = 100,
             offset: int = 0, progress: Callable[[int, int, int], None] | None = None) -> list[Task]:
        """A page of tasks, filtered by topic and status."""
        return list(itertools.islice(self.iter_tasks(topic, status, progress), offset, offset + limit))
