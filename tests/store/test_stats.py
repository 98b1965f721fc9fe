"""The statistics counters kept by the scripts, and what Client.stats() makes of them."""
from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter

import pytest
from daemon_helper import delayd
from prometheus_client import CollectorRegistry, generate_latest
from redis_server import lose_scripts, now_ms
from store_helper import claim, interleaved, promote_all
from test_store import client_of

from delayd import config as config_mod
from delayd.daemon import metrics
from delayd.model.task import Task, TaskError
from delayd.store import stats as stats_mod
from delayd.store.keys import PRIORITIES
from delayd.store.replies import Finish
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import Batch
from delayd.store.transitions import Store

PREFIX = "delayd:"
DAY_MS = 86400 * 1000


def topic_of(member: str) -> str:
    return member.rpartition(":")[0]


def id_of(member: str) -> str:
    return member.rpartition(":")[2]


def true_counts(r, store: Store, bucket: int) -> dict[str, int]:
    """The state counts recomputed from the indexes themselves (what the counters mirror)."""
    keys = store.keys[bucket]
    truth: Counter = Counter()
    for state, key in (("waiting", keys.delayed), ("running", keys.leases), ("ok", keys.done("ok")),
                       ("failed", keys.done("failed")), ("deleted", keys.done("deleted"))):
        for member in r.zrange(key, 0, -1):
            truth[f"{state}|{topic_of(member)}"] += 1
    live = set()
    for key in (*keys.ready, *keys.ready_url):
        for member in r.lrange(key, 0, -1):
            if member not in live and r.hget(keys.task(member), "queued") == "1":
                live.add(member)
                truth[f"ready:{r.hget(keys.task(member), 'priority') or 2}|{topic_of(member)}"] += 1
    for task_key in r.scan_iter(match=f"{keys.task_prefix}*"):  # URL tasks still to be delivered, per origin
        status, host = r.hmget(task_key, "status", "host")
        if host and status in ("delayed", "running"):
            truth[f"host|{host}"] += 1
    return dict(truth)


def stored_counts(r, store: Store, bucket: int) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(store.keys[bucket].counts).items()}


@pytest.mark.parametrize("seed", range(6))
def test_counts_mirror_the_indexes_through_random_transitions(r, redis_url, seed):
    """Every script keeps `counts` equal to what the indexes hold (and `host|<origin>` to the URL records
    still to be delivered), whatever the order of events."""
    rng = random.Random(seed)
    store = Store(r, PREFIX, 2)
    client = client_of(redis_url, store)
    members = [f"{t}:{i}" for t in ("a", "b:c", "order:cancel") for i in range(4)]
    in_hand: list[tuple[int, str, int]] = []  # (bucket, member, token), some of them stale by now
    started, outcomes, lapsed = 0, Counter(), 0
    for _step in range(400):
        op = rng.choice(["add", "add", "promote", "claim", "claim", "finish", "finish", "delete", "retry",
                         "sleep"])
        member = rng.choice(members)
        keys = store.keys_for(member)
        if op == "add":
            topic, _, id = member.rpartition(":")
            target = rng.choice([{"call": "shop.tasks:run"}, {"url": "https://shop.example/a"},
                                 {"url": "HTTPS://shop.example:443/b"}, {"url": "http://other.example:8080/"}])
            task = Task.new(topic, id, priority=rng.choice(PRIORITIES), **target)
            when = rng.choice([("delay", 0), ("delay", 0), ("delay", 60_000), ("at", 1000)])
            store.add(keys, [(task, *when)], nx=rng.random() < 0.3)
        elif op == "promote":
            b = rng.randrange(2)
            lapsed += promote_all(store, b, rng.choice([DAY_MS, DAY_MS, 0])).reaped
        elif op == "claim":
            b = rng.randrange(2)
            url = rng.random() < 0.5
            for t in store.claim(b, (5, 3, 2), rng.randint(1, 5), rng.choice([60_000, 1]), DAY_MS, url).tasks:
                in_hand.append((b, t.member, t.claim))
                started += 1
        elif op == "finish" and in_hand:
            b, m, token = in_hand.pop(rng.randrange(len(in_hand)))
            outcome = rng.choice(["ok", "failed", "retry", "quarantine"])
            if store.finish(b, [(m, token, outcome, rng.choice([0, 60_000]), "e")], DAY_MS)[0]:
                outcomes[outcome] += 1
        elif op == "delete":
            client.delete(topic_of(member), id_of(member), hard=rng.random() < 0.4)
        elif op == "retry":
            with contextlib.suppress(TaskError):  # not failed: the script ran and changed nothing
                client.retry(topic_of(member), id_of(member))
        elif op == "sleep":
            time.sleep(0.003)  # leases of 1 ms lapse
        for b in range(2):
            assert stored_counts(r, store, b) == true_counts(r, store, b), (seed, _step, op, member)
    client.close()
    totals = Counter()
    for b in range(2):
        for field, value in r.hgetall(store.keys[b].totals).items():
            totals[field.partition("|")[0]] += int(value)
    assert totals["lapsed"] == lapsed and "started" not in totals  # the starts: the sum of the le: buckets
    assert {o: totals[o] for o in outcomes} == dict(outcomes)
    assert sum(v for k, v in totals.items() if k.startswith("le:")) == started


