"""Limits per topic in the scripts (docs/redis-layout.md, "Limits"): claim holds back what a limit does
not let start, promote releases it in due order when the limit allows, finish and lapsed leases give
concurrency slots back; against a real Redis, store level."""
from __future__ import annotations

import asyncio

import pytest
import test_store
from redis_server import now_ms, wait_for
from store_helper import DAY_MS, claim, promote_all, record
from test_store import PREFIX, add

from delayd import CLAIMED
from delayd.client.errors import DelaydError
from delayd.model.limit import Limit, decode, encode, parse_rate
from delayd.model.task import TaskError
from delayd.store.keys import limits_prefix
from delayd.store.transitions import Store

LP = limits_prefix(PREFIX)
client = test_store.client  # the fixture, on this module's store


@pytest.fixture
def store(r):
    return Store(r, PREFIX, 2)


def due_tasks(store, topic, count, start_ms):
    """`count` tasks of `topic` due (at the given times, in order) now."""
    for i in range(count):
        add(store, topic, i, at_ms=start_ms + i)
    for b in range(store.buckets):
        promote_all(store, b)


def claim_all(store, n=100, lease_ms=60_000) -> list[dict]:
    return [run for b in range(store.buckets) for run in claim(store, b, n=n, lease_ms=lease_ms)]


def release(store):
    """Each bucket's promote, as the bucket process runs it when its `limited` time comes."""
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)


def held(r, store, topic) -> int:
    return sum(int(r.hget(keys.counts, f"throttled|{topic}") or 0) for keys in store.keys)


def test_limit_values_are_checked_and_stored_short():
    assert parse_rate("20/s") == (20, 1000) and parse_rate("3/m") == (3, 60_000) and parse_rate("1/h") == (1, 3_600_000)
    assert encode("50/s", 3) == "50 1000 3" and encode(concurrency=1) == "0 1000 1"
    for rate, concurrency in (("0/s", None), ("5/d", None), ("x", None), (None, 0), (None, True), (None, None)):
        with pytest.raises(TaskError):
            encode(rate, concurrency)
    assert decode("t", "50 1000 3") == Limit("t", "50/s", 3)
    assert decode("t", "garbage") is None


def test_concurrency_holds_the_rest_back_and_a_finish_releases_the_next_in_due_order(r, store, client):
    client.set_limit("lim", concurrency=2)
    start = now_ms(r) - 1000
    due_tasks(store, "lim", 5, start)
    due_tasks(store, "free", 3, start)
    runs = claim_all(store)
    limited = sorted(run["due"] for run in runs if run["member"].startswith("lim:"))
    assert len(limited) == 2 and len([run for run in runs if run["member"].startswith("free:")]) == 3
    assert held(r, store, "lim") == 3 and int(r.zcard(LP + "run:lim")) == 2
    for member in (f"lim:{i}" for i in range(5)):
        rec = record(r, store, member)
        assert rec["status"] in ("running", "delayed") and rec.get("runs", "0") in ("0", "1")
    [limit] = client.limits()
    assert (limit.concurrency, limit.held, limit.running) == (2, 3, 2)
    waiting = sorted(f"lim:{i}" for i in range(5) if f"lim:{i}" not in {run["member"] for run in runs})
    assert sorted(t.key for t in client.list("lim", "delayed")) == waiting  # listed (ls) while held
    assert sorted(row.task.key for row in client.browse("delayed", "lim").rows) == waiting  # and on the dashboard
    assert {row.task.key for row in client.browse("delayed").rows} >= set(waiting)
    # Nothing more starts while both slots are taken, even after a promote.
    release(store)
    assert claim_all(store) == []
    first = next(run for run in runs if run["member"].startswith("lim:"))
    bucket = store.keys_for(first["member"]).bucket
    assert store.finish(bucket, [(first["member"], first["claim"], "ok", 0, "")], DAY_MS) == [True]
    release(store)
    [nxt] = claim_all(store)
    bucket = store.keys_for(nxt["member"]).bucket
    started = {run["member"] for run in runs}
    held_here = [i for i in range(5) if store.keys_for(f"lim:{i}").bucket == bucket and f"lim:{i}" not in started]
    assert nxt["member"] == f"lim:{held_here[0]}"  # its bucket's earliest held one
    assert held(r, store, "lim") == 2


def test_a_rate_lets_its_burst_start_and_says_when_the_next_may(r, store, client):
    client.set_limit("lim", rate="10/s")  # one start per 100 ms, a burst of one
    due_tasks(store, "lim", 4, now_ms(r) - 1000)
    before = now_ms(r)
    assert len(claim_all(store)) == 1
    after = now_ms(r)
    assert held(r, store, "lim") == 3
    # Each bucket holding some says when the next start may be: 100 ms after its claim, rounded up to
    # the ms (bounded by clock reads around the claims, so a slow host cannot fail it).
    nows = [int(score) for keys in store.keys for _, score in r.zrange(keys.limited, 0, -1, withscores=True)]
    assert nows and all(before + 100 <= at <= after + 101 for at in nows), (before, after, nows)
    # Held back is not run: the held tasks are still delayed with no run counted.
    for i in range(4):
        rec = record(r, store, f"lim:{i}")
        assert rec["status"] == "running" or (rec["status"] == "delayed" and "runs" not in rec)


