"""AsyncClient: Client's methods, awaitable, from inside a running asyncio application."""
from __future__ import annotations

import asyncio
import time

import pytest
from daemon_helper import Daemon
from redis_server import RedisServer, free_port, lose_scripts, script_loads, wait_for

from delayd import (
    AsyncClient,
    Client,
    DelaydError,
    DurabilityError,
    RedisUnavailable,
    TaskError,
)
from delayd.store.connection import RedisURLError


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
            seen["count"] = (await c.count("mail"), await c.count("mail", "ok"))
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
    assert seen["count"] == (sum(seen["stats"].values()), 0)
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
    (("t", 1), {"call": "a:b", "self": 1}),  # (a TypeError of the method's own `self` before)
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
    with pytest.raises(RedisURLError, match="unsupported Redis URL scheme"):
        AsyncClient.from_url("http://127.0.0.1/")


def test_add_many_streams_its_calls_and_loads_the_script_again(redis_url, r):
    """Many add.lua calls in flight on one connection (not one awaited after the other), a
    missing script (NOSCRIPT, or a missing function) answered by one load, and bad input (the last item)
    writing nothing."""
    items = [{"topic": "bulk", "id": i, "call": "a:b"} for i in range(5000)]

    async def app() -> tuple[int, int]:
        async with AsyncClient.from_url(redis_url) as c:
            await c.add("seed", 1, call="a:b")
            keys = r.dbsize()
            with pytest.raises(TaskError, match="item 4999"):
                await c.add_many(items[:-1] + [{**items[-1], "priority": 7}])
            assert r.dbsize() == keys
            lose_scripts(r)
            r.config_resetstat()
            return await c.add_many(items), await c.add_many(items[:10], nx=True)

    assert asyncio.run(app()) == (5000, 0)
    assert script_loads(r) == 1  # one SCRIPT LOAD (FUNCTION LOAD) for every call refused
    assert Client.from_url(redis_url).stats()["counts"]["delayed"] == 5001


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


@pytest.mark.system
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


def test_every_public_client_method_is_on_the_async_client_awaitable():
    import inspect
    own = {name for name in vars(Client) if not name.startswith("_")}
    not_awaited = {"connect", "on_cluster", "store"}  # the connection's factory, a flag; get_store() for store
    for name in sorted(own - not_awaited):
        method = getattr(AsyncClient, name, None)
        assert method is not None, f"AsyncClient has no {name}"
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name
    assert inspect.iscoroutinefunction(AsyncClient.get_store)


def test_list_and_iter_tasks_as_clients_own(redis_url, r):
    client = Client()
    client.add_many([{"topic": "a", "id": i, "call": "delayd.examples:noop", "delay": 60} for i in range(5)])
    client.add_many([{"topic": "many", "id": i, "push": "out", "delay": 60} for i in range(1200)])  # > a page
    client.delete("a", 4)
    member = "a:3"
    key = client.store.keys_for(member).task(member)
    r.delete(key)
    r.set(key, "not a hash")  # a corrupt record: listed, saying what is wrong
    queries = [((), {}), (("a",), {}), (("a", "delayed"), {}), ((None, "deleted"), {}), (("many",), {"limit": 2000}),
               (("a",), {"limit": 2, "offset": 1}), (("nope",), {})]

    def shown(tasks) -> list[tuple]:
        return [(t.key, t.status, t.last_error) for t in tasks]

    sync = [shown(client.list(*args, **kw)) for args, kw in queries]
    sync_progress: list = []
    sync_all = shown(client.iter_tasks(progress=lambda *p: sync_progress.append(p)))
    client.close()

    async def app() -> tuple[list, list, list]:
        async with AsyncClient() as c:
            progress: list = []
            every = shown([t async for t in c.iter_tasks(progress=lambda *p: progress.append(p))])
            return [shown(await c.list(*args, **kw)) for args, kw in queries], every, progress

    listed, every, progress = asyncio.run(app())
    assert listed == sync and every == sync_all and progress == sync_progress
    assert len(sync_all) == 1205 and len(sync[4]) == 1200
    assert sorted(k for k, _, _ in sync[2]) == ["a:0", "a:1", "a:2"]
    [corrupt] = [row for row in sync[1] if row[0] == "a:3"]
    assert "not a hash" in corrupt[2]
    assert [row[:2] for row in sync[3]] == [("a:4", "deleted")]
    assert sync[5] == sync[1][1:3] and sync[6] == []


