"""A claim in one call (claim.lua's pop mode, docs/redis-layout.md "Split claim"): the members a ready
message named (hints) are declared, popped and started at once; popped members not hinted become a take
in `taking`, for the usual claim; hints that are stale (taken by someone else) start nothing twice.
Each script runs under the undeclared-key guard (tests/store/conftest.py)."""
from __future__ import annotations

from store_helper import DAY_MS, QUOTAS, promote_all, record

from delayd.store.replies import Take

PREFIX = "delayd:"


def hinted(store, n: int, hints: list[str]):
    """(members popped, the take of those not hinted, the members started)."""
    popped, take, claimed = store.hinted_claimed(store.transport.call(
        store.hinted_claim_call(0, QUOTAS, n, hints, 60_000, DAY_MS)))
    return popped, take, [t.member for t in claimed.tasks]


def test_a_ready_message_names_the_members_and_one_call_starts_them(r, client):
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(3)])
    ready = r.pubsub(ignore_subscribe_messages=True)
    ready.subscribe(f"{PREFIX}ready")
    assert ready.get_message(timeout=1) is None  # (the subscription's confirmation)
    promote_all(client.store, 0)
    message = ready.get_message(timeout=5)
    ready.close()
    assert message["data"] == "0 a:0 a:1 a:2"
    store = client.store
    assert hinted(store, 10, message["data"].split()[1:]) == (3, Take("", []), ["a:0", "a:1", "a:2"])
    assert r.zcard(store.keys[0].taking) == 0 and r.zcard(store.keys[0].leases) == 3
    assert record(r, store, "a:1")["status"] == "running" and record(r, store, "a:1")["runs"] == "1"
    assert client.stats()["topics"]["a"]["counts"]["running"] == 3


def test_popped_members_not_hinted_are_a_take_for_the_next_claim(r, client):
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(3)])
    client.add("b", "0", push="out", delay=0)
    promote_all(client.store, 0)
    store = client.store
    popped, take, started = hinted(store, 3, ["a:1"])
    assert (popped, started, take.members) == (3, ["a:1"], ["a:0", "a:2"])
    assert r.zrange(store.keys[0].taking, 0, -1) == [take.key]
    assert record(r, store, "a:0")["status"] == "delayed"  # not declared: not touched
    claimed = store.claimed(store.transport.call(store.claim_call(0, take, 60_000, DAY_MS)))
    assert [t.member for t in claimed.tasks] == ["a:0", "a:2"] and r.zcard(store.keys[0].taking) == 0
    assert r.lrange(store.keys[0].ready[1], 0, -1) == ["b:0"]


def test_stale_hints_start_nothing_twice(r, client):
    """Two queue processes got the same message: the other one popped a:0 first; this one's hints name
    a:0 and a:1, it pops a:1 and a:2 and starts a:1; a:0 runs once, from the other's take."""
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(3)])
    promote_all(client.store, 0)
    store = client.store
    assert hinted(store, 1, ["a:0", "a:1"]) == (1, Take("", []), ["a:0"])  # the other process
    popped, take, started = hinted(store, 2, ["a:0", "a:1"])
    assert (popped, started, take.members) == (2, ["a:1"], ["a:2"])
    assert hinted(store, 2, ["a:0", "a:1"]) == (0, Take("", []), [])  # nothing left
    claimed = store.claimed(store.transport.call(store.claim_call(0, take, 60_000, DAY_MS)))
    assert [t.member for t in claimed.tasks] == ["a:2"]
    assert [record(r, store, f"a:{i}")["runs"] for i in range(3)] == ["1", "1", "1"]
    assert r.zcard(store.keys[0].leases) == 3 and client.stats()["topics"]["a"]["counts"]["running"] == 3


def test_a_hinted_member_of_a_paused_topic_is_parked_not_started(r, client):
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(2)])
    promote_all(client.store, 0)
    store = client.store
    r.hset(store.keys[0].paused, "a", "1")  # paused after promote made them ready (as pause's flag)
    assert hinted(store, 2, ["a:0", "a:1"]) == (2, Take("", []), [])
    assert r.zrange(store.keys[0].parked("a"), 0, -1) == ["a:0", "a:1"]
    assert record(r, store, "a:0")["queued"] == "0" and r.zcard(store.keys[0].leases) == 0


def test_tasks_due_in_one_ms_come_due_by_priority_then_a_hinted_member_never_starts_ahead_of_a_higher_one(
        r, client):
    """Issue 41: due in the same ms, priority 3 `b` is made ready (and named) before priority 2 `a`, whatever
    their names; and a hinted priority-2 member popped with a priority-3 one that was not hinted waits in
    the take with it, instead of starting first."""
    r.hset(f"{PREFIX}meta", "buckets", 1)
    seconds, micros = r.time()
    at = (seconds * 1000 + micros // 1000 - 5) / 1000
    client.add_many([{"topic": topic, "id": i, "push": "out", "at": at, "priority": priority}
                     for topic, priority in (("a", 2), ("b", 3), ("c", 1)) for i in range(2)])
    store, keys = client.store, client.store.keys[0]
    while store.promote(0, 2, DAY_MS, ["a:0", "a:1", "b:0", "b:1", "c:0", "c:1"]).moved == 0:
        pass  # (the first call may only learn the records)
    assert r.lrange(keys.ready[0], 0, -1) == ["b:0", "b:1"] and r.llen(keys.ready[1]) == 0
    promote_all(store, 0)
    popped, take, started = hinted(store, 4, ["b:1", "a:0", "a:1"])  # b:0's message was missed
    assert (popped, started) == (4, ["b:1"]) and sorted(take.members) == ["a:0", "a:1", "b:0"]
    popped, take, started = hinted(store, 2, ["c:1"])
    assert (popped, started, take.members) == (2, ["c:1"], ["c:0"])  # nothing of a higher priority popped
