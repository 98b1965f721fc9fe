"""Disabling and enabling a URL host (issue 29, `delayd hosts disable|enable`), store level on a real
Redis: claim sets a disabled host's ready URL tasks aside as a paused topic's (not run, not counted as
runs, nothing lost); enable brings them back in due order, leaving a paused topic's for its resume.
url_disable_after disables a host failing that long. Replay re-queues a host's finished tasks. Through a
real daemon and real local HTTP servers: tests/daemon/test_disabled_hosts.py, tests/daemon/test_replay.py."""
from __future__ import annotations

import json

import pytest
import test_store
from daemon_helper import delayd
from redis_server import now_ms, wait_for
from store_helper import claim, promote_all, record
from test_store import PREFIX, add

from delayd.model.origin import origins
from delayd.model.task import TaskError
from delayd.store.keys import host_events_key, host_key
from delayd.store.transitions import Store
from delayd.store.transport import Transport
from delayd.targets.url.health import Health

client = test_store.client  # the fixture, on this module's store
SHOP, OTHER = "https://shop.example:443", "http://other.example:80"


@pytest.fixture
def store(r):
    return Store(r, PREFIX, 2)


def due_urls(store, start_ms: int, hosts: dict[str, str], count: int) -> None:
    """`count` URL tasks per topic -> URL base of `hosts`, due at start_ms + i (in order), made ready."""
    for topic, base in hosts.items():
        for i in range(count):
            add(store, topic, i, at_ms=start_ms + i, url=f"{base}/notify?i={i}")
    for b in range(store.buckets):
        promote_all(store, b)


def claim_urls(store) -> list[dict]:
    return [run for b in range(store.buckets) for run in claim(store, b, n=100, url=True)]


def parked(r, store, topic) -> int:
    return sum(int(r.hget(keys.counts, f"parked|{topic}") or 0) for keys in store.keys)


def test_a_host_is_named_by_its_origin_or_a_bare_name_for_both_schemes():
    assert origins("https://Shop.Example") == [SHOP]
    assert origins("http://shop.example:8080/") == ["http://shop.example:8080"]
    assert origins("shop.example") == ["http://shop.example:80", "https://shop.example:443"]
    assert origins("shop.example:8443") == ["http://shop.example:8443", "https://shop.example:8443"]
    assert origins("http://[::1]:81") == ["http://[::1]:81"]
    for bad in ("", "ftp://x", "https://shop.example/path", "http://:80", "shop.example:notaport", "not a url",
                "shop\texample", "http://shop\x01example"):
        with pytest.raises(TaskError):
            origins(bad)


def test_a_disabled_hosts_tasks_are_set_aside_uncounted_and_come_back_in_due_order(store, client, r):
    assert client.disable_host("https://shop.example") == [SHOP]
    assert client.disable_host("https://shop.example:443") == []  # already: not counted again
    due_urls(store, now_ms(r) - 100, {"shop": "https://shop.example", "other": "http://other.example"}, 5)
    runs = claim_urls(store)
    assert sorted(run["member"] for run in runs) == [f"other:{i}" for i in range(5)]  # the other host runs
    assert parked(r, store, "shop") == 5 and client.count("shop", "delayed") == 5
    for i in range(5):
        task = client.get("shop", i)
        assert (task.status, task.runs) == ("delayed", 0)
        assert record(r, store, f"shop:{i}")["queued"] == "0"
    # the set-aside tasks still wait for their host, the other host's running ones for theirs
    assert {h.host: (h.disabled_at is not None, h.tasks_waiting) for h in client.hosts()} == {SHOP: (True, 5),
                                                                                              OTHER: (False, 5)}
    assert len(client.browse("delayed", "shop").rows) == 5  # the dashboard's list shows them delayed
    assert claim_urls(store) == []  # nothing else comes due while disabled

    assert client.enable_host("shop.example") == 5
    assert parked(r, store, "shop") == 0 and not any(r.smembers(keys.aside) for keys in store.keys)
    for b in range(store.buckets):
        promote_all(store, b)
    runs = claim_urls(store)
    assert sorted(run["member"] for run in runs) == [f"shop:{i}" for i in range(5)]
    assert all(run["runs"] == 1 for run in runs)  # set aside, the run was not counted
    for b in range(store.buckets):  # each bucket hands them out in due order
        dues = [run["due"] for run in runs if store.keys_for(run["member"]).bucket == b]
        assert dues == sorted(dues)
    assert r.hgetall(host_events_key(PREFIX)) == {"disabled": "1", "enabled": "1"}