def test_entries_written_by_hand_never_make_a_count_negative_or_wait_forever(r, client):
    """A done:* entry nobody counted, trimmed at the end of retention, made its count -1; a delayed
    entry at +inf was counted as waiting forever (and a lease or a finish at +inf never ended)."""
    store = client.store
    client.add("t", "inf", call="a:b", delay=60)
    client.add("t", "lease", call="a:b")
    client.add("t", "done", call="a:b")
    keys = store.keys_for("t:inf")
    r.zadd(keys.delayed, {"t:inf": float("inf")})                        # a counted task, moved to +inf
    r.zadd(store.keys_for("t:nobody").delayed, {"t:nobody": float("inf")})  # no record, never counted
    r.zadd(keys.done("ok"), {"x:old": 1})                                # finished long ago, never counted
    r.hset(keys.counts, "waiting|y", -5)                                 # a counter written by hand
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 100)
    [run] = [t for b in range(store.buckets) for t in store.claim(b, (5, 3, 2), 10, 60_000, DAY_MS).tasks
             if t.member == "t:lease"] or [None]
    lease_keys = store.keys_for("t:lease")
    r.zadd(lease_keys.leases, {"t:lease": float("inf")})                 # a lease that would never lapse
    done_keys = store.keys_for("t:done")
    r.zadd(done_keys.done("ok"), {"t:done": float("inf")})               # a finish that never ends
    r.hset(done_keys.counts, "ok|t", 1)
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 100)
    stats = client.stats()
    assert all(v >= 0 for c in stats["topics"].values() for v in c["counts"].values()), stats["topics"]
    assert all(int(v) >= 0 for b in range(store.buckets) for k, v in r.hgetall(store.keys[b].counts).items()
               if k != "waiting|y")
    assert "x" not in stats["topics"] and "y" not in stats["topics"]
    assert client.get("t", "inf").status == "failed" and "never due" in client.get("t", "inf").last_error
    nobody = store.keys_for("t:nobody")
    assert r.hget(nobody.task("t:nobody"), "status") == "failed" and r.hexists(nobody.quarantine, "t:nobody")
    assert stats["topics"]["t"]["waiting"] == 0 and stats["topics"]["t"]["counts"]["failed"] == 2
    assert run is not None and client.get("t", "lease").status == "delayed", "the endless lease was reaped"
    assert r.zscore(done_keys.done("ok"), "t:done") is None and stats["topics"]["t"]["counts"]["ok"] == 0


def test_lateness_buckets_match_between_lua_and_python():
    source = SCRIPTS["claim"].source
    line = next(ln for ln in source.splitlines() if ln.startswith("local LATENESS_MS"))
    assert tuple(int(x) for x in line.split("{")[1].split("}")[0].split(",")) == stats_mod.LATENESS_MS
    assert f"local WINDOW_MS = {stats_mod.WINDOW_MS} " in source


def test_quantiles_interpolate_inside_a_bucket():
    events = stats_mod.new_events()
    assert stats_mod.quantile(events, 0.5) is None
    events["le:10"] = 100  # 100 runs between 5 and 10 ms late
    assert stats_mod.quantile(events, 0.5) == pytest.approx(0.0075)
    events["le:5000"] = 100  # and 100 between 2.5 and 5 s
    assert stats_mod.quantile(events, 0.5) == pytest.approx(0.010)
    assert stats_mod.quantile(events, 0.99) == pytest.approx(2.5 + 2.5 * 0.98)
    events["le:inf"] = 1000
    assert stats_mod.quantile(events, 0.99) == 300.0  # past the last bound: that bound


