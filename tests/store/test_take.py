"""The split claim (issue 30, docs/redis-layout.md "Declared keys"): take.lua pops ready members into
the bucket's `taking`, claim.lua starts them given their records; promote puts back what a dead or
hung queue process took and never claimed. Each script runs under the undeclared-key guard."""
from __future__ import annotations

import math

import pytest
from redis_server import now_ms, wait_for
from store_helper import DAY_MS, QUOTAS, claim, promote_all, record

from delayd.store import transitions
from delayd.store.replies import Take

PREFIX = "delayd:"


@pytest.fixture
def one_bucket(r, client):
    """A client whose store has one bucket, holding ready tasks a:0 … a:4 (priority 2)."""
    r.hset(f"{PREFIX}meta", "buckets", 1)
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 0} for i in range(5)])
    promote_all(client.store, 0)
    return client


def take(store, n: int) -> Take:
    return store.taken(store.transport.call(store.take_call(0, QUOTAS, n)))


def claim_taken(store, taken: Take) -> list[str]:
    return [t.member for t in store.claimed(store.transport.call(store.claim_call(0, taken, 60_000, DAY_MS))).tasks]


def expire_hold(monkeypatch) -> None:
    """Takes from now on are held 1 ms: promote puts them back at once."""
    monkeypatch.setattr(transitions, "TAKE_HOLD_MS", 1)


def test_take_moves_members_to_taking_and_claim_starts_them(r, one_bucket):
    store = one_bucket.store
    keys = store.keys[0]
    taken = take(store, 3)
    assert taken == Take("2 3 a:02 3 a:12 3 a:2", ["a:0", "a:1", "a:2"])
    assert r.lrange(keys.ready[1], 0, -1) == ["a:3", "a:4"] and r.zrange(keys.taking, 0, -1) == [taken.key]
    assert record(r, store, "a:0")["status"] == "delayed"  # take touches no record
    assert one_bucket.stats()["topics"]["a"]["ready"]["2"] == 5  # taken: still counted ready
    assert claim_taken(store, taken) == ["a:0", "a:1", "a:2"]
    assert r.zcard(keys.taking) == 0 and r.zcard(keys.leases) == 3
    assert record(r, store, "a:0")["status"] == "running" and record(r, store, "a:0")["runs"] == "1"


def test_a_claim_of_entries_put_back_meanwhile_starts_nothing(r, one_bucket, monkeypatch):
    """A queue process that hung past its hold: promote put its take back, another process claimed
    the tasks; its late claim is fenced by its entries' absence from `taking`."""
    store = one_bucket.store
    expire_hold(monkeypatch)
    late = take(store, 2)
    wait_for(lambda: store.promote(0, 1000, DAY_MS) and r.zcard(store.keys[0].taking) == 0, 5,
             message="the take put back")
    assert [run["member"] for run in claim(store, 0, n=2)] == ["a:0", "a:1"]
    assert claim_taken(store, late) == []
    assert [record(r, store, m)["runs"] for m in ("a:0", "a:1")] == ["1", "1"]
    assert r.zcard(store.keys[0].leases) == 2 and one_bucket.stats()["topics"]["a"]["counts"]["running"] == 2


def test_promote_puts_a_lost_take_back_in_front_in_order_and_announces_it(r, one_bucket, monkeypatch):
    store = one_bucket.store
    keys = store.keys[0]
    expire_hold(monkeypatch)
    ready = r.pubsub(ignore_subscribe_messages=True)
    ready.subscribe(f"{PREFIX}ready")
    wait_for(lambda: ready.get_message(timeout=0.1) is None, 5, message="subscribed")
    assert take(store, 1).members == ["a:0"] and take(store, 2).members == ["a:1", "a:2"]  # two takes lost
    # (both holds over before promote looks: one call puts both back, the older take in front)
    wait_for(lambda: r.zcount(keys.taking, "-inf", now_ms(r)) == 2, 5, message="both holds over")
    monkeypatch.setattr(transitions, "TAKE_HOLD_MS", 60_000)
    held = take(store, 1)  # another process's take, still in its hold
    assert r.lrange(keys.ready[1], 0, -1) == ["a:4"]
    promoted = wait_for(lambda: (p := store.promote(0, 1000, DAY_MS)) and r.zcard(keys.taking) == 1 and p, 5,
                        message="the takes put back")
    assert r.lrange(keys.ready[1], 0, -1) == ["a:0", "a:1", "a:2", "a:4"]
    assert r.zrange(keys.taking, 0, -1) == [held.key]
    assert promoted.next_lease == math.ceil(r.zscore(keys.taking, held.key))  # the bucket wakes for the next
    wait_for(lambda: (m := ready.get_message(timeout=0.1)) and m["data"] == "0 a:0 a:1 a:2", 5,
             message="ready announced, naming the members put back")
    assert one_bucket.stats()["topics"]["a"]["ready"]["2"] == 5
    ready.close()


def test_one_promote_puts_back_at_most_a_batch_of_members_and_the_next_calls_keep_their_order(
        r, one_bucket, monkeypatch):
    """Issue 41 (suspected, real): one promote call put back up to `limit` takes of up to 200 members each
    (200 x 200 = 40,000 members in one call). Now whole takes up to `limit` members a call, the rest by
    the calls it asks for at once (full), the older takes in front as before."""
    store = one_bucket.store
    keys = store.keys[0]
    expire_hold(monkeypatch)
    takes = [take(store, 2).members, take(store, 2).members, take(store, 1).members]
    assert takes == [["a:0", "a:1"], ["a:2", "a:3"], ["a:4"]]
    wait_for(lambda: r.zcount(keys.taking, "-inf", now_ms(r)) == 3, 5, message="the holds over")
    first = store.promote(0, 3, DAY_MS)  # a batch of 3: the newest two takes (3 members), then the oldest
    assert first.full and r.lrange(keys.ready[1], 0, -1) == ["a:2", "a:3", "a:4"] and r.zcard(keys.taking) == 1
    assert store.promote(0, 3, DAY_MS).full is False
    assert r.lrange(keys.ready[1], 0, -1) == [f"a:{i}" for i in range(5)] and r.zcard(keys.taking) == 0


def test_a_topic_paused_between_take_and_claim_is_parked_not_started(r, one_bucket):
    store = one_bucket.store
    taken = take(store, 2)
    one_bucket.pause("a")
    assert claim_taken(store, taken) == []
    assert r.zrange(store.keys[0].parked("a"), 0, -1) == ["a:0", "a:1", "a:2", "a:3", "a:4"]
    assert r.zcard(store.keys[0].leases) == 0 and record(r, store, "a:0")["queued"] == "0"
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["parked"] == 5 and sum(counts["ready"].values()) == 0
    one_bucket.resume("a")
    promote_all(store, 0)
    assert sorted(run["member"] for run in claim(store, 0, n=10)) == [f"a:{i}" for i in range(5)]


def test_a_task_deleted_between_take_and_claim_is_skipped(r, one_bucket):
    store = one_bucket.store
    taken = take(store, 2)
    assert one_bucket.delete("a", 0)
    assert claim_taken(store, taken) == ["a:1"]
    assert record(r, store, "a:0")["status"] == "deleted" and r.zcard(store.keys[0].taking) == 0
    counts = one_bucket.stats()["topics"]["a"]
    assert counts["ready"]["2"] == 3 and counts["counts"]["running"] == 1
