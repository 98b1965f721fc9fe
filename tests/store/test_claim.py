"""A claim is one call (claim.lua, docs/redis-layout.md "Declared keys"): it pops ready members, weighted
by priority, and starts them, building their records' names under the bucket's hash tag. Each script runs
under the key guard (tests/store/conftest.py)."""
from __future__ import annotations

import pytest
from store_helper import DAY_MS, QUOTAS, promote_all, record

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
    assert r.lrange(keys.ready[1], 0, -1) == ["a:3", "a:4"]
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
