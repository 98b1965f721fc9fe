"""The AsyncClient: Client's methods, awaitable, on redis.asyncio.

    from delayd import AsyncClient
    c = AsyncClient.from_url("redis://127.0.0.1:6379/0")
    await c.add("order:cancel", 42, call="shop.tasks:cancel_order", delay=1800)

Validation, the key layout, the scripts and reply decoding are Client's own
(delayd.client.base), sent by delayd.store.transport; this module only awaits them.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Iterable

from delayd.client.base import BaseClient, Built
from delayd.client.errors import redis_errors
from delayd.client.listing import Walk
from delayd.model.task import Task
from delayd.store import connection
from delayd.store.keys import BucketKeys
from delayd.store.steps import Steps
from delayd.store.transport import AsyncTransport


def _awaitable(operation: Callable[..., Steps[Any]]) -> Callable[..., Any]:
    """An AsyncClient method running one of BaseClient's steps on the AsyncClient's connection."""
    @redis_errors
    async def method(self: "AsyncClient", *args: Any, **kwargs: Any) -> Any:
        return await self.transport.run(operation(self, *args, **kwargs))
    method.__name__ = operation.__name__.removesuffix("_steps")
    method.__doc__ = operation.__doc__
    return method


class AsyncClient(BaseClient):
    """Client for asyncio applications: the same methods, URLs (Redis Cluster and Sentinel too)
    and errors, each awaitable."""

    def connect(self, url: str) -> Any:
        client = connection.connect(url, connection.ASYNC)
        self.transport = AsyncTransport(client)
        return client

    async def close(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    get_store = _awaitable(BaseClient.store_steps)
    prepare = _awaitable(BaseClient.prepared_steps)  # (store, built): cron tasks given their first due time
    durability = _awaitable(BaseClient.durable_steps)  # how this Redis confirms a durable write; else DurabilityError

    @redis_errors
    async def add(self, /, topic: Any, id: Any, *, nx: bool = False, durable: bool = False, **fields: Any) -> bool:
        """Client.add, awaitable."""
        built = [self.build(topic, id, **fields)]
        self.refuse_nx(built, nx)
        store, (item,) = await self.transport.run(self.prepared_steps(built))
        return bool(await self._write([(store.keys_for(item[0].key), [item])], nx, durable))

    @redis_errors
    async def add_many(self, items: Iterable[dict[str, Any]], nx: bool = False, durable: bool = False) -> int:
        """Client.add_many, awaitable: every item is validated before anything is written."""
        return await self.add_built(self.build_many(items), nx, durable)

    @redis_errors
    async def add_built(self, built: list[Built], nx: bool = False, durable: bool = False) -> int:
        """Client.add_built, awaitable."""
        self.refuse_nx(built, nx)
        store, built = await self.transport.run(self.prepared_steps(built))
        return await self._write(self.batches(store, built), nx, durable)

    async def _write(self, calls: list[tuple[BucketKeys, list[Built]]], nx: bool, durable: bool) -> int:
        wait = await self.transport.run(self.durable_steps()) if durable else ()
        return await self.transport.run(self.write_steps(calls, nx, wait))

    @redis_errors
    async def iter_tasks(self, topic: str | None = None, status: str | None = None,
                         progress: Callable[[int, int, int], None] | None = None) -> AsyncIterator[Task]:
        """Client.iter_tasks as an async iterator: `async for task in c.iter_tasks(...)`."""
        walk = Walk(await self.get_store(), topic, status, self.config.retries)
        while not walk.done:
            if progress:
                progress(walk.bucket, walk.store.buckets, walk.read)
            for task in await self.transport.run(walk.page_steps()):
                yield task

    async def list(self, topic: str | None = None, status: str | None = None, limit: int = 100,
                   offset: int = 0, progress: Callable[[int, int, int], None] | None = None) -> list[Task]:
        """Client.list, awaitable: a page of tasks, filtered by topic and status."""
        tasks: list[Task] = []
        async for task in self.iter_tasks(topic, status, progress):
            if len(tasks) >= offset + limit:
                break
            tasks.append(task)
        return tasks[offset:]

    delete = _awaitable(BaseClient.delete_steps)
    retry = _awaitable(BaseClient.retry_steps)
    run_now = _awaitable(BaseClient.run_now_steps)
    pause = _awaitable(BaseClient.pause_steps)
    resume = _awaitable(BaseClient.resume_steps)
    paused = _awaitable(BaseClient.paused_steps)
    retry_failed = _awaitable(BaseClient.retry_failed_steps)
    set_limit = _awaitable(BaseClient.set_limit_steps)
    clear_limit = _awaitable(BaseClient.clear_limit_steps)
    limits = _awaitable(BaseClient.limits_steps)
    get = _awaitable(BaseClient.get_steps)
    count = _awaitable(BaseClient.count_steps)
    stats = _awaitable(BaseClient.stats_steps)
    daemons = _awaitable(BaseClient.daemons_steps)
    inspect = _awaitable(BaseClient.inspect_steps)
    browse = _awaitable(BaseClient.browse_steps)
    schedules = _awaitable(BaseClient.schedules_steps)
    last_hour = _awaitable(BaseClient.last_hour_steps)
    hosts = _awaitable(BaseClient.hosts_steps)
    disable_host = _awaitable(BaseClient.disable_host_steps)
    enable_host = _awaitable(BaseClient.enable_host_steps)
    replay = _awaitable(BaseClient.replay_steps)
    topics = _awaitable(BaseClient.topics_steps)