def test_the_dashboards_reads_and_retry_failed_as_clients_own(redis_url, r):
    """The dashboard's reads (browse, schedules, inspect, last_hour, topics, paused) and its bulk retry are
    BaseClient's steps: the AsyncClient answers what the Client answers, damaged records included."""
    client = Client()
    client.add_many([{"topic": "t", "id": f"k{i:02d}", "call": "delayd.examples:noop", "delay": 60 + i}
                     for i in range(30)])
    client.add_many([{"topic": "s", "id": f"e{i:02d}", "push": "out", "every": 60} for i in range(12)])
    client.pause("s")
    key = client.store.keys_for("t:k03").task("t:k03")
    r.delete(key)
    r.rpush(key, "not", "a", "hash")
    r.hset(client.store.keys_for("t:k04").task("t:k04"), "due", "soon")

    def fail(members) -> None:  # as a run that failed leaves them (the counters aside)
        for member in members:
            keys = client.store.keys_for(member)
            r.zadd(keys.done("failed"), {member: r.zscore(keys.delayed, member) or 1})
            r.zrem(keys.delayed, member)
            r.hset(keys.task(member), "status", "failed")

    calls = [("browse", (None,), {"limit": 7}), ("browse", ("delayed", "t", "k1"), {}), ("browse", ("failed",), {}),
             ("schedules", (), {"limit": 5}), ("schedules", ("s", "e1"), {}), ("inspect", ("t", "k03"), {}),
             ("inspect", ("t", "k04"), {}), ("inspect", ("t", "k00"), {}), ("inspect", ("t", "nope"), {}),
             ("topics", (), {}), ("paused", (), {})]
    fail(["t:k05", "t:k06", "t:k07"])

    def pages(read) -> list:  # every page of a list, by its cursors
        found, cursor = [], None
        while True:
            page = read(cursor)
            found.append(page)
            if page.cursor is None:
                return found
            cursor = page.cursor

    sync = [getattr(client, name)(*args, **kw) for name, args, kw in calls]
    sync_pages = pages(lambda cursor: client.browse(limit=4, budget=5, cursor=cursor))
    sync_minutes = [m.events for m in client.last_hour()]

    async def app() -> tuple:
        async with AsyncClient() as c:
            answers = [await getattr(c, name)(*args, **kw) for name, args, kw in calls]
            found, cursor = [], None
            while True:
                found.append(await c.browse(limit=4, budget=5, cursor=cursor))
                if (cursor := found[-1].cursor) is None:
                    break
            minutes = [m.events for m in await c.last_hour()]
            with pytest.raises(ValueError, match="cursor"):
                await c.browse(cursor="!")
            return answers, found, minutes

    async def retry_failed() -> tuple:
        async with AsyncClient() as c:
            first = await c.retry_failed("t", batch=2)
            return first, await c.retry_failed("t", first.cursor, batch=2)

    answers, found, minutes = asyncio.run(app())
    assert answers == sync and found == sync_pages and minutes == sync_minutes
    first = client.retry_failed("t", batch=2)
    sync_retried = first, client.retry_failed("t", first.cursor, batch=2)
    fail(["t:k05", "t:k06", "t:k07"])
    def outcome(steps) -> list:  # (a cursor holds a failure's time: the second sweep's are later)
        return [(done.retried, done.failed_left, done.cursor is None) for done in steps]
    assert outcome(asyncio.run(retry_failed())) == outcome(sync_retried) == [(2, 0, False), (1, 0, True)]
    with pytest.raises(ValueError, match="cursor"):
        client.browse(cursor="!")
    client.close()
    first, by_status, failed, schedules, of_s, not_a_hash, corrupt, good, missing, topics, paused = sync
    assert len(first.rows) == 7 and first.cursor is not None
    assert [row.member for row in failed.rows] == ["t:k07", "t:k06", "t:k05"]
    assert [row.member for row in by_status.rows] == [f"t:k{i}" for i in range(10, 20)]
    assert [row.member for row in schedules.rows] == [f"s:e{i:02d}" for i in range(5)]
    assert [row.member for row in of_s.rows] == [f"s:e{i}" for i in range(10, 12)]
    assert not_a_hash.kind == "list" and not_a_hash.read.task is None
    assert corrupt.read.task is None and "does not parse" in corrupt.read.error and corrupt.read.record["due"] == "soon"
    assert good.read.task.key == "t:k00" and good.quarantined is None and missing is None
    assert topics == ["s", "t"] and paused == ["s"]
    assert sum(len(page.rows) for page in sync_pages) == 42  # the record that is not a hash is a row too


async def _round_trip(url: str) -> dict:
    """What an application does with AsyncClient, on `url`."""
    async with AsyncClient.from_url(url) as c:
        seen = {"add": await c.add("mail", 0, call="delayd.examples:noop", delay=60)}
        seen["add_many"] = await c.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 60}
                                             for i in range(1, 451)])  # several batches, every bucket
        seen["get"] = (await c.get("mail", 7)).push
        seen["run_now"] = await c.run_now("mail", 8)
        seen["pause"] = (await c.pause("mail"), await c.paused(), await c.resume("mail"))
        seen["delete"] = await c.delete("mail", 9)
        seen["stats"] = (await c.stats())["topics"]["mail"]["counts"]
        seen["listed"] = sorted(t.key for t in await c.list("mail", "delayed", limit=1000))
        seen["deleted"] = [t.key async for t in c.iter_tasks(status="deleted")]
        seen["daemons"] = await c.daemons()
        return seen


def _expected(seen: dict, url: str) -> None:
    assert seen["add"] is True and seen["add_many"] == 450 and seen["get"] == "out" and seen["run_now"] is True
    assert seen["pause"] == (0, ["mail"], 0) and seen["delete"] is True
    assert seen["stats"]["delayed"] == 450 and seen["stats"]["deleted"] == 1
    assert len(seen["listed"]) == 450 and "mail:9" not in seen["listed"]
    assert seen["deleted"] == ["mail:9"] and seen["daemons"] == []
    client = Client.from_url(url)  # the same store as Client's
    assert client.stats()["topics"]["mail"]["counts"] == seen["stats"]
    client.close()


@pytest.mark.system
def test_round_trip_on_redis_cluster():
    from cluster_helper import Cluster
    with Cluster(3) as cluster:
        _expected(asyncio.run(_round_trip(cluster.url)), cluster.url)


@pytest.mark.system
def test_round_trip_behind_sentinel():
    from cluster_helper import SentinelSet
    with SentinelSet() as sentinels:
        _expected(asyncio.run(_round_trip(sentinels.url)), sentinels.url)
