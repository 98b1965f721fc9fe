"""The Redis layout and its transitions (one Lua script each), against a real Redis."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import tempfile
import threading

import pytest
import redis
from redis.crc import key_slot
from redis_server import (
    RedisServer,
    free_port,
    has_functions,
    lose_scripts,
    now_ms,
    script_loads,
    set_aside,
    wait_for,
)
from store_helper import DAY_MS, claim, promote_all, record

from delayd import CLAIMED, Client
from delayd import config as config_mod
from delayd.model import attempts
from delayd.model.record import from_record
from delayd.model.task import Task, TaskError
from delayd.store.keys import BucketKeys, bucket_of, meta_key, ready_channel
from delayd.store.replies import SCHEDULE_ENDS
from delayd.store.transitions import Store
from delayd.store.transport import Transport

PREFIX = "delayd:"


# -- helpers -----------------------------------------------------------------------
def task_of(topic, id, priority=2, **fields):
    if not any(k in fields for k in ("call", "url", "push")):
        fields["call"] = "shop.tasks:run"
    return Task.new(topic, id, priority=priority, **fields)


def add(store: Store, topic, id, *, delay_ms=0, at_ms=None, priority=2, nx=False, **fields) -> int:
    task = task_of(topic, id, priority, **fields)
    mode, value = ("at", at_ms) if at_ms is not None else ("delay", delay_ms)
    return store.add(store.keys_for(task.key), [(task, mode, value)], nx)


def token(rec: dict) -> int:
    """A record's claim token: `claim`, or `created` when the field is left out."""
    return int(rec.get("claim", rec["created"]))


def ready_members(r, keys: BucketKeys) -> list[str]:
    return [m for key in keys.ready for m in r.lrange(key, 0, -1)]


def client_of(url: str, store: Store, retention_ms: int = DAY_MS) -> Client:
    """The public Client on `store`'s prefix and bucket count (recorded in Redis on first use, as
    a daemon records it), keeping finished tasks `retention_ms`: deletes and retries go through it."""
    config = config_mod.load(buckets=store.buckets, retention=retention_ms / 1000)
    return Client.from_url(url, store.prefix, config=config)


@pytest.fixture
def store(r):
    return Store(r, PREFIX, 1)


@pytest.fixture
def client(redis_url, store):
    """client_of the 1-bucket `store`."""
    c = client_of(redis_url, store)
    yield c
    c.close()


@pytest.fixture
def keys(store):
    return store.keys[0]


# -- add ---------------------------------------------------------------------------
def test_add_upsert_replaces_and_nx_keeps(r, store, keys):
    assert add(store, "t", 1, delay_ms=10_000, params={"v": 1}) == 1
    first = record(r, store, "t:1")
    assert add(store, "t", 1, delay_ms=20_000, params={"v": 2}, priority=3) == 1
    second = record(r, store, "t:1")
    assert json.loads(second["spec"])["params"] == {"v": 2} and second["priority"] == "3"
    assert token(second) > token(first)  # replacing fences the old version
    # (priority 3: a quarter ms ahead of its due time, so that it comes due first of its ms)
    assert r.zcard(keys.delayed) == 1 and r.zscore(keys.delayed, "t:1") == int(second["due"]) - 0.25

    assert add(store, "t", 1, delay_ms=0, params={"v": 3}, nx=True) == 0
    assert record(r, store, "t:1") == second
    assert r.zscore(keys.delayed, "t:1") == int(second["due"]) - 0.25
    assert add(store, "t", 2, nx=True) == 1


def test_a_fresh_record_leaves_defaults_out(r, store, keys):
    """Memory per pending task: priority 2, runs 0 and the claim token (default: created) are not stored."""
    add(store, "t", 1)
    assert set(record(r, store, "t:1")) == {"spec", "status", "created", "due"}
    task = from_record("t:1", record(r, store, "t:1"))
    created = int(record(r, store, "t:1")["created"])
    assert (task.priority, task.runs, task.claim) == (2, 0, created)
    add(store, "t", 2, priority=1)
    assert record(r, store, "t:2")["priority"] == "1"
    promote_all(store)
    ready3, ready2, ready1 = keys.ready
    assert r.lrange(ready2, 0, -1) == ["t:1"] and r.lrange(ready1, 0, -1) == ["t:2"]
    runs = {run["member"]: run for run in claim(store)}
    assert (runs["t:1"]["priority"], runs["t:1"]["runs"], runs["t:1"]["claim"]) == (2, 1, created + 1)
    assert runs["t:2"]["priority"] == 1


def test_the_token_goes_up_with_every_replacement_even_within_one_ms(r, store, keys):
    seen = []
    for _ in range(3):
        add(store, "t", 1)
        seen.append(token(record(r, store, "t:1")))
        store.add(keys, [(task_of("t", 1), "delay", 0)] * 4, False)  # one script call: one `now`
        seen.append(token(record(r, store, "t:1")))
    assert all(b > a for a, b in zip(seen, seen[1:])), seen


def test_add_batch_returns_how_many_it_wrote(r, store, keys):
    add(store, "t", 1)
    batch = [(task_of("t", i), "delay", 0) for i in (0, 1, 2)]
    assert store.add(keys, batch, True) == 2
    assert store.add(keys, batch, False) == 3
    assert r.zcard(keys.delayed) == 3


def test_add_resolves_delay_on_redis_clock(r, store):
    before = now_ms(r)
    add(store, "t", 1, delay_ms=5000)
    after = now_ms(r)
    rec = record(r, store, "t:1")
    assert before <= int(rec["created"]) <= after
    assert int(rec["due"]) == int(rec["created"]) + 5000
    assert rec["status"] == "delayed" and "runs" not in rec

    add(store, "t", 2, at_ms=1_900_000_000_123)
    assert record(r, store, "t:2")["due"] == "1900000000123"


def test_readd_resets_a_finished_or_running_task(r, store, keys):
    add(store, "t", 1)
    promote_all(store)
    [run] = claim(store)
    store.finish(0, [("t:1", run["claim"], "ok", 0, "")], DAY_MS)
    assert r.pttl(keys.task("t:1")) > 0 and r.zscore(keys.done("ok"), "t:1") is not None

    add(store, "t", 1, delay_ms=60_000)
    rec = record(r, store, "t:1")
    assert rec["status"] == "delayed" and "runs" not in rec
    assert r.pttl(keys.task("t:1")) == -1, "a live task must not expire"
    assert r.zscore(keys.done("ok"), "t:1") is None

    # Replace while running: the old run is fenced and its lease dropped.
    add(store, "t", 2)
    promote_all(store)
    [run] = claim(store)
    add(store, "t", 2, delay_ms=60_000)
    assert r.zscore(keys.leases, "t:2") is None
    assert store.finish(0, [("t:2", run["claim"], "ok", 0, "")], DAY_MS) == [0]
    assert record(r, store, "t:2")["status"] == "delayed"