def test_clearing_releases_every_held_task_in_due_order(r, store, client):
    client.set_limit("lim", concurrency=1)
    start = now_ms(r) - 1000
    due_tasks(store, "lim", 6, start)
    assert len(claim_all(store)) == 1
    assert client.clear_limit("lim") is True and client.clear_limit("lim") is False
    release(store)
    runs = claim_all(store)
    assert len(runs) == 5 and held(r, store, "lim") == 0
    for b in range(store.buckets):
        dues = [run["due"] for run in runs if store.keys_for(run["member"]).bucket == b]
        assert dues == sorted(dues)
    assert client.limits() == []


def test_a_lapsed_lease_gives_its_slot_back(r, store, client):
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 2, now_ms(r) - 1000)
    [run] = claim_all(store, lease_ms=1)
    start = now_ms(r)
    wait_for(lambda: now_ms(r) > start + 2, 1, message="the 1 ms lease lapsed (Redis's clock)")
    release(store)  # the slot came back with the lapse: one of the two starts (the lapsed one, or the held one)
    [second] = claim_all(store)
    assert held(r, store, "lim") == 1 and r.zcard(LP + "run:lim") == 1
    store.finish(store.keys_for(second["member"]).bucket, [(second["member"], second["claim"], "ok", 0, "")], DAY_MS)
    release(store)
    [third] = claim_all(store)  # then the other: nothing lost, the lapsed run again under its run number
    assert {second["member"], third["member"]} == {"lim:0", "lim:1"}
    again = second if second["member"] == run["member"] else third
    assert again["runs"] == run["runs"] and held(r, store, "lim") == 0


def test_a_deleted_held_task_never_runs(r, store, client):
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 3, now_ms(r) - 1000)
    [run] = claim_all(store)
    others = [f"lim:{i}" for i in range(3) if f"lim:{i}" != run["member"]]
    client.delete("lim", others[0].split(":")[1])
    client.clear_limit("lim")
    release(store)
    assert [x["member"] for x in claim_all(store)] == [others[1]]
    assert held(r, store, "lim") == 0


def test_a_held_run_counts_its_wait_apart_from_its_lateness(r, store, client):
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 2, now_ms(r) - 1000)
    [run] = claim_all(store)
    rec = record(r, store, next(f"lim:{i}" for i in range(2) if f"lim:{i}" != run["member"]))
    assert rec["queued"] == "0" and "held" in rec
    bucket = store.keys_for(run["member"]).bucket
    store.finish(bucket, [(run["member"], run["claim"], "ok", 0, "")], DAY_MS)
    release(store)
    [second] = claim_all(store)
    totals = {}
    for keys in store.keys:
        for field, value in r.hgetall(keys.totals).items():
            totals[field] = totals.get(field, 0) + int(value)
    assert totals["limited|lim"] == 1 and totals["limited_ms|lim"] >= 0
    assert sum(v for k, v in totals.items() if k.startswith("le:") and k.endswith("|lim")) == 2
    assert "held" not in record(r, store, second["member"])


def test_renew_keeps_the_slot_with_the_lease(r, store, client):
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 1, now_ms(r) - 1000)
    [run] = claim_all(store, lease_ms=1000)
    bucket = store.keys_for(run["member"]).bucket
    assert store.renew(bucket, [(run["member"], run["claim"])], 60_000) == [True]
    assert int(r.zscore(LP + "run:lim", f"{run['member']} {run['claim']}")) > now_ms(r) + 50_000


def test_limits_are_refused_on_cluster_in_one_line(client, monkeypatch):
    store = client.transport.run(client.store_steps())
    monkeypatch.setattr(store, "limits", "")
    with pytest.raises(DelaydError, match="not available on Redis Cluster"):
        client.set_limit("lim", concurrency=1)
    assert client.limits() == []


@pytest.mark.parametrize("rate, burst", [("100/s", 10), ("6000/m", 10), ("20/s", 2), ("1/h", 1)])
def test_a_rate_never_lets_more_than_100_ms_of_starts_through_at_once(r, store, client, rate, burst):
    client.set_limit("lim", rate=rate)
    due_tasks(store, "lim", burst + 40, now_ms(r) - 1000)
    assert len(claim_all(store, n=1000)) in (burst, burst + 1)  # (+1: a start's worth of time may pass meanwhile)
    assert held(r, store, "lim") >= 39


def test_the_async_client_sets_lists_and_clears_limits(redis_url, store):
    from delayd import AsyncClient

    async def app() -> tuple:
        async with AsyncClient.from_url(redis_url, PREFIX) as c:
            replaced = (await c.set_limit("lim", rate="3/m"), await c.set_limit("lim", rate="3/m", concurrency=2))
            listed = await c.limits()
            return replaced, listed, await c.clear_limit("lim"), await c.limits()

    replaced, listed, cleared, after = asyncio.run(app())
    assert replaced == (False, True) and listed == [Limit("lim", "3/m", 2)] and cleared and after == []