def test_enabling_leaves_a_paused_topics_tasks_for_its_resume(store, client, r):
    client.disable_host(SHOP)
    due_urls(store, now_ms(r) - 100, {"shop": "https://shop.example"}, 3)
    assert claim_urls(store) == [] and parked(r, store, "shop") == 3
    client.pause("shop")
    assert client.enable_host(SHOP) == 0  # the topic is paused: they stay parked
    assert parked(r, store, "shop") == 3
    assert client.resume("shop") == 3
    for b in range(store.buckets):
        promote_all(store, b)
    assert len(claim_urls(store)) == 3


def test_tasks_of_a_host_still_disabled_are_set_aside_again_when_another_is_enabled(store, client, r):
    for host in (SHOP, OTHER):
        client.disable_host(host)
    due_urls(store, now_ms(r) - 100, {"hook": "https://shop.example"}, 2)
    for i in range(2):  # the same topic, another host
        add(store, "hook", f"o{i}", at_ms=now_ms(r) - 50, url=f"http://other.example/n?i={i}")
    for b in range(store.buckets):
        promote_all(store, b)
    assert claim_urls(store) == [] and parked(r, store, "hook") == 4
    assert client.enable_host(SHOP) == 4  # the topic's parked tasks all go back ...
    for b in range(store.buckets):
        promote_all(store, b)
    assert sorted(run["member"] for run in claim_urls(store)) == ["hook:0", "hook:1"]
    assert parked(r, store, "hook") == 2  # ... and the other host's are set aside again
    client.delete("hook", "o0")  # a delete finds a task set aside where it finds a paused topic's
    assert parked(r, store, "hook") == 1
    assert client.enable_host(OTHER) == 1


def finished_urls(store, client, r, hosts: dict[str, str], count: int, status: str = "ok") -> None:
    """`count` URL tasks per topic -> base of `hosts`, claimed and finished `status`, in one finish call per
    bucket (so that many share a finish time: the pages must step past ties)."""
    due_urls(store, now_ms(r) - 100, hosts, count)
    for b in range(store.buckets):
        runs = claim(store, b, n=10_000, url=True)
        store.finish(b, [(run["member"], run["claim"], status) for run in runs], 86_400_000)


def test_replay_requeues_exactly_the_hosts_finished_tasks_in_the_span_through_pages(store, client, r, monkeypatch):
    from delayd.client import replay
    monkeypatch.setattr(replay, "PAGE", 7)  # many pages, and ties of finish times across them
    since = now_ms(r) / 1000
    finished_urls(store, client, r, {"shop": "https://shop.example", "other": "http://other.example"}, 40)
    finished_urls(store, client, r, {"late": "https://shop.example"}, 5, status="failed")
    dry = client.replay("https://shop.example", since, "ok", dry_run=True)
    assert (dry.examined, dry.matched, dry.requeued) == (80, 40, 0)
    assert client.count("shop", "ok") == 40
    assert client.replay("shop.example", since + 3600, "ok").examined == 0  # nothing finished since then
    seen = []
    done = client.replay("https://shop.example", since, "all", progress=seen.append)
    assert (done.examined, done.matched, done.requeued) == (85, 45, 45) and seen[-1] == done
    assert client.count("shop", "ok") == 0 and client.count("late", "failed") == 0 and client.count("other", "ok") == 40
    for b in range(store.buckets):
        promote_all(store, b)
    runs = claim_urls(store)
    assert sorted(run["member"] for run in runs) == sorted([f"shop:{i}" for i in range(40)] +
                                                          [f"late:{i}" for i in range(5)])
    assert all(run["runs"] == 2 for run in runs)  # a new run of the same task
    for bad in ({"status": "maybe"}, {"since": "yesterday"}):
        with pytest.raises(TaskError):
            client.replay("shop.example", **{"since": since, **bad})


def report_failure(client, host: str, disable_after_ms: int) -> None:
    """One queue process's report of a failed request to `host` (lua/hosts.lua), as the loop sends it."""
    health = Health()
    health.record(host, False, "connection failed: refused", 0.0)
    Transport(client.redis).call(client.store.hosts_call(health.take(), disable_after_ms))