def test_claim_counts_lateness_and_finish_counts_outcomes(client, r):
    store = client.store
    seconds, _ = r.time()
    client.add("late", 1, call="a:b", at=seconds - 3)   # due 3 s ago: starts about 3 s late
    client.add("late", 2, call="a:b", at=seconds - 3)
    client.add("now", 1, call="a:b")
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)
    for b in range(store.buckets):
        results = [(t.member, t.claim, "ok" if t.member.startswith("late") else "retry", 1000, "")
                   for t in store.claim(b, (5, 3, 2), 10, 60_000, DAY_MS).tasks]
        if results:
            store.finish(b, results, DAY_MS)
    stats = client.stats()
    late, now = stats["topics"]["late"], stats["topics"]["now"]
    assert late["runs_last_minute"] == {"ok": 2, "failed": 0, "retry": 0, "quarantine": 0, "defer": 0,
                                        "started": 2, "lapsed": 0, "limited": 0}
    assert now["runs_last_minute"]["retry"] == 1 and now["counts"]["delayed"] == 1
    assert 2.5 <= late["lateness"]["p50"] <= 5 and late["lateness"]["runs"] == 2
    assert now["lateness"]["p99"] < 2.5  # started at once, far from the 3 s of the late ones
    assert stats["runs_last_minute"]["started"] == 3 and stats["lateness"]["runs"] == 3
    assert 60 <= stats["window_s"] <= 70
    assert stats["tasks_per_s"] == pytest.approx(3 / stats["window_s"], abs=0.001)
    assert late["tasks_per_s"] == pytest.approx(2 / stats["window_s"], abs=0.001)
    assert stats["totals"]["late"]["ok"] == 2 and stats["totals"]["late"]["le:5000"] == 2
    assert stats["counts"]["ok"] == 2


@pytest.mark.system
def test_deferred_runs_are_shown_by_stats_text_json_and_metrics(client, r):
    """A run deferred by an open circuit (finish's `defer`) is counted apart from the runs made."""
    store = client.store
    client.add_many([{"topic": "hook", "id": i, "url": "http://127.0.0.1:9/notify"} for i in range(3)])
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)
        results = [Finish(t.member, t.claim, "defer" if t.member != "hook:0" else "retry", 1000,
                          "circuit open for http://127.0.0.1:9", wait_ms=60_000)
                   for t in store.claim(b, (5, 3, 2), 10, 60_000, DAY_MS, url=True).tasks]
        if results:
            store.finish(b, results, DAY_MS)
    stats = client.stats()
    assert stats["runs_last_minute"]["defer"] == 2 and stats["runs_last_minute"]["retry"] == 1
    assert stats["topics"]["hook"]["runs_last_minute"]["defer"] == 2 and stats["totals"]["hook"]["defer"] == 2
    assert stats["tasks_per_s"] == pytest.approx(1 / stats["window_s"], abs=0.001)  # a deferral is no run
    assert json.loads(delayd("stats", "--json").stdout)["runs_last_minute"]["defer"] == 2
    assert "retry=1 quarantine=0 defer=2" in delayd("stats").stdout
    registry = CollectorRegistry()
    config = config_mod.load()
    registry.register(metrics.Collector(lambda: config, lambda: []))
    text = generate_latest(registry).decode()
    assert 'delayd_runs_total{outcome="defer",topic="hook"} 2.0' in text
    assert 'delayd_runs_total{outcome="retry",topic="hook"} 1.0' in text


def test_window_and_minute_hashes_always_expire(client, r):
    """Only the call that makes a window (or minute) hash sets its expiry; every one has one,
    whichever script wrote it first and however many wrote to it since."""
    store = client.store
    client.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(40)])
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)
        while tasks := store.claim(b, (1, 1, 1), 1, 60_000, DAY_MS).tasks:
            store.finish(b, [(tasks[0].member, tasks[0].claim, "ok", 0, "")], DAY_MS)
    windows = [key for keys in store.keys for key in r.keys(keys.window_prefix + "*")]
    assert any(":m:" in key for key in windows) and any(":m:" not in key for key in windows)
    for key in windows:
        limit = stats_mod.WINDOW_MS * 13 if ":m:" not in key else 3_900_000
        assert 0 < r.pttl(key) <= limit, key