def test_a_replacement_sets_aside_index_keys_of_the_wrong_type(r, store, keys):
    """add.lua checks the keys only a replacement touches at the first replacement of a call,
    after the fresh tasks before it were written: a wrong type is set aside, nothing fails."""
    add(store, "t", 1)
    r.delete(keys.leases, keys.done("ok"), keys.quarantine)
    r.set(keys.leases, "x")
    r.rpush(keys.done("ok"), "x")
    r.rpush(keys.quarantine, "x")
    batch = [(task_of("t", i), "delay", 0) for i in (0, 1, 2)]  # fresh, replacement, fresh
    assert store.add(keys, batch, False) == 3
    assert set_aside(r, keys.leases)[0] == "string" and set_aside(r, keys.done("ok"))[0] == "list"
    kind, why = set_aside(r, keys.quarantine)
    assert kind == "list" and re.fullmatch(r"\d{13} a list where a hash belongs", why), why
    assert sorted(r.zrange(keys.delayed, 0, -1)) == ["t:0", "t:1", "t:2"]
    assert r.hget(keys.counts, "waiting|t") == "3"

# -- promote -----------------------------------------------------------------------
def test_promote_moves_only_due_tasks_never_early(r, store, keys):
    base = now_ms(r)
    dues = {f"t:{i}": base + 40 + 15 * i for i in range(10)}
    for member, due in dues.items():
        add(store, *member.split(":"), at_ms=due)
    add(store, "t", "late", delay_ms=3_600_000)
    seen: set[str] = set()

    def step():
        moved, _, next_due, _, clock_us, full, _ = store.promote(0, 100, DAY_MS)
        now = clock_us // 1000  # ms, as the script compares due times
        assert not full
        ready = set(ready_members(r, keys))
        for member in ready - seen:
            assert dues[member] <= now, f"{member} promoted {dues[member] - now} ms early"
        for member in set(dues) - ready:
            assert dues[member] > now, f"{member} due but not promoted"
        assert moved == len(ready - seen)
        seen.update(ready)
        assert next_due == min([d for m, d in dues.items() if m not in ready] + [int(r.zscore(keys.delayed, "t:late"))])
        return len(seen) == len(dues)

    wait_for(step, 5, interval=0.003, message="every task promoted")
    assert r.zrange(keys.delayed, 0, -1) == ["t:late"]
    assert all(r.hget(keys.task(m), "queued") == "1" for m in dues)


def test_promote_boundary_is_inclusive(r, store, keys):
    at = now_ms(r) + 30
    add(store, "t", 1, at_ms=at)
    assert store.promote(0, 10, DAY_MS).moved == 0  # (which names its record, the head's, for the next call)
    wait_for(lambda: now_ms(r) >= at, 2)
    assert store.promote(0, 10, DAY_MS).moved == 1


def test_promote_in_batches_with_full_flag(r, store, keys):
    for i in range(25):
        add(store, "t", i)
    # The first call learns the records of the first batch; each next one is given the next batch's.
    results = [store.promote(0, 10, DAY_MS) for _ in range(4)]
    assert [(res.moved, res.full) for res in results] == [(0, True), (10, True), (10, True), (5, False)]
    assert r.zcard(keys.delayed) == 0
    # In due order (ties by name, as the sorted set orders them), each task once.
    order = sorted((int(record(r, store, f"t:{i}")["due"]), f"t:{i}") for i in range(25))
    assert r.lrange(keys.ready[1], 0, -1) == [member for _, member in order]


def test_promote_returns_next_due_and_next_lease(r, store, keys):
    assert store.promote(0, 10, DAY_MS)[2:4] == (-1, -1)
    add(store, "t", "now")
    add(store, "t", "later", delay_ms=50_000)
    moved, reaped, next_due, next_lease, now, full, _ = store.promote(0, 10, DAY_MS, members=["t:now"])
    assert (moved, reaped, full) == (1, 0, False)
    assert next_due == int(record(r, store, "t:later")["due"])
    assert next_lease == -1
    [run] = claim(store, lease_ms=30_000)
    assert store.promote(0, 10, DAY_MS).next_lease == run["now"] + 30_000 == int(r.zscore(keys.leases, "t:now"))


def test_priorities_go_to_their_ready_lists(r, store, keys):
    for p in (1, 2, 3):
        add(store, "p", p, priority=p)
    promote_all(store)
    assert [r.lrange(key, 0, -1) for key in keys.ready] == [["p:3"], ["p:2"], ["p:1"]]
    assert keys.ready == (f"{PREFIX}{{0}}:ready:3", f"{PREFIX}{{0}}:ready:2", f"{PREFIX}{{0}}:ready:1")


# -- claim -------------------------------------------------------------------------
def test_claim_is_weighted_by_priority_quotas(r, store, keys):
    for p in (1, 2, 3):
        for i in range(10):
            add(store, f"p{p}", i, priority=p)
    promote_all(store)

    def priorities(runs):
        counts = {}
        for run in runs:
            counts[run["priority"]] = counts.get(run["priority"], 0) + 1
        return counts

    assert priorities(claim(store, n=10)) == {3: 5, 2: 3, 1: 2}  # the lowest is never starved
    assert priorities(claim(store, n=10)) == {3: 5, 2: 3, 1: 2}
    # Priority 3 is used up: its share goes to the others, in priority order.
    assert priorities(claim(store, n=10)) == {2: 4, 1: 6}
    assert claim(store, n=10) == []
    assert r.zcard(keys.leases) == 30


def test_claim_leases_and_bumps_runs_and_token(r, store, keys):
    add(store, "t", 1, params={"a": 1})
    before = record(r, store, "t:1")
    promote_all(store)
    [run] = claim(store, lease_ms=12_345)
    assert run["member"] == "t:1" and run["spec"]["params"] == {"a": 1}
    assert run["runs"] == 1 and run["claim"] == token(before) + 1
    assert run["due"] == int(before["due"]) and run["created"] == int(before["created"])
    rec = record(r, store, "t:1")
    assert rec["status"] == "running" and rec["queued"] == "0" and rec["last_run"] == str(run["now"])
    assert int(r.zscore(keys.leases, "t:1")) == run["now"] + 12_345
    assert claim(store) == [], "a claimed task is not claimable again"


def test_claim_takes_at_most_n(store):
    for i in range(7):
        add(store, "t", i)
    promote_all(store)
    assert len(claim(store, n=3)) == 3
    assert len(claim(store, n=100)) == 4


# -- finish and renew ----------------------------------------------------------------
def claimed(r, store, member="t:1", lease_ms=60_000, **kw) -> dict:
    topic, id = member.split(":")
    add(store, topic, id, **kw)
    promote_all(store)
    [run] = [run for run in claim(store, lease_ms=lease_ms) if run["member"] == member]
    return run


