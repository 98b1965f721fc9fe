"""Debounce (SPEC 8): an add with `debounce=S` replaces a task that has not started yet and moves its
due time to now + S, never later than `max_wait` after the first add of that pending run; otherwise
it is added due at now + S. Decided in add.lua, on Redis's clock (the record keeps `since`)."""
from __future__ import annotations

import asyncio

import pytest
from redis_server import now_ms, wait_for

from delayd import AsyncClient
from delayd.model.task import TaskError


def record(client, r, topic, id) -> dict:
    return r.hgetall(client.store.keys_for(f"{topic}:{id}").task(f"{topic}:{id}"))


def test_a_debounced_add_is_due_after_the_wait_and_a_second_one_moves_it(client, r):
    before = now_ms(r)
    assert client.add("search:reindex", 1, call="a:b", params={"n": 1}, debounce=30)
    first = record(client, r, "search:reindex", 1)
    assert int(first["since"]) == int(first["created"]) >= before
    assert int(first["due"]) == int(first["created"]) + 30_000
    assert client.add("search:reindex", 1, call="a:b", params={"n": 2}, debounce=30)
    second = record(client, r, "search:reindex", 1)
    assert second["since"] == first["since"]  # the pending run's first add is kept
    assert int(second["due"]) == int(second["created"]) + 30_000 >= int(first["due"])
    task = client.get("search:reindex", 1)
    assert task.params == {"n": 2} and task.status == "delayed"
    assert client.count("search:reindex") == 1


def test_max_wait_caps_how_far_a_debounce_puts_the_run_off(client, r):
    client.add("t", 1, call="a:b", debounce=30, max_wait=40)
    key = client.store.keys_for("t:1").task("t:1")
    r.hset(key, "since", now_ms(r) - 35_000)  # the pending run was first added 35 s ago
    client.add("t", 1, call="a:b", debounce=30, max_wait=40)
    capped = record(client, r, "t", 1)
    assert int(capped["due"]) == int(capped["since"]) + 40_000 < int(capped["created"]) + 30_000
    r.hset(key, "since", now_ms(r) - 60_000)  # past its max wait: due now, never in the past
    client.add("t", 1, call="a:b", debounce=30, max_wait=40)
    now = record(client, r, "t", 1)
    assert int(now["due"]) == int(now["created"])
    delayed_key = client.store.keys_for("t:1").delayed
    assert r.zscore(delayed_key, "t:1") == int(now["due"])


@pytest.mark.parametrize("state", [{"runs": "1"}, {"status": "running"}, {"status": "ok"}])
def test_a_task_that_has_started_gets_a_new_pending_run(client, r, state):
    client.add("t", 1, call="a:b", debounce=30, max_wait=40)
    key = client.store.keys_for("t:1").task("t:1")
    r.hset(key, mapping={"since": now_ms(r) - 35_000, **state})
    client.add("t", 1, call="a:b", debounce=30, max_wait=40)
    fresh = record(client, r, "t", 1)
    assert fresh["since"] == fresh["created"] and int(fresh["due"]) == int(fresh["created"]) + 30_000


@pytest.mark.parametrize("fields, message", [
    ({"debounce": 30, "delay": 5}, "give debounce or delay/at, not both"),
    ({"debounce": 30, "at": 5}, "give debounce or delay/at, not both"),
    ({"max_wait": 30}, "max_wait is the most a debounce may put a task off: give debounce too"),
    ({"debounce": 30, "max_wait": 10}, "max_wait (10 s) must be at least debounce (30 s)"),
    ({"debounce": -1}, "debounce must be a number of seconds from 0 to ten years, got -1"),
    ({"debounce": "30"}, "debounce must be a number of seconds from 0 to ten years, got '30'"),
    ({"debounce": 30, "every": 60}, "debounce is for a task without every or cron"),
])
def test_what_debounce_cannot_be_given_with(client, r, fields, message):
    with pytest.raises(TaskError, match=f"^{message.replace('(', '.').replace(')', '.')}$"):
        client.add("t", 1, call="a:b", **fields)
    assert r.keys("*") == [] or all(":t:" not in k for k in r.keys("*"))


def test_debounce_with_nx_is_refused_by_every_client(client, r):
    with pytest.raises(TaskError, match="^give debounce or nx, not both$"):
        client.add("t", 1, call="a:b", debounce=5, nx=True)
    with pytest.raises(TaskError, match="give debounce or nx, not both"):
        client.add_many([{"topic": "t", "id": 1, "call": "a:b", "debounce": 5}], nx=True)

    async def refused() -> str:
        async with AsyncClient.from_url(client.url) as c:
            with pytest.raises(TaskError) as error:
                await c.add("t", 1, call="a:b", debounce=5, nx=True)
            assert await c.add("t", 2, call="a:b", debounce=5)
            return str(error.value)
    assert asyncio.run(refused()) == "give debounce or nx, not both"
    assert client.get("t", 1) is None and client.get("t", 2).status == "delayed"


@pytest.mark.system
@pytest.mark.daemon(buckets=2, queues=1)
def test_a_burst_of_debounced_adds_runs_once_with_the_last_arguments(daemon, client, r, redis_url):
    for n in range(5):
        client.add("search:reindex", 1, call="delayd.examples:record", debounce=1,
                   params={"list": "ran", "redis": redis_url, "n": n})
    wait_for(lambda: client.get("search:reindex", 1).status == "ok", 15, message="the debounced task ran")
    task = client.get("search:reindex", 1)
    assert r.lrange("ran", 0, -1) == ["search:reindex:1:1"] and task.params["n"] == 4 and task.runs == 1
    assert task.last_run_at - task.created_at >= 1.0  # run after the last add's wait, not the first's