def runs_by_window(r, store: Store) -> Counter:
    """Runs that ended `ok` per 10-second window number, over every bucket."""
    found: Counter = Counter()
    for keys in store.keys:
        for key in r.keys(keys.window_prefix + "*"):
            if ":m:" not in key:
                found[int(key.rpartition(":")[2])] += int(r.hget(key, "ok|t") or 0)
    return +found


def run_all(store: Store, skew_ms: float) -> None:
    """Promote, claim and finish every task, the store's estimate of Redis's clock off by `skew_ms`
    before each claim and finish (each reply with Redis's clock corrects it)."""
    for b in range(store.buckets):
        promote_all(store, b, DAY_MS, 1000)
        while True:
            store.clock.offset_ms = skew_ms
            tasks = store.claim(b, (1, 1, 1), 1, 60_000, DAY_MS).tasks
            if not tasks:
                break
            store.clock.offset_ms = skew_ms
            store.finish(b, [(tasks[0].member, tasks[0].claim, "ok", 0, "")], DAY_MS)


def test_runs_count_in_the_window_of_redis_clock_the_caller_declared(client, r):
    """The windows a call declares come from the caller's estimate of Redis's clock (delayd.store.windows).
    Off by less than half a window, every run counts in the window of Redis's clock; off by an hour (a
    first call on a skewed host), in the nearest declared one, and the reply sets the estimate right."""
    store = client.store
    first = now_ms(r) // stats_mod.WINDOW_MS
    client.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(12)])
    run_all(store, 4_900.0)
    client.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(12, 24)])
    run_all(store, -4_900.0)
    last = now_ms(r) // stats_mod.WINDOW_MS
    found = runs_by_window(r, store)
    assert sum(found.values()) == 24 and set(found) <= set(range(first, last + 1)), found
    client.add("t", "skewed", call="a:b")
    b = store.keys_for("t:skewed").bucket
    promote_all(store, b, DAY_MS, 1000)
    store.clock.offset_ms = -3_600_000.0
    claimed = store.claim(b, (1, 1, 1), 1, 60_000, DAY_MS).tasks
    assert abs(store.clock.offset_ms) < 1000  # corrected by the claim's reply
    store.clock.offset_ms = -3_600_000.0
    store.finish(b, [(claimed[0].member, claimed[0].claim, "ok", 0, "")], DAY_MS)
    hour_ago = runs_by_window(r, store) - found
    assert sum(hour_ago.values()) == 1 and first - 361 <= next(iter(hour_ago)) <= last - 359, hour_ago


def test_old_windows_leave_the_last_minute(client, r):
    """Runs of a window older than the last minute are in the totals only."""
    store = client.store
    keys = store.keys[0]
    now_ms = int(r.time()[0]) * 1000
    old = now_ms // stats_mod.WINDOW_MS - stats_mod.WINDOWS - 1
    r.hset(keys.window_prefix + str(old), mapping={"ok|t": 50, "started|t": 50, "le:1|t": 50})
    r.hset(keys.window_prefix + str(now_ms // stats_mod.WINDOW_MS - 2), mapping={"ok|t": 7, "started|t": 7,
                                                                                "le:1|t": 7})
    stats = client.stats()
    assert stats["runs_last_minute"]["ok"] == 7 and stats["topics"]["t"]["runs_last_minute"]["ok"] == 7
    # A `started` field (no script writes one: the starts are the le: buckets' sum) is not counted again.
    assert stats["runs_last_minute"]["started"] == 7


def test_stats_after_redis_lost_its_scripts(client, r):
    """The buckets' pipelined stats.lua calls load the script again after SCRIPT FLUSH (NOSCRIPT), or
    the library after FUNCTION FLUSH."""
    client.add_many([{"topic": "t", "id": i, "call": "a:b", "delay": 60} for i in range(20)])
    lose_scripts(r)
    stats = client.stats()
    assert stats["counts"]["delayed"] == stats["waiting"] == 20 and stats["buckets"] == client.store.buckets > 1