def test_finish_ok(r, store, keys):
    run = claimed(r, store)
    assert store.finish(0, [("t:1", run["claim"], "ok", 0, "")], DAY_MS) == [1]
    rec = record(r, store, "t:1")
    assert rec["status"] == "ok" and "error" not in rec
    assert r.zscore(keys.leases, "t:1") is None and r.zscore(keys.done("ok"), "t:1") is not None
    assert 0 < r.pttl(keys.task("t:1")) <= DAY_MS


def test_claim_and_finish_of_thousands_of_runs_of_one_topic_in_one_call(r, store, keys, client):
    """Leases and done:ok are written with one command per topic per call: a call of more runs
    than Lua can unpack at once (~4,000 pairs) is split, not failed half-way."""
    n = 5_000
    assert client.add_many([{"topic": "t", "id": i, "call": "delayd.examples:noop"} for i in range(n)]) == n
    assert promote_all(store, 0, DAY_MS).moved == n
    runs = claim(store, n=n)
    assert len(runs) == n and r.zcard(keys.leases) == n
    assert store.finish(0, [(run["member"], run["claim"], "ok", 0, "") for run in runs], DAY_MS) == [1] * n
    assert r.zcard(keys.leases) == 0 and r.zcard(keys.done("ok")) == n
    assert client.stats()["counts"]["ok"] == n


def test_finish_failed_keeps_the_error(r, store, keys):
    run = claimed(r, store)
    assert store.finish(0, [("t:1", run["claim"], "failed", 0, "handler said fail")], 5000) == [1]
    rec = record(r, store, "t:1")
    assert rec["status"] == "failed" and rec["error"] == "handler said fail"
    assert r.zscore(keys.done("failed"), "t:1") is not None and r.zscore(keys.leases, "t:1") is None
    assert 0 < r.pttl(keys.task("t:1")) <= 5000


def test_finish_retry_counts_from_previous_due(r, store, keys):
    at = now_ms(r) - 10_000
    run = claimed(r, store, at_ms=at)
    assert store.finish(0, [("t:1", run["claim"], "retry", 60_000, "boom")], DAY_MS) == [1]
    rec = record(r, store, "t:1")
    assert rec["status"] == "delayed" and rec["error"] == "boom" and rec["runs"] == "1"
    assert int(rec["due"]) == at + 60_000 == int(r.zscore(keys.delayed, "t:1"))
    assert r.zscore(keys.leases, "t:1") is None and r.pttl(keys.task("t:1")) == -1


def test_finish_retry_from_now_when_previous_due_plus_gap_is_past(r, store):
    run = claimed(r, store, at_ms=now_ms(r) - 120_000)
    before = now_ms(r)
    store.finish(0, [("t:1", run["claim"], "retry", 60_000, "")], DAY_MS)
    after = now_ms(r)
    assert before + 60_000 <= int(record(r, store, "t:1")["due"]) <= after + 60_000
    assert "error" not in record(r, store, "t:1")


def test_finish_with_stale_token_changes_nothing(r, store, keys):
    run = claimed(r, store)
    before = record(r, store, "t:1")
    lease = r.zscore(keys.leases, "t:1")
    for outcome in ("ok", "failed", "retry", "quarantine"):
        assert store.finish(0, [("t:1", run["claim"] - 1, outcome, 1000, "x")], DAY_MS) == [0]
    assert record(r, store, "t:1") == before and r.zscore(keys.leases, "t:1") == lease
    assert r.hlen(keys.quarantine) == 0
    # A batch: each run is judged on its own token.
    assert store.finish(0, [("t:1", run["claim"] + 5, "ok", 0, ""), ("t:1", run["claim"], "ok", 0, ""),
                            ("missing:1", 1, "ok", 0, "")], DAY_MS) == [0, 1, 0]


def test_finish_quarantine(r, store, keys):
    run = claimed(r, store)
    store.finish(0, [("t:1", run["claim"], "quarantine", 0, "unknown target")], DAY_MS)
    rec = record(r, store, "t:1")
    assert rec["status"] == "failed" and rec["error"] == "quarantined: unknown target"
    assert r.hget(keys.quarantine, "t:1") == "unknown target"


def test_renew(r, store, keys):
    run = claimed(r, store)
    assert store.renew(0, [("t:1", run["claim"])], 90_000) == [1]
    assert int(r.zscore(keys.leases, "t:1")) >= run["now"] + 90_000
    lease = r.zscore(keys.leases, "t:1")
    assert store.renew(0, [("t:1", run["claim"] - 1), ("t:1", run["claim"] + 1), ("nope:1", 1)], 500_000) == [0, 0, 0]
    assert r.zscore(keys.leases, "t:1") == lease
    store.finish(0, [("t:1", run["claim"], "ok", 0, "")], DAY_MS)
    assert store.renew(0, [("t:1", run["claim"])], 90_000) == [0]
    assert r.zscore(keys.leases, "t:1") is None, "renew must not resurrect a lease"


# -- lapsed leases -----------------------------------------------------------------
def test_lapsed_lease_is_reaped_to_the_front_and_fenced(r, store, keys):
    old = claimed(r, store, lease_ms=50)
    add(store, "t", "waiting")
    promote_all(store)
    assert r.lrange(keys.ready[1], 0, -1) == ["t:waiting"]
    expiry = old["now"] + 50
    wait_for(lambda: now_ms(r) > expiry, 2, message="the lease to lapse")
    moved, reaped, _, next_lease, _, _, _ = store.promote(0, 100, DAY_MS)
    assert reaped == 1 and next_lease == -1
    assert r.lrange(keys.ready[1], 0, -1) == ["t:1", "t:waiting"], "a lapsed task goes to the front"
    rec = record(r, store, "t:1")
    assert rec["status"] == "delayed" and rec["lapsed"] == "1" and rec["queued"] == "1"
    assert int(rec["claim"]) == old["claim"] + 1
    # The old worker is fenced off.
    assert store.renew(0, [("t:1", old["claim"])], 60_000) == [0]
    assert store.finish(0, [("t:1", old["claim"], "ok", 0, "")], DAY_MS) == [0]
    # The re-run keeps its run number (same idempotency key) and gets a new token.
    again = [run for run in claim(store) if run["member"] == "t:1"][0]
    assert again["runs"] == old["runs"] == 1 and again["claim"] == old["claim"] + 2
    assert record(r, store, "t:1")["lapsed"] == "0"
    assert store.finish(0, [("t:1", again["claim"], "ok", 0, "")], DAY_MS) == [1]