def test_a_held_back_backlog_never_blocks_other_topics(r, store, client):
    client.set_limit("lim", rate="1/h")
    start = now_ms(r) - 10_000
    due_tasks(store, "lim", 900, start)
    for i in range(3):
        add(store, "free", i, at_ms=start + 5_000 + i)  # due after the whole backlog
    for b in range(store.buckets):
        promote_all(store, b)
    rounds = 0
    started: list[str] = []
    while len([m for m in started if m.startswith("free:")]) < 3:  # a queue process takes again (claims.py)
        rounds += 1
        assert rounds <= 900 // 200 + 2, "the held backlog kept the other topic's tasks from starting"
        started += [run["member"] for run in claim_all(store, n=200)]
    assert sorted(m for m in started if m.startswith("free:")) == ["free:0", "free:1", "free:2"]
    assert len([m for m in started if m.startswith("lim:")]) == 1 and held(r, store, "lim") == 899


def finish_run(store, run, outcome="ok") -> list[bool]:
    return store.finish(store.keys_for(run["member"]).bucket, [(run["member"], run["claim"], outcome, 0, "")], DAY_MS)


@pytest.mark.parametrize("change", ["soft delete", "hard delete", "replace", "debounce"])
def test_a_run_holds_its_slot_until_it_ends_whatever_happened_to_its_record(r, store, client, change):
    """SPEC 9: the run of a task deleted, replaced or debounced meanwhile keeps its slot while its handler
    runs (renewed with its lease though the run is fenced off), and gives it back the moment it ends."""
    client.set_limit("lim", concurrency=1)
    due_tasks(store, "lim", 2, now_ms(r) - 1000)
    [run] = claim_all(store, lease_ms=5_000)
    topic, tid = run["member"].split(":")
    if change in ("soft delete", "hard delete"):
        assert client.delete(topic, tid, hard=change == "hard delete") is CLAIMED  # (its run goes on)
    elif change == "replace":
        client.add(topic, tid, call="delayd.examples:noop")
    else:
        client.add(topic, tid, call="delayd.examples:noop", debounce=0)
    bucket = store.keys_for(run["member"]).bucket
    assert store.renew(bucket, [(run["member"], run["claim"])], 60_000) == [False]  # fenced off, still running
    release(store)
    assert claim_all(store) == []  # the slot is still the run's
    [(_, expiry)] = r.zrange(LP + "run:lim", 0, -1, withscores=True)
    assert expiry > now_ms(r) + 50_000  # renewed
    assert finish_run(store, run) == [False]  # the run ends: its outcome is not recorded, its slot is free
    release(store)
    [nxt] = claim_all(store)
    assert r.zcard(LP + "run:lim") == 1
    if change == "soft delete" or change == "hard delete":
        assert nxt["member"] != run["member"]


@pytest.mark.parametrize("change", ["delete", "pause"])
def test_a_released_task_that_never_starts_gives_its_slot_back_at_its_claim(r, store, client, change):
    """A task promote released (its slot taken for its claim) but deleted or paused before the claim: the
    claim that skips or parks it frees the slot at once, not when the reservation lapses (30 s)."""
    s = Store(r, PREFIX, 1)  # one bucket: the held tasks are where the claim wakes
    client.set_limit("lim", concurrency=1)
    due_tasks(s, "lim", 3, now_ms(r) - 1000)
    [run] = claim_all(s)
    assert finish_run(s, run) == [True]
    promote_all(s, 0, DAY_MS, 1000)  # releases the next one, its slot taken
    assert r.zcard(LP + "run:lim") == 1
    released = min((f"lim:{i}" for i in range(3) if f"lim:{i}" != run["member"]),
                   key=lambda m: int(record(r, s, m)["due"]))
    assert record(r, s, released).get("released")
    if change == "delete":
        client.delete("lim", released.split(":")[1])
        assert claim_all(s) == [] and r.zcard(LP + "run:lim") == 0
        promote_all(s, 0, DAY_MS, 1000)
        [third] = claim_all(s)
        assert third["member"] not in (run["member"], released)
    else:
        client.pause("lim")
        assert claim_all(s) == [] and r.zcard(LP + "run:lim") == 0


def test_a_lapsed_run_runs_again_without_another_rate_start(r, store, client):
    """docs/guides/limits.md: a run that lapses and runs again does not take another start (issue 36, suspected:
    shown real). With 1/h, the lapsed run of the hour's one start runs again at once; the next task waits."""
    client.set_limit("lim", rate="1/h", concurrency=1)
    due_tasks(store, "lim", 2, now_ms(r) - 1000)
    [run] = claim_all(store, lease_ms=1)
    start = now_ms(r)
    wait_for(lambda: now_ms(r) > start + 2, 1, message="the 1 ms lease lapsed (Redis's clock)")
    release(store)  # reaps the lapsed lease: the task is ready again, at the front
    [again] = claim_all(store)
    assert again["member"] == run["member"] and again["runs"] == run["runs"]
    assert held(r, store, "lim") == 1 and r.zcard(LP + "run:lim") == 1
