"""The URL tasks waiting for a host (issue 29, `delayd hosts`: "tasks waiting for it"), store level on a real
Redis: add.lua writes a URL task's origin in its record (`host`), and every script that moves it between
still to be delivered (delayed, ready, running, parked, held, set aside) and finished or gone keeps
`host|<origin>` in its bucket's counts in step. Through a real daemon and a real local HTTP server, the CLI,
/metrics and the dashboard: tests/daemon/test_waiting_for_hosts.py. The counts are also checked against the
records through random transitions in tests/store/test_stats.py."""
from __future__ import annotations

import pytest
import test_store
from redis_server import now_ms
from store_helper import claim, promote_all, record
from test_store import PREFIX, add

from delayd.model.origin import origin
from delayd.store.transitions import Store

client = test_store.client  # the fixture, on this module's store
SHOP, OTHER = "https://shop.example:443", "http://other.example:8080"
DAY_MS = 86_400_000


@pytest.fixture
def store(r):
    return Store(r, PREFIX, 2)


def waiting(r, store) -> dict[str, int]:
    """`host|<origin>` summed over the buckets' counts, as stored."""
    found: dict[str, int] = {}
    for keys in store.keys:
        for field, value in r.hgetall(keys.counts).items():
            if field.startswith("host|"):
                found[field[5:]] = found.get(field[5:], 0) + int(value)
    return found


def listed(client) -> dict[str, int]:
    return {h.host: h.tasks_waiting for h in client.hosts()}


def run_all(store, outcome: str, error: str = "") -> list[str]:
    """Promote, claim and finish every due URL task with `outcome`; the members run."""
    members = []
    for b in range(store.buckets):
        promote_all(store, b)
        runs = claim(store, b, n=1000, url=True)
        store.finish(b, [(run["member"], run["claim"], outcome, 0, error) for run in runs], DAY_MS)
        members += [run["member"] for run in runs]
    return members


def test_a_url_task_names_its_origin_as_the_daemon_computes_it(store, r):
    urls = ["https://Shop.Example/notify", "HTTPS://shop.example:443/x?y=1", "https://user:pw@shop.example/",
            "http://shop.example", "http://shop.example:80/", "http://shop.example:/",
            "http://[::1]:81/hook", "http://[FE80::1]/", "http://10.0.0.1:8080#frag", "https://x.example:0443/"]
    for i, url in enumerate(urls):
        add(store, "hook", i, url=url)
        assert record(r, store, f"hook:{i}")["host"] == origin(url), url
    add(store, "call", 1)
    add(store, "push", 1, push="jobs")
    assert "host" not in record(r, store, "call:1") and "host" not in record(r, store, "push:1")
    assert waiting(r, store) == {SHOP: 3, "http://shop.example:80": 3, "http://[::1]:81": 1, "http://[fe80::1]:80": 1,
                                 "http://10.0.0.1:8080": 1, "https://x.example:443": 1}


def test_adds_and_replacements_count_per_origin_across_topics(store, client, r):
    add(store, "orders", 1, url="https://shop.example/a")
    add(store, "refunds", 1, url="https://shop.example:443/b")  # another topic, the same origin
    add(store, "orders", 2, url=f"{OTHER}/c", delay_ms=60_000)
    assert waiting(r, store) == {SHOP: 2, OTHER: 1}
    add(store, "orders", 1, url="https://shop.example/again")  # replaced, same origin
    add(store, "orders", 2, url="https://shop.example/moved")  # replaced, another origin
    assert waiting(r, store) == {SHOP: 3}
    add(store, "orders", 2, nx=True, url=f"{OTHER}/c")  # kept: nothing changes
    add(store, "refunds", 1)  # replaced by a call task
    assert waiting(r, store) == {SHOP: 2}
    assert listed(client) == {SHOP: 2}  # no delivery yet, but waiting: listed
    client.add_many([{"topic": "orders", "id": i, "url": f"{OTHER}/x"} for i in range(10, 15)])
    assert waiting(r, store) == {SHOP: 2, OTHER: 5}