def test_lapsed_leases_come_back_in_expiry_order(r, store, keys):
    """Issue 41 (suspected, real): each lapsed task was pushed to the front on its own, in expiry order, so the
    last to lapse came first. Now the first to lapse is first, ahead of the ready task behind them."""
    for i in range(3):
        add(store, "t", i)
        promote_all(store)
        claim(store, lease_ms=500 + i)  # t:0 lapses first, then t:1, then t:2 (none before the setup is done,
    add(store, "t", "waiting")          # even on a loaded machine: a lapse reaped by the next line fails the test)
    promote_all(store)
    wait_for(lambda: now_ms(r) > int(r.zrange(keys.leases, -1, -1, withscores=True)[0][1]), 3, message="lapses")
    assert promote_all(store).reaped == 3
    assert r.lrange(keys.ready[1], 0, -1) == ["t:0", "t:1", "t:2", "t:waiting"]


def test_a_running_task_with_a_live_lease_is_not_reaped(r, store, keys):
    claimed(r, store)
    assert store.promote(0, 100, DAY_MS).reaped == 0
    assert record(r, store, "t:1")["status"] == "running"


# -- delete ------------------------------------------------------------------------
def test_soft_delete_fences_a_running_task(r, store, keys, client):
    run = claimed(r, store)
    assert client.delete("t", 1) is CLAIMED
    rec = record(r, store, "t:1")
    assert rec["status"] == "deleted" and int(rec["claim"]) == run["claim"] + 1
    assert r.zscore(keys.leases, "t:1") is None and r.zscore(keys.done("deleted"), "t:1") is not None
    assert 0 < r.pttl(keys.task("t:1")) <= DAY_MS
    assert store.finish(0, [("t:1", run["claim"], "retry", 1000, "")], DAY_MS) == [0]
    assert store.renew(0, [("t:1", run["claim"])], 60_000) == [0]
    assert record(r, store, "t:1")["status"] == "deleted" and r.zcard(keys.delayed) == 0


def in_state(r, store, client, state: str) -> None:
    """Task t:1 (beside t:0, due before it) in `state`, as the daemon's scripts leave it."""
    if state == "delayed":
        add(store, "t", 1, delay_ms=60_000)
        return
    if state == "parked":
        client.pause("t")
    if state == "held":
        client.set_limit("t", concurrency=1)
    add(store, "t", 0, at_ms=now_ms(r) - 10)
    add(store, "t", 1)
    promote_all(store)
    if state in ("ready", "parked"):
        assert (r.zscore(store.keys[0].parked("t"), "t:1") is not None) == (state == "parked")
        return
    runs = claim(store, lease_ms=1 if state == "lapsed" else 60_000)
    assert (r.zscore(store.keys[0].held("t"), "t:1") is not None) == (state == "held")
    if state == "lapsed":  # its lease ran out and promote put it back, ready: its worker's run is fenced off
        wait_for(lambda: now_ms(r) > runs[0]["now"] + 1, 1, message="the leases to lapse")
        assert promote_all(store).reaped == 2 and record(r, store, "t:1")["queued"] == "1"
    if state in ("ok", "failed"):
        [run] = [run for run in runs if run["member"] == "t:1"]
        assert store.finish(0, [("t:1", run["claim"], state if state == "ok" else "quarantine", 0, "x")],
                            DAY_MS) == [1]


@pytest.mark.parametrize("hard", [False, True], ids=["soft", "hard"])
@pytest.mark.parametrize("state, answer", [
    ("delayed", True), ("ready", True), ("parked", True), ("held", True), ("lapsed", True), ("ok", True),
    ("failed", True), ("running", CLAIMED)])
def test_a_delete_answers_true_unless_a_run_was_already_claimed(r, store, keys, client, state, answer, hard):
    """SPEC section 10: True (1) when no run of the task is claimed, so none starts after it; CLAIMED (2) for a
    task in `leases`, whose handler may be starting. Either way it never runs again, and claim skips it."""
    in_state(r, store, client, state)
    assert record(r, store, "t:1")["status"] == {"ok": "ok", "failed": "failed", "running": "running"}.get(
        state, "delayed")
    assert client.delete("t", 1, hard=hard) is answer
    assert r.zscore(keys.leases, "t:1") is None
    if state == "held":  # the limit gone, promote releases what it holds: t:1's entry is dropped
        client.clear_limit("t")
    promote_all(store)
    assert "t:1" not in [run["member"] for run in claim(store)]
    assert client.delete("t", 1, hard=hard) is (False if hard else True)  # soft: a deleted task, no run claimed
    assert client.delete("t", 2, hard=hard) is False


def test_soft_delete_makes_a_ready_entry_stale(r, store, keys, client):
    add(store, "t", 1)
    add(store, "t", 2)
    promote_all(store)
    client.delete("t", 1)
    assert [run["member"] for run in claim(store)] == ["t:2"]
    assert r.llen(keys.ready[1]) == 0, "claim drops stale entries"
    assert record(r, store, "t:1")["status"] == "deleted"


def test_soft_delete_of_a_delayed_task(r, store, keys, redis_url):
    add(store, "t", 1, delay_ms=60_000)
    client = client_of(redis_url, store, retention_ms=1000)
    assert client.delete("t", 1) is True
    assert r.zcard(keys.delayed) == 0 and 0 < r.pttl(keys.task("t:1")) <= 1000
    assert client.delete("missing", 1) is False
    client.close()


def only_run_statistics_left(r, keys) -> bool:
    """Only the run statistics stay (lifetime totals, and the current 10-second and minute
    windows until they expire); every state count went back to 0, so the counts hash is gone too."""
    windows = r.keys(keys.window_prefix + "*")
    assert sorted(set(r.keys("*")) - {meta_key(PREFIX)}) == sorted([keys.totals, *windows])
    minutes = [w for w in windows if w.startswith(keys.window_prefix + "m:")]
    assert minutes and all(0 < r.ttl(w) <= 3900 for w in minutes)
    assert all(0 < r.ttl(w) <= 130 for w in windows if w not in minutes)
    return True


def test_hard_delete_removes_every_key(r, store, keys, client):
    add(store, "t", 1, delay_ms=60_000)
    add(store, "t", 2)
    promote_all(store)
    run = claim(store)[0]
    add(store, "t", 3)
    promote_all(store)
    store.finish(0, [("t:2", run["claim"], "quarantine", 0, "bad")], DAY_MS)
    for id in (1, 2, 3):
        assert client.delete("t", id, hard=True) is True
    assert claim(store) == []  # the ready entry of t:3 is stale and dropped
    assert only_run_statistics_left(r, keys)
    assert client.delete("t", 1, hard=True) is False


def test_hard_delete_of_a_finished_task(r, store, keys, client):
    run = claimed(r, store)
    store.finish(0, [("t:1", run["claim"], "ok", 0, "")], DAY_MS)
    client.delete("t", 1, hard=True)
    assert only_run_statistics_left(r, keys)


