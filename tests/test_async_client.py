"""AsyncClient: Client's methods, awaitable, from inside a running asyncio application."""
from __future__ import annotations

import asyncio
import time

import pytest

from delayd import AsyncClient, Client, DelaydError, DurabilityError, RedisUnavailable, TaskError
from delayd.connection import RedisURLError
from daemon_helper import Daemon
from redis_server import RedisServer, free_port, wait_for


def test_round_trip_inside_an_asyncio_application(redis_url, r):
    async def app() -> dict:
        async with AsyncClient() as c:  # the URL from DELAYD_REDIS_URL, as Client() reads it
            seen = {"repr": repr(c)}
            assert await c.add("mail", 1, call="delayd.examples:noop", delay=60) is True
            assert await c.add("mail", 1, call="delayd.examples:noop", delay=60, nx=True) is False
            task = await c.get("mail", 1)
            seen["get"] = (task.key, task.status, task.call)
            assert await c.get("mail", 404) is None
            added = await c.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 60} for i in range(2, 7)])
            seen["add_many"] = added
            await c.add("tick", 1, push="out", cron="0 3 * * *")  # first due time from Redis's clock
            seen["cron_due"] = (await c.get("tick", 1)).due_at
            seen["run_now"] = (await c.run_now("mail", 2), await c.run_now("mail", 404))
            seen["pause"] = await c.pause("mail")
            seen["paused"] = await c.paused()
            seen["resume"] = await c.resume("mail")
            seen["stats"] = (await c.stats())["topics"]["mail"]["counts"]
            seen["delete"] = (await c.delete("mail", 3), await c.delete("mail", 4, hard=True))
            seen["deleted"] = ((await c.get("mail", 3)).status, await c.get("mail", 4))
            with pytest.raises(TaskError, match="not failed"):
                await c.retry("mail", 1)
            seen["daemons"] = await c.daemons()
            # several operations in flight at once on the application's loop
            gotten = await asyncio.gather(*(c.get("mail", i) for i in range(1, 7)))
            seen["gathered"] = [t and t.key for t in gotten]
            return seen

    seen = asyncio.run(app())
    assert seen["repr"].startswith("AsyncClient(")
    assert seen["get"] == ("mail:1", "delayed", "delayd.examples:noop")
    assert seen["add_many"] == 5
    assert 0 < seen["cron_due"] - time.time() <= 86400
    assert seen["run_now"] == (True, False)
    # (no daemon: nothing was promoted to ready, so nothing to park)
    assert seen["pause"] == 0 and seen["paused"] == ["mail"] and seen["resume"] == 0
    assert seen["stats"]["delayed"] == 6
    assert seen["delete"] == (True, True) and seen["deleted"] == ("deleted", None)
    assert seen["daemons"] == []
    assert seen["gathered"] == ["mail:1", "mail:2", "mail:3", None, "mail:5", "mail:6"]
    # the same store as Client's: written by one, read by the other
    client = Client()
    assert client.get("mail", 5).push == "out"
    # mail:3 soft-deleted, mail:4 removed since the async stats() call
    assert client.stats()["topics"]["mail"]["counts"] == seen["stats"] | {"delayed": 4, "deleted": 1}
    client.close()


BAD_ADDS = [
    (("t", 1), {"call": "nocolon"}),
    (("t", 1), {"call": "a:b", "delay": -1}),
    (("t", 1), {"call": "a:b", "delay": 1, "at": 5}),
    (("t", 1), {"call": "a:b", "at": "yesterday"}),
    (("t", 1), {"call": "a:b", "colour": "red"}),
    (("", 1), {"call": "a:b"}),
    (("t", 1), {"call": "a:b", "every": 60, "cron": "* * * * *"}),
    (("t", 1), {}),
]


@pytest.mark.parametrize("args, fields", BAD_ADDS)
def test_validation_errors_are_clients_own_and_nothing_is_written(redis_url, r, args, fields):
    client = Client()
    with pytest.raises(TaskError) as sync_error:
        client.add(*args, **fields)
    with pytest.raises(TaskError) as sync_many:
        client.add_many([{"topic": "t", "id": 0, "call": "a:b"}, {"topic": args[0], "id": args[1], **fields}])
    client.close()

    async def app() -> tuple[str, str]:
        c = AsyncClient()
        try:
            with pytest.raises(TaskError) as one:
                await c.add(*args, **fields)
            with pytest.raises(TaskError) as many:
                await c.add_many([{"topic": "t", "id": 0, "call": "a:b"}, {"topic": args[0], "id": args[1], **fields}])
            return str(one.value), str(many.value)
        finally:
            await c.close()

    assert asyncio.run(app()) == (str(sync_error.value), str(sync_many.value))
    assert str(sync_many.value).startswith("item 1: ")
    assert r.keys("*") == []


def test_errors_of_the_same_classes_as_clients(redis_url, r, tmp_path):
    async def app(url: str) -> None:
        c = AsyncClient.from_url(url)
        try:
            await c.add("t", 1, call="a:b")
        finally:
            await c.close()

    port = free_port()
    with pytest.raises(RedisUnavailable) as info:
        asyncio.run(app(f"redis://:hunter2-secret@127.0.0.1:{port}/0"))
    assert f"127.0.0.1:{port}" in str(info.value) and "hunter2" not in str(info.value)
    # durable=True on a Redis that cannot confirm it: Client's error, nothing written
    with pytest.raises(DurabilityError, match="nothing was written"):
        asyncio.run(_durable_add(redis_url, 1))
    assert r.keys("*t:*") == []
    r.hset("delayd:meta", "buckets", "many")
    with pytest.raises(DelaydError, match="not a bucket count"):
        asyncio.run(app(redis_url))
    for url in ("redis+cluster://127.0.0.1:7000/", f"redis://127.0.0.1:{port}/?cluster=true",
                "redis+sentinel://127.0.0.1:26379/mymaster"):
        with pytest.raises(RedisURLError, match="not yet Redis Cluster or Sentinel"):
            AsyncClient.from_url(url)


async def _durable_add(url: str, n: int) -> tuple[bool, int]:
    async with AsyncClient.from_url(url) as c:
        one = await c.add("d", 0, call="delayd.examples:noop", durable=True)
        many = await c.add_many([{"topic": "d", "id": i, "call": "delayd.examples:noop"} for i in range(1, n)],
                                durable=True)
        return one, many


def test_durable_adds_confirmed_by_waitaof_or_fsync(tmp_path):
    with RedisServer(str(tmp_path / "always"), aof=True, extra=["--appendfsync", "always"]) as server:
        server.client().script_flush()
        assert asyncio.run(_durable_add(server.url, 1200)) == (True, 1199)
        assert Client.from_url(server.url).get("d", 1199).status == "delayed"


def test_a_task_added_by_the_async_client_runs_in_the_daemon(redis_url, r, tmp_path):
    async def app() -> None:
        async with AsyncClient.from_url(redis_url) as c:
            await c.add("hook", 1, push="out", delay=0, params={"from": "asyncio"})

    with Daemon(redis_url, tmp_path / "d1", buckets=2, queues=1):
        asyncio.run(app())
        wait_for(lambda: r.llen("out") == 1, 15, message="the daemon ran the task")
        client = Client.from_url(redis_url)
        wait_for(lambda: client.get("hook", 1).status == "ok", 15, message="recorded ok")
        client.close()