def test_url_disable_after_disables_a_host_failing_that_long_and_enable_starts_the_count_afresh(client, r):
    report_failure(client, SHOP, 600_000)  # failing since now: not for 10 minutes yet
    report_failure(client, OTHER, 0)  # (0: never)
    assert not [h.host for h in client.hosts() if h.disabled_at]
    r.hset(host_key(PREFIX, SHOP), "failing_since", now_ms(r) - 600_000)  # failing for 10 minutes
    r.hset(host_key(PREFIX, OTHER), "failing_since", now_ms(r) - 86_000_000)
    report_failure(client, SHOP, 600_000)
    report_failure(client, OTHER, 0)
    assert [h.host for h in client.hosts() if h.disabled_at] == [SHOP]
    assert r.hgetall(host_events_key(PREFIX)) == {"disabled": "1"}
    report_failure(client, SHOP, 600_000)  # already disabled: not counted again
    assert r.hgetall(host_events_key(PREFIX)) == {"disabled": "1"}
    client.enable_host(SHOP)
    report_failure(client, SHOP, 600_000)  # failing again, but only since now
    assert not [h.host for h in client.hosts() if h.disabled_at]


BAD_PORTS = ["http://x:abc/", "http://x:-1/", "http://x:99999/", "http://x:0/"]


def test_a_stored_url_with_an_impossible_port_breaks_no_read(store, client, r, redis_url):
    """SPEC 9: a task written past the add gate (an old version, a raw producer) with such a URL: get, ls,
    hosts and replay (the CLI's dry run too) answer as for any other task, the others' replay unchanged."""
    since = now_ms(r) / 1000
    finished_urls(store, client, r, {"bad": "https://shop.example", "shop": "https://shop.example"}, len(BAD_PORTS),
                  status="failed")
    for i, url in enumerate(BAD_PORTS):
        r.hset(store.keys_for(f"bad:{i}").task(f"bad:{i}"), "spec", json.dumps({"url": url}))
        assert client.get("bad", i).url == url
    assert len(client.list("bad", "failed")) == len(BAD_PORTS) and client.hosts() is not None
    dry = client.replay("https://shop.example", since, "failed", dry_run=True)
    assert (dry.examined, dry.matched) == (2 * len(BAD_PORTS), len(BAD_PORTS))
    proc = delayd("replay", "--host", "shop.example", "--since", str(since), "--status", "failed", "--dry-run",
                  check=None, DELAYD_REDIS_URL=redis_url, DELAYD_PREFIX=PREFIX)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("host", ["http://\u00c4BC.invalid:19412", "b\u00fccher.example", "shop.example:0",
                                  "shop.example:99999", "http://shop.example:abc"])
def test_hosts_refuses_what_add_refuses(host):
    """One rule for a URL's host everywhere (delayd.model.checks.url_authority_error): what no task can be added
    for cannot be disabled either, and a non-ASCII name is never lowercased one way here and another in Lua."""
    with pytest.raises(TaskError, match="bad host"):
        origins(host)


def lateness_ms(r, store, topic) -> dict[str, int]:
    """The starts of `topic` by lateness bucket (`le:<ms>` -> starts), over every bucket's totals."""
    found: dict[str, int] = {}
    for keys in store.keys:
        for field, value in r.hgetall(keys.totals).items():
            if field.startswith("le:") and field.endswith(f"|{topic}"):
                found[field.split("|")[0]] = found.get(field.split("|")[0], 0) + int(value)
    return found


@pytest.mark.parametrize("hold", ["disabled host", "paused topic"])
def test_time_set_aside_on_purpose_is_not_lateness(store, client, r, hold):
    """Like a limit's hold, the time a task waits for its disabled host or its paused topic is not lateness
    (the overview's p99): a task due now, set aside 600 ms, starts at most 500 ms late once let go."""
    if hold == "disabled host":
        client.disable_host("https://shop.example")
    else:
        client.pause("shop")
    due_urls(store, now_ms(r) - 2, {"shop": "https://shop.example"}, 2)
    assert claim_urls(store) == [] and parked(r, store, "shop") == 2
    start = now_ms(r)
    wait_for(lambda: now_ms(r) > start + 600, 2, message="600 ms set aside (Redis's clock)")
    if hold == "disabled host":
        client.enable_host("https://shop.example")
    else:
        client.resume("shop")
    for b in range(store.buckets):
        promote_all(store, b)
    assert len(claim_urls(store)) == 2
    late = lateness_ms(r, store, "shop")
    assert sum(late.values()) == 2 and sum(n for bound, n in late.items() if bound != "le:inf"
                                           and int(bound[3:]) <= 500) == 2, late