@pytest.mark.parametrize("then_soft_delete", [False, True])
def test_a_run_of_a_hard_deleted_task_cannot_finish_its_new_incarnation(r, store, keys, client, then_soft_delete):
    """Hard delete leaves nothing to bump, so a re-added task's tokens start from its own
    `created` time: a worker still running the old incarnation holds a token the new one
    never hands out, and cannot renew or finish the new run."""
    old = claimed(r, store)
    client.delete("t", 1, hard=True)
    wait_for(lambda: now_ms(r) > old["created"], 1, message="the clock to move on")
    add(store, "t", 1)
    if then_soft_delete:  # soft delete and re-add before the first claim keep the tokens ahead too
        client.delete("t", 1)
        add(store, "t", 1)
    promote_all(store)
    [new] = claim(store)
    assert new["claim"] > old["claim"]
    assert store.renew(0, [("t:1", old["claim"])], 60_000) == [0]
    assert store.finish(0, [("t:1", old["claim"], "ok", 0, "")], DAY_MS) == [0]
    assert record(r, store, "t:1")["status"] == "running"
    assert store.finish(0, [("t:1", new["claim"], "ok", 0, "")], DAY_MS) == [1]


# -- retry -------------------------------------------------------------------------
def test_retry_of_a_failed_task(r, store, keys, client):
    run = claimed(r, store)
    store.finish(0, [("t:1", run["claim"], "failed", 0, "no")], DAY_MS)
    before = now_ms(r)
    assert client.retry("t", 1) is True
    rec = record(r, store, "t:1")
    assert rec["status"] == "delayed" and before <= int(rec["due"]) <= now_ms(r)
    assert r.pttl(keys.task("t:1")) == -1 and r.zscore(keys.done("failed"), "t:1") is None
    assert int(r.zscore(keys.delayed, "t:1")) == int(rec["due"])
    promote_all(store)
    [again] = claim(store)
    assert again["runs"] == 2


def test_retry_only_failed(r, store, client):
    assert client.retry("t", 1) is False
    add(store, "t", 1)
    with pytest.raises(TaskError, match="not failed"):
        client.retry("t", 1)
    client.delete("t", 1)
    with pytest.raises(TaskError, match="not failed"):
        client.retry("t", 1)


# -- retention ---------------------------------------------------------------------
def test_finished_records_expire_and_indexes_are_trimmed(r, store, keys, client):
    for i in range(3):
        add(store, "t", i)
    promote_all(store)
    runs = {run["member"]: run for run in claim(store)}
    store.finish(0, [("t:0", runs["t:0"]["claim"], "ok", 0, ""), ("t:1", runs["t:1"]["claim"], "failed", 0, "")],
                 DAY_MS)
    client.delete("t", 2)
    for i, status in enumerate(("ok", "failed", "deleted")):
        assert 0 < r.pttl(keys.task(f"t:{i}")) <= DAY_MS
        assert r.zscore(keys.done(status), f"t:{i}") is not None
    finished = now_ms(r)
    promote_all(store, 0, DAY_MS, 100)
    assert all(r.zcard(keys.done(s)) == 1 for s in ("ok", "failed", "deleted")), "inside retention: kept"
    wait_for(lambda: now_ms(r) > finished + 20, 2)
    promote_all(store, 0, 20, 100)
    assert all(r.zcard(keys.done(s)) == 0 for s in ("ok", "failed", "deleted")), "older than retention: trimmed"


def test_records_disappear_on_their_own(r, store, keys):
    run = claimed(r, store)
    store.finish(0, [("t:1", run["claim"], "ok", 0, "")], 30)
    wait_for(lambda: not r.exists(keys.task("t:1")), 3, message="the record to expire")


# -- corrupt data ------------------------------------------------------------------
def test_corrupt_counters_in_a_record_do_not_break_claim_or_leak_into_a_new_add(r, store, keys):
    add(store, "t", 1)
    promote_all(store)
    r.hset(keys.task("t:1"), mapping={"claim": "abc", "runs": "x"})
    [run] = claim(store)  # the script does not fail half-way: the task is handed out
    assert run["member"] == "t:1" and run["runs"] == 1
    r.hdel(keys.task("t:1"), "due")
    before = now_ms(r)
    assert store.finish(0, [("t:1", run["claim"], "retry", 5000, "")], DAY_MS) == [1]  # from now, then
    assert int(record(r, store, "t:1")["due"]) >= before + 5000
    r.delete(keys.task("t:2"))
    r.hset(keys.task("t:2"), mapping={"runs": "x", "lapsed": "1", "claim": "zzz"})  # no status: corrupt
    add(store, "t", 2)
    assert set(record(r, store, "t:2")) >= {"spec", "status"} and "lapsed" not in record(r, store, "t:2")
    promote_all(store)
    [run] = claim(store)
    assert run["member"] == "t:2" and run["runs"] == 1


def test_promote_quarantines_a_delayed_entry_without_record(r, store, keys):
    r.zadd(keys.delayed, {"ghost:1": 0})
    add(store, "t", 1)
    r.hset(keys.task("bad:1"), mapping={"spec": "{}", "priority": "9", "status": "delayed"})
    r.zadd(keys.delayed, {"bad:1": 0})
    moved, *_ = promote_all(store, 0, DAY_MS, 100)
    assert moved == 1
    assert set(r.hkeys(keys.quarantine)) == {"ghost:1", "bad:1"}
    assert "record" in r.hget(keys.quarantine, "ghost:1")
    assert r.zcard(keys.delayed) == 0 and ready_members(r, keys) == ["t:1"]
    assert [run["member"] for run in claim(store)] == ["t:1"]


def test_claim_skips_ready_entries_without_record(r, store, keys):
    r.rpush(keys.ready[0], "ghost:1")
    add(store, "t", 1)
    promote_all(store)
    assert [run["member"] for run in claim(store)] == ["t:1"]
    assert not r.exists(keys.task("ghost:1"))


# -- pub/sub -----------------------------------------------------------------------
def next_message(pubsub):
    return wait_for(lambda: pubsub.get_message(timeout=0.1), 2, message="a pub/sub message")


def test_wake_and_ready_channels(r, store, keys):
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.wake_channel, ready_channel(PREFIX))
    wait_for(lambda: r.pubsub_numsub(keys.wake_channel)[0][1] == 1, 2)
    assert keys.wake_channel == f"{PREFIX}wake:0"

    # A new head: '<due ms> <member>' (the bucket process declares its record in the next promote).
    add(store, "t", 1, delay_ms=50_000)
    msg = next_message(pubsub)
    assert msg["channel"] == keys.wake_channel and msg["data"] == f"{record(r, store, 't:1')['due']} t:1"
    add(store, "t", 2, delay_ms=90_000)  # not the earliest: no wake
    add(store, "t", 3)                  # the earliest: wake
    msg = next_message(pubsub)
    assert msg["data"] == f"{record(r, store, 't:3')['due']} t:3"
    promote_all(store, 0, DAY_MS, 100)
    msg = next_message(pubsub)
    assert msg["channel"] == ready_channel(PREFIX) == f"{PREFIX}ready" and msg["data"] == "0"
    # A claim whose lease is the earliest wakes the bucket (to reap it in time).
    [run] = claim(store, lease_ms=40_000)
    msg = next_message(pubsub)
    assert msg["channel"] == keys.wake_channel and int(msg["data"]) == run["now"] + 40_000
    assert pubsub.get_message(timeout=0.05) is None, "one wake per change of the head"
    pubsub.close()


