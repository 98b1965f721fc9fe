"""promote.lua touches only the keys its call declares (docs/redis-layout.md, "Declared keys"): what it can
only know from what it reads (due and lapsed members' records, parked and held sets, limits' keys) it asks
for in its reply and leaves alone, and Store.promote declares them on the next call; a wake message names
a just-added task so that its promote needs no second call. Run under the key guard (tests/store/conftest.py)."""
from __future__ import annotations

import test_store
from redis_server import now_ms, wait_for
from store_helper import DAY_MS, claim, promote_all, record
from test_limits import LP, claim_all, due_tasks, held
from test_store import PREFIX, add, ready_members

from delayd.store.transitions import Store
from delayd.workers.bucket import woken_member

store, client = test_store.store, test_store.client  # the fixtures: a 1-bucket store, its Client


def test_a_due_member_not_declared_is_left_alone_and_asked_for_then_moved_in_due_order(r, store):
    keys = store.keys[0]
    base = now_ms(r) - 100
    add(store, "t", "first", at_ms=base)
    add(store, "t", "second", at_ms=base + 1)
    # Only the later one's record is declared: the earlier one stops the call, and the later one is
    # not moved ahead of it.
    done = store.promote(0, 100, DAY_MS, members=["t:second"])
    assert (done.moved, done.full) == (0, True)
    assert ready_members(r, keys) == [] and "queued" not in record(r, store, "t:first")
    assert {keys.task("t:first"), keys.task("t:second")} <= set(store.learned[0])
    done = store.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (2, False)
    assert ready_members(r, keys) == ["t:first", "t:second"]


def test_the_reply_names_the_records_due_next_so_the_next_call_needs_no_other(r, store):
    keys = store.keys[0]
    at = now_ms(r) + 60
    for i in range(3):
        add(store, "t", i, at_ms=at + i)
    add(store, "t", "later", delay_ms=3_600_000)
    assert store.promote(0, 100, DAY_MS).moved == 0
    assert {keys.task(f"t:{i}") for i in range(3)} <= set(store.learned[0])
    assert keys.task("t:later") not in store.learned[0]  # more than AHEAD_MS (_tick.lua) after the head
    wait_for(lambda: now_ms(r) >= at + 2, 2, message="the three due")
    done = store.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (3, False)


def test_a_wake_message_names_a_task_added_due_now_and_one_promote_moves_it(r, store):
    """The bucket process's promote after a wake: the member the message names is declared, so the task
    added due now is moved by the first call, not after a second one."""
    keys = store.keys[0]
    assert store.promote(0, 100, DAY_MS).full is False  # an idle tick: nothing learned
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.wake_channel)
    wait_for(lambda: r.pubsub_numsub(keys.wake_channel)[0][1] == 1, 2)
    add(store, "t", "now")
    message = wait_for(lambda: pubsub.get_message(timeout=0.1), 2, message="the wake message")
    pubsub.close()
    member = woken_member(message["data"])
    assert member == "t:now"
    done = store.promote(0, 100, DAY_MS, members=[member])
    assert (done.moved, done.full) == (1, False)
    assert ready_members(r, keys) == ["t:now"]
    assert woken_member("1700000000000") is None and woken_member(None) is None  # older payloads, resubscribed


def test_a_paused_topics_parked_set_is_learned_and_named_while_its_tasks_come_due(r, store, client):
    keys = store.keys[0]
    client.pause("p")
    base = now_ms(r) - 100
    add(store, "free", 1, at_ms=base)
    add(store, "p", 1, at_ms=base + 1)
    add(store, "free", 2, at_ms=base + 2)
    fresh = Store(r, PREFIX, 1)  # a bucket process that has not seen the pause
    done = fresh.promote(0, 100, DAY_MS, members=["free:1", "p:1", "free:2"])
    # free:1 moves; p:1 (its topic's parked set undeclared) stops the call, so free:2 waits behind it.
    assert (done.moved, done.full) == (1, True)
    assert ready_members(r, keys) == ["free:1"] and r.zcard(keys.delayed) == 2
    assert keys.parked("p") in fresh.learned[0]
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (1, False)
    assert ready_members(r, keys) == ["free:1", "free:2"] and r.zrange(keys.parked("p"), 0, -1) == ["p:1"]
    # Named only while a task of the topic is due soon (never every paused topic's set: issue 41).
    assert keys.parked("p") not in fresh.learned[0]
    add(store, "p", 2, at_ms=now_ms(r) + 20)
    assert fresh.promote(0, 100, DAY_MS).full is False and keys.parked("p") in fresh.learned[0]


def test_a_lapsed_lease_is_learned(r, store):
    keys = store.keys[0]
    add(store, "t", 1)
    promote_all(store)
    [run] = claim(store, lease_ms=1)
    wait_for(lambda: now_ms(r) > run["now"] + 2, 1, message="the lease to lapse")
    fresh = Store(r, PREFIX, 1)
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.reaped, done.full) == (0, True) and record(r, store, "t:1")["status"] == "running"
    assert keys.task("t:1") in fresh.learned[0]
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.reaped, done.full) == (1, False) and record(r, store, "t:1")["lapsed"] == "1"


def test_a_limited_topics_release_learns_its_held_set_limits_and_records(r, store, client):
    keys = store.keys[0]
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 3, now_ms(r) - 1000)
    [first] = claim_all(store)
    assert held(r, store, "lim") == 2
    fresh = Store(r, PREFIX, 1)
    assert fresh.promote(0, 100, DAY_MS).full is False  # the topic waits for its slot: nothing to release
    assert store.finish(0, [(first["member"], first["claim"], "ok", 0, "")], DAY_MS) == [True]
    # The release needs the held set and the limits' keys, then the held members' records.
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (0, True)
    limit_keys = {keys.held("lim"), LP + "conf", LP + "run:lim", LP + "tat:lim", LP + "where:lim", LP + "corrupt"}
    assert limit_keys <= set(fresh.learned[0])
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (0, True) and held(r, store, "lim") == 2
    assert {keys.task("lim:1")} | limit_keys <= set(fresh.learned[0])  # (one slot: the earliest only)
    done = fresh.promote(0, 100, DAY_MS)
    assert (done.moved, done.full) == (1, False)
    [second] = claim_all(store)
    assert second["member"] == "lim:1" and held(r, store, "lim") == 1