def test_finished_tasks_stop_waiting_and_retry_and_replay_wait_again(store, client, r):
    since = now_ms(r) / 1000
    for i in range(3):
        add(store, "hook", f"ok{i}", url=f"https://shop.example/{i}", at_ms=now_ms(r) - 10)
    assert run_all(store, "retry")  # a retry is still to be delivered
    assert waiting(r, store) == {SHOP: 3}
    assert len(run_all(store, "ok")) == 3 and waiting(r, store) == {}
    add(store, "hook", "bad", url=f"{OTHER}/x", at_ms=now_ms(r) - 10)
    add(store, "hook", "worse", url=f"{OTHER}/y", at_ms=now_ms(r) - 10)
    assert waiting(r, store) == {OTHER: 2}
    for b in range(store.buckets):
        promote_all(store, b)
        runs = claim(store, b, n=10, url=True)
        store.finish(b, [(run["member"], run["claim"], "failed" if run["member"] == "hook:bad" else "quarantine", 0,
                          "e") for run in runs], DAY_MS)
    assert waiting(r, store) == {} and client.get("hook", "worse").status == "failed"
    client.retry("hook", "bad")
    assert waiting(r, store) == {OTHER: 1}
    assert client.replay("https://shop.example", since, "ok").requeued == 3
    assert waiting(r, store) == {OTHER: 1, SHOP: 3}
    add(store, "hook", "ok0", url="https://shop.example/0")  # replaces a pending task: still one
    client.delete("hook", "ok1")  # soft, while delayed
    client.delete("hook", "ok2", hard=True)
    assert waiting(r, store) == {OTHER: 1, SHOP: 1}
    run_all(store, "ok")
    client.delete("hook", "ok0")  # finished: was no longer counted
    add(store, "hook", "ok0", url="https://shop.example/0", delay_ms=60_000)  # a finished task re-added
    assert waiting(r, store) == {SHOP: 1}


def test_running_parked_held_and_set_aside_tasks_still_wait(store, client, r):
    for i in range(4):
        add(store, "pay", i, url=f"https://shop.example/{i}", at_ms=now_ms(r) - 10)
    for b in range(store.buckets):
        promote_all(store, b)
    running = [run for b in range(store.buckets) for run in claim(store, b, n=1, url=True)]
    assert running and waiting(r, store) == {SHOP: 4}
    client.pause("pay")
    assert waiting(r, store) == {SHOP: 4}
    client.resume("pay")
    client.disable_host(SHOP)
    for b in range(store.buckets):
        promote_all(store, b)
        assert claim(store, b, n=10, url=True) == []  # set aside
    assert listed(client) == {SHOP: 4} and client.stats()["parked"] == 4 - len(running)
    client.enable_host(SHOP)
    assert waiting(r, store) == {SHOP: 4}
    client.set_limit("pay", concurrency=1)
    for b in range(store.buckets):
        promote_all(store, b)
        claim(store, b, n=10, url=True)
    assert client.stats()["throttled"] > 0 and waiting(r, store) == {SHOP: 4}
    for run in running:
        store.finish(store.keys_for(run["member"]).bucket, [(run["member"], run["claim"], "ok")], DAY_MS)
    assert waiting(r, store) == {SHOP: 4 - len(running)}


def test_a_record_without_the_field_is_never_counted_out(store, client, r):
    """A URL task's record without `host` (its field taken out by hand) was never counted in: its delete
    takes no count below 0."""
    add(store, "old", 1, url="https://shop.example/1", at_ms=now_ms(r) - 10)
    r.hdel(store.keys_for("old:1").task("old:1"), "host")
    for keys in store.keys:
        r.hdel(keys.counts, f"host|{SHOP}")
    client.delete("old", 1, hard=True)
    assert waiting(r, store) == {} and all(int(v) >= 0 for keys in store.keys for v in r.hvals(keys.counts))


def test_host_fields_are_not_topics_or_task_counts(store, client, r):
    add(store, "orders", 1, url="https://shop.example/1")
    assert client.topics() == ["orders"]
    stats = client.stats()
    assert set(stats["topics"]) == {"orders"} and stats["counts"]["delayed"] == 1
    assert client.count() == 1


def test_a_task_quarantined_by_promote_stops_waiting_and_a_damaged_host_field_counts_nothing_below_0(store, client, r):
    for i in range(3):
        add(store, "hook", i, url=f"https://shop.example/{i}", at_ms=now_ms(r) - 10)
    r.hset(store.keys_for("hook:0").task("hook:0"), "status", "running")  # not in delayed: quarantined
    r.hset(store.keys_for("hook:1").task("hook:1"), "host", b"\xff" * 300)  # damaged by hand
    for b in range(store.buckets):
        promote_all(store, b)
    assert client.get("hook", 0).status == "failed" and "quarantined" in client.get("hook", 0).last_error
    client.delete("hook", 1)  # counted out under the damaged name: stops at 0 (no field)
    assert waiting(r, store) == {SHOP: 2}  # (hook:1 is still counted under its real origin: the damage hid it)
    assert all(int(v) >= 0 for keys in store.keys for v in r.hvals(keys.counts))