# -- hash tags and slots -------------------------------------------------------------
def exercise(store: Store, client: Client, count=40):
    """Drive every transition on every bucket (deletes and retries through `client`, on `store`'s Redis)."""
    for i in range(count):
        add(store, "t", i, priority=1 + i % 3, delay_ms=0 if i % 4 else 60_000)
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)
        runs = claim(store, b)
        if runs:
            store.renew(b, [(runs[0]["member"], runs[0]["claim"])], 60_000)
            outcomes = ["ok", "failed", "retry", "quarantine"]
            store.finish(b, [(run["member"], run["claim"], outcomes[n % 4], 1000, "e")
                             for n, run in enumerate(runs[:-1])], DAY_MS)
    for i in range(0, count, 5):
        client.delete("t", i, hard=i % 10 == 0)
    for i in range(1, count, 4):
        with contextlib.suppress(TaskError):  # not failed: the script ran and changed nothing
            client.retry("t", i)


def test_every_key_of_a_bucket_shares_its_hash_tag(r, redis_url):
    store = Store(r, PREFIX, 4)
    with contextlib.closing(client_of(redis_url, store)) as client:
        exercise(store, client)
    keys = set(r.keys("*")) - {meta_key(PREFIX)}  # (the store's own metadata: one key, read alone)
    assert len(keys) > 40
    by_bucket: dict[int, list[str]] = {}
    for key in keys:
        assert key.startswith(PREFIX + "{"), key
        bucket = int(key[len(PREFIX) + 1:key.index("}")])
        by_bucket.setdefault(bucket, []).append(key)
    assert set(by_bucket) == {0, 1, 2, 3}
    for bucket, names in by_bucket.items():
        assert {key_slot(k.encode()) for k in names} == {key_slot(str(bucket).encode())}, bucket
        for name in names:
            if ":t:" in name:
                assert bucket_of(name.split(":t:", 1)[1], 4) == bucket
    assert len({key_slot(str(b).encode()) for b in range(4)}) == 4, "buckets spread over slots"


def test_bucket_of_hashes_the_whole_key():
    members = [f"order:cancel:{i}" for i in range(200)]
    assert {bucket_of(m, 8) for m in members} == set(range(8))
    # The mapping is stored data's address: it must not change between processes or
    # releases (Python's own hash() would), or tasks already stored would be orphaned.
    assert [bucket_of(f"order:cancel:{i}", 8) for i in range(6)] == [5, 3, 1, 7, 4, 2]
    assert bucket_of("order:cancel:42", 1024) == 477
    assert meta_key("p:") == "p:meta"


@pytest.fixture(scope="module")
def cluster():
    """A one-node Redis Cluster owning every slot: it refuses scripts whose keys cross slots."""
    directory = tempfile.mkdtemp(prefix="delayd-cluster-")
    port = wait_for(lambda: (p := free_port()) <= 55535 and p, 5)  # the bus port is port + 10000
    server = RedisServer(directory, port=port, extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                           os.path.join(directory, "nodes.conf")]).start()
    c = server.client()
    c.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
    wait_for(lambda: "cluster_state:ok" in c.execute_command("CLUSTER", "INFO"), 15, message="cluster ok")
    c.close()
    yield server
    server.kill()


@pytest.mark.system
def test_scripts_stay_in_one_slot_on_a_cluster(cluster):
    c = cluster.client()
    c.flushall()
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):
        c.eval("return 1", 2, "{0}a", "{1}a")  # the check this test relies on
    store = Store(c, PREFIX, 4)
    store.limits = store.hosts_off = ""  # as a Store on a cluster client has them: no limits, no hosts off
    with contextlib.closing(client_of(f"redis+cluster://127.0.0.1:{cluster.port}/", store)) as client:
        exercise(store, client)
    assert c.dbsize() > 40
    c.close()


@pytest.mark.system
def test_client_on_a_cluster(cluster):
    from delayd import Client

    cluster.client().flushall()
    client = Client.from_url(f"redis+cluster://127.0.0.1:{cluster.port}/")
    assert client.add("t", "one", call="a:b") is True
    assert client.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(30)]) == 30
    assert len(client.list(limit=1000)) == 31
    # the dashboard's list: one browse call per bucket, one after the other
    assert len(client.browse("delayed", "t", limit=100).rows) == 31
    stats = client.stats()
    assert stats["counts"]["delayed"] == 31 and stats["buckets"] == 4
    assert client.delete("t", 1) is True and client.get("t", 1).status == "deleted"
    assert client.delete("t", 2, hard=True) is True and client.get("t", 2) is None
    client.close()


# -- concurrency -------------------------------------------------------------------
def test_concurrent_adds_of_the_same_key_leave_one_consistent_record(redis_server, r, store, keys):
    """Two writers race on each key: the record is whole (one writer's) and matches its index entry."""
    writers = {"A": (1, 1000), "B": (3, 2000)}  # priority, delay
    rounds = 60
    barrier = threading.Barrier(2)
    nx_results: dict[str, list[int]] = {"A": [], "B": []}
    errors = []

    def writer(name):
        conn = redis_server.client()
        mine = Store(conn, PREFIX, 1)
        priority, delay = writers[name]
        try:
            for i in range(rounds):
                barrier.wait(5)
                add(mine, "race", i, priority=priority, delay_ms=delay, params={"w": name})
                barrier.wait(5)
                nx_results[name].append(add(mine, "nx", i, priority=priority, delay_ms=delay,
                                            params={"w": name}, nx=True))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(name,)) for name in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(r.keys(keys.task_prefix + "*")) == 2 * rounds
    assert r.zcard(keys.delayed) == 2 * rounds
    for topic in ("race", "nx"):
        for i in range(rounds):
            rec = record(r, store, f"{topic}:{i}")
            who = json.loads(rec["spec"])["params"]["w"]
            priority, delay = writers[who]
            assert rec["priority"] == str(priority) and int(rec["due"]) - int(rec["created"]) == delay
            assert r.zscore(keys.delayed, f"{topic}:{i}") == int(rec["due"]) + {3: -0.25, 1: 0.25}.get(priority, 0)
    assert [a + b for a, b in zip(nx_results["A"], nx_results["B"])] == [1] * rounds


