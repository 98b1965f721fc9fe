"""A claim is one call (claim.lua, docs/redis-layout.md "Declared keys"): it pops ready members, weighted
by priority, and starts them, building their records' names under the bucket's hash tag. Takes an earlier
version's queue process left in `taking` (its take.lua, the first of its two calls) go back to their ready
lists when their hold runs out. Each script runs under the key guard (tests/store/conftest.py)."""
from __future__ import annotations

import math

import pytest
from redis_server import now_ms, wait_for
from store_helper import DAY_MS, QUOTAS, claim, old_take, promote_all, record

PREFIX = "delayd:"


@pytest.fixture
def one_bucket(r, client):
    """A client whose store has one bucket, holding ready tasks a:0 … a:4 (priority 2)."""
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(5)])
    promote_all(client.store, 0)
    return client


def test_one_call_pops_and_starts_the_members(r, one_bucket):
    store = one_bucket.store
    keys = store.keys[0]
    claimed = store.claim(0, QUOTAS, 3, 60_000, DAY_MS)
    assert claimed.popped == 3 and [t.member for t in claimed.tasks] == ["a:0", "a:1", "a:2"]
    assert r.lrange(keys.ready[1], 0, -1) == ["a:3", "a:4"] and r.zcard(keys.taking) == 0
    assert r.zcard(keys.leases) == 3
    assert record(r, store, "a:0")["status"] == "running" and record(r, store, "a:0")["runs"] == "1"
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["ready"]["2"] == 2 and counts["counts"]["running"] == 3
    assert store.claim(0, QUOTAS, 3, 60_000, DAY_MS).popped == 2  # fewer than asked: the bucket is empty


def test_a_topic_paused_since_promote_is_parked_not_started(r, one_bucket):
    store = one_bucket.store
    r.hset(store.keys[0].paused, "a", "1")  # paused after promote made them ready (as an earlier pause's flag)
    claimed = store.claim(0, QUOTAS, 2, 60_000, DAY_MS)
    assert (claimed.popped, claimed.tasks) == (2, [])
    assert r.zrange(store.keys[0].parked("a"), 0, -1) == ["a:0", "a:1"]
    assert record(r, store, "a:0")["queued"] == "0" and r.zcard(store.keys[0].leases) == 0
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["parked"] == 2 and counts["ready"]["2"] == 3


def test_a_task_deleted_after_promote_is_popped_and_skipped(r, one_bucket):
    store = one_bucket.store
    assert one_bucket.delete("a", 0)
    claimed = store.claim(0, QUOTAS, 2, 60_000, DAY_MS)
    assert claimed.popped == 2 and [t.member for t in claimed.tasks] == ["a:1"]
    assert record(r, store, "a:0")["status"] == "deleted"
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["ready"]["2"] == 3 and counts["counts"]["running"] == 1


def test_tasks_due_in_one_ms_come_due_by_priority_and_a_claim_pops_by_its_quotas(r, client):
    """Issue 41: due in the same ms, priority 3 `b` is made ready before priority 2 `a`, whatever their names;
    a claim takes each priority's quota first, then fills up in priority order."""
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
    assert [t.member for t in store.claim(0, (1, 1, 1), 4, 60_000, DAY_MS).tasks] == ["b:0", "a:0", "c:0", "b:1"]


def test_an_earlier_versions_lost_take_goes_back_in_front_in_order_and_runs_once(r, one_bucket):
    """Upgrade (SPEC section 4): a queue process of the earlier version took a:0 and a:1 (its take.lua) and died
    before its claim. New claims do not see them; when the take's hold runs out promote puts them back at the
    front of their list, in order, and announces the bucket; a new claim starts them, once each."""
    store, keys = one_bucket.store, one_bucket.store.keys[0]
    ready = r.pubsub(ignore_subscribe_messages=True)
    ready.subscribe(f"{PREFIX}ready")
    wait_for(lambda: ready.get_message(timeout=0.1) is None, 5, message="subscribed")
    old_take(r, keys, ["a:0", "a:1"], now_ms(r) + 300)
    assert [t.member for t in store.claim(0, QUOTAS, 1, 60_000, DAY_MS).tasks] == ["a:2"]
    assert store.promote(0, 1000, DAY_MS).moved == 0 and r.zcard(keys.taking) == 1  # still in its hold
    wait_for(lambda: store.promote(0, 1000, DAY_MS) and r.zcard(keys.taking) == 0, 5, message="the take put back")
    assert r.lrange(keys.ready[1], 0, -1) == ["a:0", "a:1", "a:3", "a:4"]
    wait_for(lambda: (m := ready.get_message(timeout=0.1)) and m["data"] == "0", 5, message="ready announced")
    ready.close()
    assert [run["member"] for run in claim(store, 0, n=10)] == ["a:0", "a:1", "a:3", "a:4"]
    assert [record(r, store, f"a:{i}")["runs"] for i in range(5)] == ["1"] * 5
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["counts"]["running"] == 5 and sum(counts["ready"].values()) == 0


def test_a_bucket_wakes_for_an_earlier_versions_take_in_its_hold(r, one_bucket):
    """promote's next lease is the earliest of the leases and of the takes' deadlines: the bucket process
    wakes to put a lost take back on time."""
    store, keys = one_bucket.store, one_bucket.store.keys[0]
    deadline = now_ms(r) + 60_000
    take = old_take(r, keys, ["a:0"], deadline)
    assert promote_all(store, 0).next_lease == deadline and r.zrange(keys.taking, 0, -1) == [take]
    claim(store, 0, n=1, lease_ms=120_000)
    assert promote_all(store, 0).next_lease == math.ceil(r.zscore(keys.taking, take))


def test_one_promote_puts_back_at_most_a_batch_of_members_and_the_next_calls_keep_their_order(r, one_bucket):
    """Issue 41 (suspected, real): one promote call put back up to `limit` takes of up to 200 members each
    (200 x 200 = 40,000 members in one call). Now whole takes up to `limit` members a call, the rest by
    the calls it asks for at once (full), the older takes in front as before."""
    store, keys = one_bucket.store, one_bucket.store.keys[0]
    now = now_ms(r)
    for i, members in enumerate((["a:0", "a:1"], ["a:2", "a:3"], ["a:4"])):
        old_take(r, keys, members, now - 10 + i)
    first = store.promote(0, 3, DAY_MS)  # a batch of 3: the newest two takes (3 members), then the oldest
    assert first.full and r.lrange(keys.ready[1], 0, -1) == ["a:2", "a:3", "a:4"] and r.zcard(keys.taking) == 1
    assert store.promote(0, 3, DAY_MS).full is False
    assert r.lrange(keys.ready[1], 0, -1) == [f"a:{i}" for i in range(5)] and r.zcard(keys.taking) == 0