def test_a_delayed_entry_at_minus_inf_is_due_now_not_late_by_ages(client, r):
    """A `delayed` entry at -inf (written by hand; promote moves it at once) was reported with the
    lag of a garbage integer (now + 2^63 ms); it is due now: lag about 0, due at Redis's now."""
    client.add("t", "minf", call="a:b", delay=60)
    client.add("t", "later", call="a:b", delay=60)
    keys = client.store.keys_for("t:minf")
    r.zadd(keys.delayed, {"t:minf": float("-inf")})
    stats = client.stats()
    now = stats["time"]
    for where in (stats, stats["topics"]["t"]):
        assert where["oldest_due_at"] == pytest.approx(now, abs=1) and 0 <= where["oldest_due_lag"] < 1
    assert stats["per_bucket"][keys.bucket]["next_due_at"] == pytest.approx(now, abs=1)
    assert stats["next_due_at"] == pytest.approx(now, abs=1)
    assert stats["counts"]["delayed"] == stats["waiting"] == 2


def test_count_reads_the_counters_by_topic_and_status(client):
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 60} for i in range(5)]
                    + [{"topic": "b:c", "id": i, "push": "out", "delay": 60} for i in range(3)])
    client.delete("a", 0)
    client.pause("b:c")
    assert (client.count(), client.count("a"), client.count("b:c"), client.count("nope")) == (8, 5, 3, 0)
    assert (client.count("a", "delayed"), client.count("a", "deleted"), client.count(status="delayed")) == (4, 1, 7)
    assert client.count(status="failed") == 0


def test_the_oldest_due_of_ready_tasks_reads_the_records_a_peek_at_the_ready_lists_found(client, r):
    """stats.lua reads the records of the members a peek at the heads of the ready lists found (declared
    in its KEYS): a deleted task's stale entry and a task a worker took after the peek are not due-but-
    not-started; a list longer than the peek makes the per-topic lags approximate."""
    r.hset("delayd:meta", "buckets", 1)
    now = now_ms(r) / 1000
    for topic, id, ago, priority in (("a", 0, 50, 2), ("a", 1, 10, 2), ("b", 0, 30, 1), ("c", 0, 40, 3)):
        client.add(topic, id, push="out", at=now - ago, priority=priority)
    promote_all(client.store, 0)
    client.delete("a", 0)

    taken = []

    def worker() -> None:  # after the peek (the first Batch), once
        taken.extend([] if taken else [run["member"] for run in claim(client.store, 0, n=1)])

    stats = interleaved(r, client.stats_steps(), lambda request: isinstance(request, Batch), worker)
    expected = {"a": 10, "b": 30, "c": 40} | {member.partition(":")[0]: 0 for member in taken}
    lags = {topic: row["oldest_due_lag"] for topic, row in stats["topics"].items()}
    assert len(taken) == 1 and lags == pytest.approx(expected, abs=2)
    assert stats["oldest_due_lag"] == pytest.approx(max(expected.values()), abs=2) and stats["oldest_due_exact"]
    client.add_many([{"topic": "d", "id": i, "push": "out", "delay": 0, "priority": 1}
                     for i in range(stats_mod.SCAN_LIMIT)])
    promote_all(client.store, 0)
    assert not client.stats()["oldest_due_exact"]


def test_stats_of_many_topics_never_blocks_redis_for_long_and_counts_every_topic(client, r):
    """Issue 41: stats read each bucket's per-topic hashes whole (HGETALL in stats.lua), so one call
    blocked Redis in proportion to the topics (62.8 ms at 100,000; here ~190 ms at 60,000). Now its calls read
    a page of ~500 fields each (~0.2 ms here); SLOWLOG at 20 ms leaves room for a loaded host's preemptions
    of Redis mid-command and still catches the old one. Every topic is counted once."""
    topics = 60_000
    keys = client.store.keys[0]
    client.add("t0", 1, push="out", delay=3600)  # one real task; the other topics' counters written as the scripts do
    for start in range(0, topics, 10_000):
        r.hset(keys.counts, mapping={f"waiting|t{i}": 1 for i in range(max(start, 1), start + 10_000)})
        r.hset(keys.totals, mapping={f"ok|t{i}": 2 for i in range(start, start + 10_000)})
    r.config_set("slowlog-log-slower-than", 20_000)
    r.slowlog_reset()
    try:
        stats = client.stats()
        slow = [entry for entry in r.slowlog_get(128) if b"SLOWLOG" not in entry["command"].upper()]
    finally:
        r.config_set("slowlog-log-slower-than", 10000)
    assert slow == [], [(entry["duration"], entry["command"][:60]) for entry in slow]
    assert len(stats["topics"]) == topics and stats["counts"]["delayed"] == topics
    assert sum(events["ok"] for events in stats["totals"].values()) == 2 * topics