def test_delete_racing_promote_and_claim(redis_server, redis_url, r, store, keys):
    """Deletes race a bucket (promote) and a worker (claim + finish); deleted tasks never run after."""
    rng = random.Random(7)
    for round_ in range(4):
        members = [f"d{round_}:{i}" for i in range(150)]
        for m in members:
            add(store, *m.split(":"), priority=rng.choice((1, 2, 3)))
        doomed = set(rng.sample(members, 100))
        hard = set(rng.sample(sorted(doomed), 30))
        deleted: set[str] = set()
        stop = threading.Event()
        claimed_after: list[str] = []
        errors = []

        def bucket():
            conn = redis_server.client()
            s = Store(conn, PREFIX, 1)
            try:
                while not stop.is_set():
                    s.promote(0, 7, DAY_MS)
            except Exception as exc:  # pragma: no cover
                errors.append(exc)
            finally:
                conn.close()

        def worker():
            conn = redis_server.client()
            s = Store(conn, PREFIX, 1)
            try:
                while not stop.is_set():
                    snapshot = set(deleted)
                    for run in claim(s, n=5):
                        if run["member"] in snapshot:
                            claimed_after.append(run["member"])
                        s.finish(0, [(run["member"], run["claim"], "ok", 0, "")], DAY_MS)
            except Exception as exc:  # pragma: no cover
                errors.append(exc)
            finally:
                conn.close()

        threads = [threading.Thread(target=bucket), threading.Thread(target=worker)]
        for t in threads:
            t.start()
        mine = client_of(redis_url, store)
        for m in rng.sample(sorted(doomed), len(doomed)):
            mine.delete(*m.split(":"), hard=m in hard)
            deleted.add(m)
        stop.set()
        for t in threads:
            t.join(10)
        mine.close()
        assert not errors

        # Drain: whatever is left is promoted and claimed now.
        promote_all(store)
        for run in claim(store, n=1000):
            assert run["member"] not in deleted
            store.finish(0, [(run["member"], run["claim"], "ok", 0, "")], DAY_MS)
        assert not claimed_after, f"deleted tasks were claimed: {claimed_after[:5]}"
        assert sum(r.llen(k) for k in keys.ready) == 0 and r.zcard(keys.leases) == 0
        delayed = set(r.zrange(keys.delayed, 0, -1))
        for m in members:
            rec = record(r, store, m)
            assert m not in delayed
            if m in hard:
                assert rec == {}
            elif m in doomed:
                assert rec["status"] == "deleted", (m, rec)
            else:
                assert rec["status"] == "ok", (m, rec)


# -- URL tasks and the delivery log (issue 14) ----------------------------------------

def test_only_a_url_task_is_flagged_and_promote_picks_its_list_by_the_flag(r, store, keys):
    """promote reads the small `url` flag that add writes, never the spec: a record without it
    (a URL task written before the flag existed) goes to the call lists."""
    add(store, "n", "1", url="http://merchant.example/notify")
    add(store, "n", "2", url="http://merchant.example/notify")
    add(store, "c", "1", call="shop.tasks:run")
    assert [r.hget(keys.task_prefix + m, "url") for m in ("n:1", "n:2", "c:1")] == ["1", "1", None]
    r.hdel(keys.task_prefix + "n:2", "url")
    promote_all(store)
    assert sorted(t["member"] for t in claim(store, n=10, url=True)) == ["n:1"]
    assert sorted(t["member"] for t in claim(store, n=10)) == ["c:1", "n:2"]


def test_url_tasks_wait_in_ready_lists_of_their_own(r, store, keys):
    """A claim for the event loop takes URL tasks only, one for the thread pool never takes
    one: a backlog of one kind cannot hold back the other. Lapsed URL leases go back there too."""
    for i in range(3):
        add(store, "n", f"u{i}", url="http://merchant.example/notify", priority=1 + i % 3)
    add(store, "c", "1", call="shop.tasks:run")
    add(store, "p", "1", push="results")
    promote_all(store)
    assert sum(r.llen(k) for k in keys.ready_url) == 3 and sum(r.llen(k) for k in keys.ready) == 2
    assert sorted(t["member"] for t in claim(store, n=10)) == ["c:1", "p:1"]
    urls = claim(store, n=10, url=True, lease_ms=1)
    assert sorted(t["member"] for t in urls) == ["n:u0", "n:u1", "n:u2"]
    wait_for(lambda: promote_all(store).reaped == 3 or not r.zcard(keys.leases), 5, message="leases lapse")
    assert sum(r.llen(k) for k in keys.ready_url) == 3 and not any(r.llen(k) for k in keys.ready)


def test_defer_puts_the_task_back_without_counting_the_run(r, store, keys):
    add(store, "n", "1", url="http://merchant.example/notify", intervals=[0, 60], persistent=False)
    promote_all(store)
    [run] = claim(store, url=True)
    assert run["runs"] == 1
    before = now_ms(r)
    assert store.finish(0, [("n:1", run["claim"], "defer", 0, "circuit open for http://merchant.example:80",
                             "", 30_000)], DAY_MS) == [True]
    rec = record(r, store, "n:1")
    assert rec["status"] == "delayed" and "runs" not in rec and "attempts" not in rec
    assert rec["error"] == "circuit open for http://merchant.example:80"
    assert before + 30_000 <= r.zscore(keys.delayed, "n:1") <= now_ms(r) + 30_000
    r.zadd(keys.delayed, {"n:1": 0})  # due now: the deferred run is run 1 again
    promote_all(store)
    assert claim(store, url=True)[0]["runs"] == 1


def test_a_retry_waits_at_least_the_wait_given(r, store, keys):
    add(store, "n", "1", url="http://merchant.example/notify", intervals=[0, 1])
    promote_all(store)
    [run] = claim(store, url=True)
    before = now_ms(r)
    store.finish(0, [("n:1", run["claim"], "retry", 1000, "HTTP 429", "", 120_000)], DAY_MS)
    assert r.zscore(keys.delayed, "n:1") >= before + 120_000


@pytest.mark.parametrize("kept_by_run, expected", [([5, 5, 5, 2], [3, 4]), ([3, 3, 1], [3]), ([4, 4, 4], [1, 2, 3])])
def test_the_delivery_log_is_trimmed_to_the_count_kept_at_each_run(r, store, keys, kept_by_run, expected):
    add(store, "n", "1", url="http://merchant.example/notify", intervals=[0])
    for n, kept in enumerate(kept_by_run, 1):
        r.zadd(keys.delayed, {"n:1": 0})
        promote_all(store)
        [run] = claim(store, url=True)
        line = attempts.encode(n, n, 1.0, "retry", 500, "HTTP 500")
        store.finish(0, [("n:1", run["claim"], "retry", 1000, "HTTP 500", "", 0, line)], DAY_MS, attempts_kept=kept)
    assert [a["run"] for a in from_record("n:1", record(r, store, "n:1")).attempts] == expected


