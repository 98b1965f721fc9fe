"""Paused topics cost each promote and claim call a bounded amount whatever their number, and never stop
other topics (issue 41: ~8,000 paused topics made every promote fail with `too many results to unpack`)."""
from __future__ import annotations

import logging

import pytest
import redis
import test_store
from redis_server import now_ms
from store_helper import DAY_MS, claim, promote_all, record
from test_store import add, ready_members

from delayd.workers.process import RedisHealth

store, client = test_store.store, test_store.client  # the fixtures: a 1-bucket store, its Client
PAUSED = 10_000


def pause_many(r, client, n: int) -> None:
    """Flag `n` topics paused in every bucket, as Client.pause does (pause.lua's HSET of a generation), in
    one pipeline: 10,000 pause calls would take the test seconds."""
    client.pause("tenant0:notify")
    generation = r.hget(client.store.keys[0].paused, "tenant0:notify")
    for keys in client.store.keys:
        r.hset(keys.paused, mapping={f"tenant{i}:notify": generation for i in range(n)})


def redis_usec(r) -> int:
    """Redis's own time spent in commands so far (µs), from INFO commandstats."""
    return sum(stat["usec"] for stat in r.info("commandstats").values())


def test_ten_thousand_paused_topics_stop_nothing_and_cost_each_promote_and_claim_under_a_ms(r, store, client):
    keys = store.keys[0]
    pause_many(r, client, PAUSED)
    add(store, "tenant7:notify", 1, at_ms=now_ms(r) - 10)  # of a paused topic: parked
    add(store, "other", 1, at_ms=now_ms(r) - 5)
    done = promote_all(store)
    assert done.moved == 1 and ready_members(r, keys) == ["other:1"]
    assert r.zrange(keys.parked("tenant7:notify"), 0, -1) == ["tenant7:notify:1"]
    assert len(store.learned[0]) < 10  # the reply names what is near due, not every paused topic's set
    [run] = claim(store)
    assert run["member"] == "other:1" and record(r, store, "other:1")["status"] == "running"
    # Idle ticks and claims: Redis's own time per call, averaged over 20 of each.
    calls = 20
    before = redis_usec(r)
    for _ in range(calls):
        assert store.promote(0, 200, DAY_MS).full is False
    promote_us = (redis_usec(r) - before) / calls
    add(store, "other", 2, at_ms=now_ms(r) - 5)
    promote_all(store)
    before = redis_usec(r)
    for _ in range(calls):
        claim(store)
    claim_us = (redis_usec(r) - before) / calls
    assert promote_us < 1000 and claim_us < 1000, (promote_us, claim_us)


def test_a_script_error_is_logged_as_one_not_as_redis_unavailable(r, caplog):
    with pytest.raises(redis.exceptions.ResponseError) as refused:
        r.eval("return redis.call('HGETALL', 'a', 'b', 'c')", 0)
    health = RedisHealth(logging.getLogger("delayd.test"), "redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING, logger="delayd.test"):
        health.failed(refused.value)
        health.failed(refused.value)  # once per spell, as an outage is
    assert [rec.msg for rec in caplog.records] == ["redis_refused"]
    assert caplog.records[0].fields["error"] == str(refused.value)
    health.ok()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="delayd.test"):
        health.failed(redis.exceptions.ConnectionError("Connection refused"))
    assert [rec.msg for rec in caplog.records] == ["redis_unavailable"]
