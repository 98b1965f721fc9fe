"""The undeclared-key guard itself (tests/key_guard.py): it refuses a key a call leaves out of KEYS,
naming it, and lets through the keys a call declares."""
from __future__ import annotations

import pytest
import redis
from store_helper import calls_of, claim, interleaved, promote_all

from delayd.store.replies import Finish
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

PREFIX = "delayd:"


def test_a_key_left_out_of_keys_is_refused_by_name(r):
    """finish.lua called without the limits' keys, whose names it builds from the limits' prefix it is given
    (ARGV): the first one it touches is refused by name; the call as Store sends it goes through."""
    store = Store(r, PREFIX, 1)
    call = store.finish_call(0, [Finish("t:1", 1, "ok")], 1000)
    left_out = call._replace(keys=[key for key in call.keys if "{limits}" not in str(key)])
    refused = r"undeclared key in finish\.lua: HGETALL delayd:\{limits\}:conf"
    with pytest.raises(redis.exceptions.ResponseError, match=refused):
        Transport(r).call(left_out)
    assert Transport(r).call(call) == [0]


def test_setting_a_key_aside_needs_the_slots_corrupt_hash_declared(r):
    """A key of the wrong type goes to the slot's `corrupt` hash, which the call must declare: delete.lua called
    without it is refused, as Dragonfly would refuse it."""
    store = Store(r, PREFIX, 1)
    keys = store.keys[0]
    declared = [keys.task("t:1"), keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"),
                keys.done("deleted"), keys.quarantine, keys.counts, keys.recurring, keys.parked("t")]
    r.set(keys.leases, "not a zset")
    refused = r"undeclared key in delete\.lua: \w+ delayd:\{0\}:corrupt"
    with pytest.raises(redis.exceptions.ResponseError, match=refused):
        Transport(r).call(ScriptCall(SCRIPTS["delete"], declared, ["t:1", 0, 1000]))
    assert Transport(r).call(ScriptCall(SCRIPTS["delete"], [*declared, keys.corrupt], ["t:1", 0, 1000])) == 0
    assert r.type(keys.leases) == "none" and r.hexists(keys.corrupt, keys.leases)


def test_a_pause_parks_only_records_it_declares_those_still_ready_when_it_parks_them(client, r):
    """park.lua parks the members the previous call looked at (their records declared): one taken
    by a worker (whose claim parks it itself: its topic is paused) and one deleted between the two
    calls are left alone, the rest parked, none missed."""
    r.hset("delayd:meta", "buckets", 1)
    client.add_many([{"topic": topic, "id": i, "push": "out", "delay": 0, "priority": 3}
                     for topic in ("a", "b") for i in range(5)])
    promote_all(client.store, 0)

    def worker() -> None:
        assert claim(client.store, 0, n=1) == [] and r.zrange(client.store.keys[0].parked("a"), 0, -1) == ["a:0"]
        assert client.delete("a", 1)

    paused = interleaved(r, client.pause_steps("a"), calls_of("park", 1), worker)
    assert paused == 3 and r.zrange(client.store.keys[0].parked("a"), 0, -1) == ["a:0", "a:2", "a:3", "a:4"]
    counts = client.stats()["topics"]["a"]
    assert counts["parked"] == 4 and sum(counts["ready"].values()) == 0 and not counts["counts"].get("running")
    assert [run["member"] for run in claim(client.store, 0, n=100)] == [f"b:{i}" for i in range(5)]


def test_a_claim_touches_keys_it_did_not_declare_only_under_a_declared_hash_tag(r, client):
    """claim.lua builds the names of the popped tasks' records under its bucket's tag (the rule Redis Cluster
    routes by): records of another tag (a task-key prefix of another bucket) are refused by name."""
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add("t", 1, push="out")
    store = client.store
    promote_all(store, 0)
    call = store.claim_call(0, (5, 3, 2), 10, 60_000, 60_000)
    elsewhere = ScriptCall(call.script, call.keys, [*call.args[:5], "delayd:{7}:t:", *call.args[6:]])
    refused = r"key of another hash tag in claim\.lua: HMGET delayd:\{7\}:t:t:1"
    with pytest.raises(redis.exceptions.ResponseError, match=refused):
        Transport(r).call(elsewhere)
    r.rpush(store.keys[0].ready[1], "t:1")  # (the refused call popped it)
    assert [t.member for t in store.claimed(Transport(r).call(call)).tasks] == ["t:1"]