def test_an_attempt_line_is_the_compact_json_array_of_its_fields():
    # encode writes the line out by hand (it runs for every run of every task)
    for fields in [(1, 1700000000123, 0.4, "ok", None, ""), (12, 5, 1234.5, "retry", 503, 'say "hi"\n\u00e9 \\'),
                   (2, 0, 0.0, "failed", 200, "x" * 300)]:
        line = attempts.encode(*fields)
        error = fields[5] if len(fields[5]) <= attempts.ERROR_CHARS else fields[5][:attempts.ERROR_CHARS - 1] + "…"
        assert line == json.dumps([*fields[:5], error], separators=(",", ":"), ensure_ascii=False)


def test_the_delivery_log_keeps_the_last_attempts(r, store, keys):
    add(store, "n", "1", url="http://merchant.example/notify", intervals=[0])
    for n in range(1, 6):
        r.zadd(keys.delayed, {"n:1": 0})
        promote_all(store)
        [run] = claim(store, url=True)
        line = attempts.encode(n, 1000 * n, 1.5, "retry", 500, "HTTP 500: oops\nnext line")
        assert store.finish(0, [("n:1", run["claim"], "retry", 1000, "HTTP 500", "", 0, line)], DAY_MS,
                            attempts_kept=3) == [True]
    task = from_record("n:1", record(r, store, "n:1"))
    assert [a["run"] for a in task.attempts] == [3, 4, 5]
    assert task.attempts[-1] == {"run": 5, "at": 5.0, "ms": 1.5, "outcome": "retry", "status": 500,
                                 "error": "HTTP 500: oops\nnext line"}


def test_a_stream_of_several_scripts_after_script_flush_loads_each_once_and_keeps_the_order(r, store):
    """A Stream (the queue's one round trip per turn) of calls of two scripts after Redis lost
    its scripts gets the replies it gets with a warm cache, in order, with one SCRIPT LOAD per
    script (EVALSHA) or one FUNCTION LOAD of the library (functions)."""
    from delayd.store.steps import Stream
    from delayd.store.transport import Transport
    calls = [store.claim_call(0, (5, 3, 2), 4, 60_000, DAY_MS) if i % 2 else store.retry_call(f"t:{i}")
             for i in range(10)]
    transport = Transport(r)
    warm = transport.stream(Stream(calls, window=4)).replies
    lose_scripts(r)
    r.config_resetstat()
    replies: list = []
    cold = transport.stream(Stream(calls, window=4, replies=replies)).replies
    assert cold is replies and len(cold) == len(calls)

    def without_clock(rows: list) -> list:  # (a claim's reply starts with Redis's time)
        return [row[1:] if isinstance(row, list) else row for row in rows]
    assert without_clock(cold) == without_clock(warm)
    assert script_loads(r) == (1 if has_functions(r) else 2)


def test_each_script_gets_the_lib_helpers_it_uses_and_loads(r):
    """A script's prelude is the _lib.lua definitions it names, and those they name (lua_lib):
    every script still compiles in Redis, and one that needs little carries little."""
    from delayd.store import lua_lib
    from delayd.store.scripts import SCRIPTS, Script

    def defined(source: str) -> set[str]:
        """The lib's names that `source` defines."""
        return {d for defs in lua_lib.definitions(source) for d in defs.names} & lib_names

    lib_names = {d for defs in lua_lib.definitions(Script._lib) for d in defs.names}
    for script in SCRIPTS.values():
        assert r.script_load(script.source) == script.sha
    assert defined(SCRIPTS["browse"].source) == {"key_type"}
    assert {"recurring_index", "expect", "key_type", "now_ms"} <= defined(SCRIPTS["add"].source)
    assert "tally_lateness" not in defined(SCRIPTS["add"].source)
    lib = "-- header\n\nlocal A = 1\n-- b's note\nlocal function b() return A end\nlocal c, d = {}, {}\n" \
          "local function e() return d.b end  -- 'b' is a field here\n"
    assert lua_lib.source(lib, "return b() -- not c") == \
        "local A = 1\n-- b's note\nlocal function b() return A end\n\nreturn b() -- not c"
    assert lua_lib.source(lib, "return e()") == \
        "local c, d = {}, {}\nlocal function e() return d.b end  -- 'b' is a field here\n\nreturn e()"
    # A --[[lib]] function gets the lib functions only it uses; tables and constants stay in front.
    rare = "local function r()\n  --[[lib]]\n  return b(), e()\nend\nreturn A"
    assert lua_lib.source(lib, rare) == (
        "local A = 1\nlocal c, d = {}, {}\n\nlocal function r()\n-- b's note\nlocal function b() return A end\n"
        "local function e() return d.b end  -- 'b' is a field here\n  return b(), e()\nend\nreturn A")
    with pytest.raises(ValueError):
        lua_lib.source(lib, "--[[lib]]\nreturn b()")
    # add.lua builds the helpers only a replacement uses inside `replacing`.
    add = SCRIPTS["add"].source
    assert add.index("local function zrem_counted") > add.index("local function replacing()")
    assert add.index("local function hincrby") < add.index("local function replacing()")


@pytest.mark.parametrize("status", ["failed", "ok"])
def test_a_retried_or_replayed_recurring_task_is_back_in_the_recurring_index(r, store, keys, client, status):
    """A recurring task whose last run ended it (SCHEDULE_ENDS) leaves `recurring`; run again (retry, replay),
    it recurs again, so it is listed on /schedules again (issue 36, suspected: shown real)."""
    client.add("t", 1, call="shop.tasks:run", every=60, delay=0)
    assert r.zrange(keys.recurring, 0, -1) == ["t:1"]
    promote_all(store)
    [run] = [x for x in claim(store) if x["member"] == "t:1"]
    store.finish(0, [("t:1", run["claim"], status, 0, "", SCHEDULE_ENDS)], DAY_MS)
    assert r.zrange(keys.recurring, 0, -1) == []
    if status == "failed":
        assert client.retry("t", 1) is True
    else:
        assert Transport(r).call(store.retry_call("t:1", "ok", (0, now_ms(r)))) == 1
    assert r.zrange(keys.recurring, 0, -1) == ["t:1"]
    assert [row.member for row in client.schedules().rows] == ["t:1"]


@pytest.mark.parametrize("schedule", ['"every":null', '"cron":null'])
def test_a_retried_task_with_a_null_schedule_does_not_go_in_the_recurring_index(r, store, keys, client, schedule):
    """A null every/cron is no schedule (docs/protocol.md section 7): a record an earlier gate let through with
    one, set aside at its claim, is not listed as a schedule when retried."""
    client.add("t", 1, call="shop.tasks:run", delay=0)
    promote_all(store)
    [run] = [x for x in claim(store) if x["member"] == "t:1"]
    store.finish(0, [("t:1", run["claim"], "failed", 0, "")], DAY_MS)
    r.hset(keys.task("t:1"), "spec", f'{{"call":"shop.tasks:run",{schedule}}}')
    assert client.retry("t", 1) is True
    assert r.zrange(keys.recurring, 0, -1) == []
