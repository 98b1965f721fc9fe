"""Webhook-grade URL delivery (issue 14): per-host caps, the circuit breaker, Retry-After,
signing (verified by the standardwebhooks packages: Python's, and npm's in the webhooks guide's Node
receiver), the SSRF guard, against real local
HTTP servers; and, through a real daemon and Redis, the separate slots of URL and call
tasks, deferring without counting a run, and the delivery log."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from daemon_helper import Daemon, delayd
from docs_examples import example
from node_helper import need_node
from redis_server import free_port, wait_for
from standardwebhooks import Webhook
from url_helper import StaticNames, _Handler

from delayd import Task
from delayd.targets.url import answer, guard
from delayd.targets.url.hosts import Hosts

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def task_to(url: str, id=1, runs=1, **kw) -> Task:
    task = Task.new(kw.pop("topic", "n"), id, url=url, **kw)
    task.runs = runs
    return task


def submit(deliver, tasks):
    return [deliver.begin(t) for t in tasks]


# -- per-host isolation ------------------------------------------------------------------

def test_the_host_cap_is_observed_at_the_server_and_holds_back_no_other_host(http, make_engine):
    deliver = make_engine(url_host_concurrency=3)
    port = http.server_address[1]
    slow = submit(deliver, [task_to(f"{http.base}/busy?seconds=0.4", id=i) for i in range(12)])
    wait_for(lambda: http.peak == 3, 5, message="3 requests in flight to the slow host")
    start = time.monotonic()
    other = deliver(task_to(f"http://localhost:{port}/success", id=99))  # another scheme+host+port
    assert other.kind == "ok" and time.monotonic() - start < 1.0
    assert any(not f.done() for f in slow), "the other host's task had to wait for the slow host's backlog"
    assert [f.result(10)[0].kind for f in slow] == ["ok"] * 12
    assert http.peak == 3


def test_room_counts_requests_in_flight_not_tasks_waiting_for_their_host(http, make_engine):
    """Engine.room(), what the queue claims for URL slots: url_concurrency less the requests in
    flight; tasks waiting for a saturated host hold back no other host, until url_concurrency wait."""
    deliver = make_engine(url_concurrency=4, url_host_concurrency=1)
    engine = deliver.engine
    first = submit(deliver, [task_to(f"{http.base}/busy?seconds=1", id=i) for i in range(3)])
    assert engine.in_hand == 3  # counted at once, before the loop even starts them
    wait_for(lambda: engine.hosts.held == 2, 5, message="1 in flight, 2 waiting for the host")
    assert engine.room() == 3
    more = submit(deliver, [task_to(f"{http.base}/busy?seconds=1", id=i) for i in range(3, 6)])
    wait_for(lambda: engine.hosts.held == 5, 5, message="5 waiting")
    assert engine.room() == 0
    assert [f.result(20)[0].kind for f in first + more] == ["ok"] * 6 and http.peak == 1
    wait_for(lambda: engine.in_hand == 0, 5, message="every run ended")
    assert engine.room() == 4


def test_the_breaker_opens_defers_and_closes_after_a_probe(make_engine):
    port = free_port()
    deliver = make_engine(url_host_concurrency=1, url_breaker_failures=2, url_breaker_cooldown=1.5,
                          url_timeout=2.0)
    url = f"http://127.0.0.1:{port}/success"
    outcomes = [f.result(10)[0] for f in submit(deliver, [task_to(url, id=i) for i in range(5)])]
    assert [o.kind for o in outcomes] == ["retry", "retry", "defer", "defer", "defer"]
    assert all("connection failed" in o.error for o in outcomes[:2])
    assert all(o.error.startswith(f"circuit open for http://127.0.0.1:{port}") for o in outcomes[2:])
    assert all(0 < o.wait <= 1.5 for o in outcomes[2:])
    assert deliver(task_to(url, id=9)).kind == "defer"  # still open: nothing is sent
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.lock, server.stop, server.requests, server.ports = threading.Lock(), threading.Event(), [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        time.sleep(1.6)  # the cooldown itself is what is tested: the probe may go only after it
        probe, *rest = [f.result(10)[0] for f in submit(deliver, [task_to(url, id=i) for i in range(4)])]
        assert probe.kind == "ok" and [o.kind for o in rest] == ["ok"] * 3  # closed by the probe
    finally:
        server.shutdown()
        server.server_close()


def test_the_breaker_table_stays_bounded_over_many_failing_hosts(make_engine):
    """Hosts that failed once and went idle are forgotten past a bound (issue 24): 300 distinct
    hosts (closed ports), real connection errors, a table kept to 50 idle hosts."""
    deliver = make_engine(url_timeout=2.0)
    deliver.engine.hosts.keep = 50
    closed = [socket.socket() for _ in range(300)]  # bound, never listening: connection refused
    for sock in closed:
        sock.bind(("127.0.0.1", 0))
    try:
        tasks = [task_to(f"http://127.0.0.1:{sock.getsockname()[1]}/", id=i) for i, sock in enumerate(closed)]
        outcomes = [f.result(30)[0] for f in submit(deliver, tasks)]
    finally:
        for sock in closed:
            sock.close()
    assert {o.kind for o in outcomes} == {"retry"} and all("connection failed" in o.error for o in outcomes)
    assert len(deliver.engine.hosts.hosts) <= 50


def on_a_loop(hosts_test):
    """Run `hosts_test(hosts, now)` (a coroutine function) against a Hosts whose clock is now[0]."""
    def run():
        now = [1000.0]
        hosts = Hosts(cap=2, failures=3, cooldown=30.0, clock=lambda: now[0], keep=100)
        asyncio.run(hosts_test(hosts, now))
    return run


async def fail(hosts: Hosts, host: str) -> float | None:
    """One request to `host` that fails to connect; what acquire answered (None: it was sent)."""
    wait = await hosts.acquire(host)
    if wait is None:
        hosts.release(host, False)
    return wait


@on_a_loop
async def test_idle_hosts_that_failed_are_forgotten_past_the_bound(hosts, now):
    for i in range(10_000):
        assert await fail(hosts, f"http://h{i}:80") is None
        now[0] += 0.001
    assert len(hosts.hosts) == 100
    assert set(hosts.hosts) == {f"http://h{i}:80" for i in range(9_900, 10_000)}  # the least recent went


@on_a_loop
async def test_hosts_in_use_are_never_forgotten(hosts, now):
    assert await hosts.acquire("http://busy:80") is None  # in flight throughout
    for _ in range(3):
        assert await fail(hosts, "http://down:80") is None
    assert await hosts.acquire("http://down:80") == 30.0  # open
    for i in range(500):
        await fail(hosts, f"http://h{i}:80")
    assert "http://busy:80" in hosts.hosts and len(hosts.hosts) <= 101
    hosts.release("http://busy:80", True)
    assert "http://busy:80" not in hosts.hosts  # no failure to remember


@on_a_loop
async def test_failures_are_forgotten_a_cooldown_after_the_host_went_idle(hosts, now):
    for _ in range(2):
        assert await fail(hosts, "http://flaky:80") is None
    now[0] += 29.0
    assert await fail(hosts, "http://flaky:80") is None  # 3 within a cooldown of each other: open
    assert await hosts.acquire("http://flaky:80") == pytest.approx(30.0)
    now[0] += 30.0  # the probe time: still remembered, the probe fails, open again
    assert await fail(hosts, "http://flaky:80") is None
    assert await hosts.acquire("http://flaky:80") == pytest.approx(30.0)
    now[0] += 60.0  # the probe time, then a cooldown with nothing in flight
    assert await fail(hosts, "http://flaky:80") is None  # forgotten: a first failure again
    assert await fail(hosts, "http://flaky:80") is None
    now[0] += 30.0
    assert [await fail(hosts, "http://flaky:80") for _ in range(3)] == [None, None, None]
    assert hosts.hosts["http://flaky:80"].open_until  # the last 3 were consecutive


# -- Retry-After -------------------------------------------------------------------------

@pytest.mark.parametrize("after, status, low, high", [
    ("7", 429, 7, 7), ("date:30", 503, 27, 31), ("99999", 429, 60, 60), ("soon", 429, 0, 0)])
def test_retry_after_in_seconds_or_as_a_date_capped(http, make_engine, after, status, low, high):
    outcome = make_engine(url_retry_after_max=60)(task_to(f"{http.base}/429?after={after}&status={status}"))
    assert outcome.kind == "retry" and outcome.status == status
    assert low <= outcome.wait <= high


@pytest.mark.parametrize("after", ["²", "٣", "1.5", "-3", "7 s", "Wed, 99 Oct 99999 07:28:00 GMT"])
def test_a_retry_after_that_is_not_a_number_or_a_date_is_ignored(http, make_engine, after):
    """Only ASCII digits or an HTTP date (issue 24: `²` passed isdigit() and broke float())."""
    outcome = make_engine()(task_to(f"{http.base}/429?after={quote(after)}&status=503"))
    assert outcome.kind == "retry" and outcome.status == 503 and outcome.wait == 0
    assert outcome.error == "HTTP 503: slow down"


def test_retry_after_is_ignored_on_other_statuses():
    assert answer.classify(500, b"x", False, 100, "", 0.0).wait == 0
    assert answer.retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 60) == 0  # in the past


# -- signing -----------------------------------------------------------------------------

def test_signatures_verify_with_standardwebhooks(http, make_engine):
    deliver = make_engine(url_signing_secret=SECRET)
    assert deliver(task_to(f"{http.base}/echo", method="POST", body="json", params={"order": 5}, runs=1)).kind == "ok"
    assert deliver(task_to(f"{http.base}/echo", method="POST", params={"order": 5}, runs=2)).kind == "ok"
    assert deliver(task_to(f"{http.base}/echo?x=1", runs=3)).kind == "ok"
    hook = Webhook(SECRET)
    for req in http.requests:
        hook.verify(req["body"], req["headers"], json_parse=False)  # raises if it does not verify
    assert [r["headers"]["webhook-id"] for r in http.requests] == ["n:1"] * 3  # the same for every retry
    tampered = dict(http.requests[0]["headers"])
    with pytest.raises(Exception):
        hook.verify(b'{"order":6}', tampered, json_parse=False)


def test_a_recurring_task_signs_each_run_as_its_own_message(http, make_engine):
    deliver = make_engine(url_signing_secret=SECRET.removeprefix("whsec_"))  # the same key without the prefix
    for run in (1, 2):
        assert deliver(task_to(f"{http.base}/echo", every=60, runs=run)).kind == "ok"
    assert [r["headers"]["webhook-id"] for r in http.requests] == ["n:1:1", "n:1:2"]
    for req in http.requests:
        Webhook(SECRET).verify(req["body"], req["headers"], json_parse=False)


def test_no_signing_headers_without_a_secret(http, make_engine):
    assert make_engine()(task_to(f"{http.base}/echo")).kind == "ok"
    assert not any(h.startswith("webhook-") for h in http.requests[0]["headers"])


# -- SSRF guard ---------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_deny_private_refuses_loopback_after_resolution(http, make_engine, host):
    port = http.server_address[1]
    outcome = make_engine(url_deny_private=True)(task_to(f"http://{host}:{port}/success"))
    assert outcome.kind == "failed" and "not a public address (url_deny_private)" in outcome.error
    assert http.requests == []


@pytest.mark.parametrize("address, is_refused", [
    ("10.0.0.1", True), ("192.0.0.8", True), ("192.0.0.9", True), ("100.64.0.1", True), ("224.0.0.1", True),
    ("8.8.8.8", False),
    ("64:ff9b::a00:1", True), ("64:ff9b::7f00:1", True), ("64:ff9b::a9fe:a9fe", True),  # NAT64 of 10.0.0.1 …
    ("64:ff9b::808:808", False),  # … of a public IPv4: how IPv6-only hosts reach it
    ("64:ff9b:1::808:808", True),  # local-use NAT64 (RFC 8215)
    ("::a00:1", True), ("::7f00:1", True), ("::808:808", False),  # IPv4-compatible (deprecated)
    ("::ffff:a00:1", True), ("::ffff:808:808", False),  # IPv4-mapped
    ("::ffff:0:a00:1", True), ("::ffff:0:7f00:1", True), ("::ffff:0:808:808", False),  # IPv4-translated
    ("2002:a00:1::1", True), ("2002:7f00:1::1", True), ("2002:808:808::1", False),  # 6to4
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # Teredo
    ("fec0::1", True), ("fc00::1", True), ("fe80::1%eth0", True), ("::1", True), ("::", True), ("ff02::1", True),
    ("2606:4700::1111", False),
    ("2130706433", True), ("0177.0.0.1", True), ("127.1", True), ("0x7f.1", True), ("0x7F000001", True),
    ("10.1", True), ("0xa9.0xfe.0xa9.0xfe", True), ("134744072", False), ("8.0x8.2056", False),  # inet_aton's forms
    ("1.example", False), ("0x7f.example", False),
])
def test_the_guard_refuses_every_form_of_a_non_public_address(address, is_refused):
    assert guard.refused(address) is is_refused


@pytest.mark.parametrize("host", ["[64:ff9b::7f00:1]", "[::7f00:1]", "[::ffff:0:7f00:1]", "[2002:7f00:1::1]",
                                  "2130706433", "0177.0.0.1", "127.1", "0x7f.1"])
def test_deny_private_refuses_other_forms_of_loopback(http, make_engine, host):
    outcome = make_engine(url_deny_private=True)(task_to(f"http://{host}:{http.server_address[1]}/success"))
    assert outcome.kind == "failed" and "not a public address (url_deny_private)" in outcome.error


def test_deny_private_resolves_and_checks_the_target_of_a_proxied_request(http, proxy, make_engine, monkeypatch):
    """The proxy would resolve `localhost` itself and reach the local server (issue 24): the guard
    resolves the target first and refuses it; nothing reaches the proxy."""
    monkeypatch.setenv("HTTP_PROXY", proxy.base)
    port = http.server_address[1]
    assert make_engine()(task_to(f"http://localhost:{port}/success")).kind == "ok"  # the proxy works
    assert len(proxy.requests) == len(http.requests) == 1
    deliver = make_engine(url_deny_private=True)
    for host in ("localhost", "127.0.0.1", "[::ffff:127.0.0.1]", "2130706433", "0177.0.0.1", "127.1", "0x7f.1"):
        outcome = deliver(task_to(f"http://{host}:{port}/success"))
        assert outcome.kind == "failed" and "not a public address (url_deny_private)" in outcome.error, host
    unknown = deliver(task_to("http://nowhere.invalid/success"))
    assert unknown.kind == "retry" and "connection failed: nowhere.invalid:80" in unknown.error
    assert len(proxy.requests) == len(http.requests) == 1


def test_deny_private_sends_public_targets_through_the_operators_proxy(http, proxy, make_engine, monkeypatch):
    """The proxy's own address is the operator's choice, not a task's: not checked (here a name
    resolving to loopback); the target is."""
    monkeypatch.setenv("HTTP_PROXY", f"http://localhost:{proxy.server_address[1]}")
    proxy.routes["1.1.1.1:80"] = ("127.0.0.1", http.server_address[1])  # a public address, served locally
    assert make_engine(url_deny_private=True)(task_to("http://1.1.1.1/success")).kind == "ok"
    assert proxy.requests == ["http://1.1.1.1/success"] and http.requests[0]["headers"]["host"] == "1.1.1.1"


CARRIERS = {"nat64.example": ["64:ff9b::7f00:1"], "mapped.example": ["::ffff:127.0.0.1"],
            "translated.example": ["::ffff:0:7f00:1"], "compatible.example": ["::7f00:1"],
            "sixtofour.example": ["2002:7f00:1::1"], "mixed.example": ["93.184.215.14", "64:ff9b::a00:1"]}


@pytest.mark.parametrize("proxied", [False, True])
def test_deny_private_refuses_names_resolving_to_ipv6_forms_of_private_addresses(http, proxy, make_engine,
                                                                                 monkeypatch, proxied):
    """Through the resolver, sent direct or through a proxy: a name whose addresses carry a
    loopback or private IPv4 address is refused."""
    if proxied:
        monkeypatch.setenv("HTTP_PROXY", proxy.base)
    deliver = make_engine(url_deny_private=True)
    deliver.engine.guard.resolver.inner = StaticNames(CARRIERS)
    for name, addresses in CARRIERS.items():
        outcome = deliver(task_to(f"http://{name}:{http.server_address[1]}/success"))
        assert outcome.kind == "failed", name
        assert outcome.error.startswith(f"refused: {name} resolves to {addresses[-1]}, not a public address")
    assert proxy.requests == [] and http.requests == []


def test_a_proxied_public_name_is_looked_up_once_for_concurrent_and_later_requests(http, proxy, make_engine,
                                                                                   monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.base)
    port = http.server_address[1]
    proxy.routes[f"merchant.example:{port}"] = ("127.0.0.1", port)
    deliver = make_engine(url_deny_private=True)
    names = deliver.engine.guard.resolver.inner = StaticNames({"merchant.example": ["93.184.215.14"]})
    url = f"http://merchant.example:{port}/success"
    assert [f.result(10)[0].kind for f in submit(deliver, [task_to(url, id=i) for i in range(5)])] == ["ok"] * 5
    assert deliver(task_to(url, id=9)).kind == "ok"
    assert names.lookups == ["merchant.example"] and len(http.requests) == 6
    assert {r["headers"]["host"] for r in http.requests} == {f"merchant.example:{port}"}


@pytest.mark.parametrize("scheme, no_proxy", [("http", "localhost"), ("https", "")])
def test_deny_private_checks_the_proxys_name_as_a_direct_target(http, proxy, make_engine, monkeypatch,
                                                                  scheme, no_proxy):
    """A task sent straight to the proxy's host (NO_PROXY, or a scheme with no proxy) is checked."""
    monkeypatch.setenv("HTTP_PROXY", f"http://localhost:{proxy.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    outcome = make_engine(url_deny_private=True)(task_to(f"{scheme}://localhost:{http.server_address[1]}/success"))
    assert outcome.kind == "failed" and "not a public address (url_deny_private)" in outcome.error
    assert proxy.requests == [] and http.requests == []


def test_redirects_are_not_followed(http, make_engine):
    outcome = make_engine()(task_to(f"{http.base}/redirect"))
    assert outcome.kind == "retry" and outcome.status == 302 and len(http.requests) == 1


# -- proxies from the environment ---------------------------------------------------------

def test_http_proxy_from_the_environment_is_used_and_no_proxy_bypasses_it(http, make_engine, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", http.base)  # the test server as the proxy: it sees the target's Host
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    deliver = make_engine()
    assert deliver(task_to("http://merchant.invalid/success")).kind == "ok"
    assert [r["headers"]["host"] for r in http.requests] == ["merchant.invalid"]
    direct = deliver(task_to("http://direct.invalid/success"))  # NO_PROXY: resolved itself, and fails
    assert direct.kind == "retry" and "connection failed: direct.invalid" in direct.error
    assert len(http.requests) == 1


# -- through the daemon -------------------------------------------------------------------

@pytest.fixture
def run_daemon(redis_url, daemon_factory):
    return lambda **env: daemon_factory(redis_url, buckets=2, queues=1,
                                        DELAYD_ALLOWED_MODULES="delayd.examples,handlers_fixture", **env)


@pytest.mark.system
def test_a_url_backlog_never_blocks_call_tasks_nor_the_reverse(run_daemon, client, http, tmp_path):
    run_daemon(DELAYD_CONCURRENCY="1", DELAYD_URL_CONCURRENCY="2", DELAYD_URL_HOST_CONCURRENCY="2")
    client.add_many([{"topic": "hook", "id": i, "url": f"{http.base}/busy?seconds=3"} for i in range(6)])
    wait_for(lambda: http.peak == 2, 10, message="every URL slot busy")
    mark = tmp_path / "mark"
    client.add("job", 1, call="handlers_fixture:touch", params={"path": str(mark)})
    wait_for(lambda: client.get("job", 1).status == "ok", 2.5, message="the call task ran past the URL backlog")
    assert sum(client.get("hook", i).status == "delayed" for i in range(6)) == 4  # the backlog still waits
    client.add("job", 2, call="handlers_fixture:slow_touch", params={"path": str(mark), "seconds": 30})
    wait_for(lambda: client.get("job", 2).status == "running", 10, message="the only call slot busy")
    client.add("hook", "fast", url=f"{http.base}/success", priority=3)
    wait_for(lambda: client.get("hook", "fast").status == "ok", 15, message="a URL task ran while the pool was full")


@pytest.mark.system
def test_a_url_run_past_its_deadline_is_abandoned_and_frees_its_slot(run_daemon, client, http, tmp_path):
    """The queue's backstop: a URL run still going past the task timeout (and the engine's
    GRACE), here its callback, is cancelled and recorded as a timeout; with url_concurrency 1
    the next URL task is delivered only once that slot is free again."""
    run_daemon(DELAYD_TASK_TIMEOUT="1", DELAYD_URL_CONCURRENCY="1")
    client.add("hook", "hung", url=f"{http.base}/success", callback="handlers_fixture:slow_touch",
               params={"seconds": 60, "path": str(tmp_path / "never")}, persistent=False)
    wait_for(lambda: len(http.requests) == 1, 10, message="the first request sent")
    client.add("hook", "next", url=f"{http.base}/success")
    wait_for(lambda: client.get("hook", "next").status == "ok", 30, message="the next task delivered")
    hung = client.get("hook", "hung")
    assert hung.status == "failed" and "timeout: still running after 1 s, abandoned" in hung.last_error
    assert [a["outcome"] for a in hung.attempts] == ["failed"] and hung.runs == 1
    assert len(http.requests) == 2 and not (tmp_path / "never").exists()


@pytest.mark.system
def test_a_url_task_without_the_url_flag_is_still_delivered(run_daemon, client, http):
    """A URL task written before add flagged URL records (`url`) is claimed through the call
    lists, and still delivered on the event loop."""
    run_daemon()
    client.add("hook", "old", url=f"{http.base}/success", delay=3)
    task_key = client.store.keys_for("hook:old").task_prefix + "hook:old"
    assert client.store.redis.hdel(task_key, "url") == 1  # long before it is due
    wait_for(lambda: client.get("hook", "old").status == "ok", 15, message="the unflagged URL task delivered")
    assert len(http.requests) == 1


@pytest.mark.system
def test_an_open_circuit_defers_without_counting_runs(run_daemon, client):
    port = free_port()
    run_daemon(DELAYD_URL_HOST_CONCURRENCY="1", DELAYD_URL_BREAKER_FAILURES="2", DELAYD_URL_BREAKER_COOLDOWN="60")
    url = f"http://127.0.0.1:{port}/notify"
    client.add_many([{"topic": "hook", "id": i, "url": url, "persistent": False} for i in range(5)])
    wait_for(lambda: sum(client.get("hook", i).status == "failed" for i in range(5)) == 2 and
             sum((client.get("hook", i).last_error or "").startswith("circuit open") for i in range(5)) == 3,
             15, message="2 runs failed, then 3 tasks deferred")
    for i in range(5):
        task = client.get("hook", i)
        if task.status == "delayed":  # deferred: its only run is still to come
            assert task.runs == 0 and task.attempts == []
            assert task.last_error == f"circuit open for http://127.0.0.1:{port}: not sent, deferred " \
                                      f"{task.last_error.split('deferred ')[1]}"
            assert task.due_at > time.time() + 30
        else:
            assert task.runs == 1 and [a["outcome"] for a in task.attempts] == ["failed"]


@pytest.mark.system
def test_retry_after_delays_the_next_run_and_get_shows_the_attempts(run_daemon, client, http, redis_url):
    run_daemon()
    client.add("hook", 1, url=f"{http.base}/429?after=3", intervals=[0, 1])
    wait_for(lambda: len(http.requests) >= 2, 15, message="the second request")
    first, second = http.requests[:2]
    assert second["t"] - first["t"] >= 2.9  # not 1 s: Retry-After said 3
    wait_for(lambda: len(client.get("hook", 1).attempts) >= 2, 5, message="both attempts logged")
    out = delayd("get", "hook", "1", "--json", env={**Daemon(redis_url, "/tmp").env})
    got = json.loads(out.stdout)["attempts"][:2]
    assert [(a["run"], a["outcome"], a["status"]) for a in got] == [(1, "retry", 429), (2, "retry", 429)]
    assert got[0]["error"].startswith("HTTP 429: Retry-After 3 s: slow down") and got[0]["ms"] >= 0
    assert got[0]["at"] <= first["t"] + 1 and got[1]["at"] >= got[0]["at"] + 2.9
    text = delayd("get", "hook", "1", env={**Daemon(redis_url, "/tmp").env}).stdout
    assert "attempts" in text and "HTTP 429" in text


@pytest.mark.system  # (a node process)
def test_a_node_endpoint_verifies_a_real_delivery_with_npm_standardwebhooks(make_engine, tmp_path):
    """The webhooks guide's Node receiver, as written, behind a real delivery of the URL engine: a signed
    request verifies and the run is ok; signed with another secret, it is refused (401)."""
    node = need_node()
    modules = Path(__file__).resolve().parent / "node_receiver" / "node_modules"
    if not (modules / "standardwebhooks").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{modules} is missing (npm ci there: ./scripts/test runs it)")
        pytest.skip(f"{modules} is missing (npm ci in tests/targets/node_receiver)")
    receiver = example("webhook-receiver-node")
    (tmp_path / "node_modules").symlink_to(modules)
    (tmp_path / "receiver.mjs").write_text(receiver)
    port = free_port()
    proc = subprocess.Popen([node, "receiver.mjs"], cwd=tmp_path, env={**os.environ, "WEBHOOK_SECRET": SECRET,
                                                                        "PORT": str(port)})
    try:
        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0
        wait_for(lambda: proc.poll() is not None or listening(), 15, message="the receiver listening")
        url = f"http://127.0.0.1:{port}/notify"
        signed = make_engine(url_signing_secret=SECRET)
        for body in ("json", "form"):
            assert signed(task_to(url, method="POST", body=body, params={"order": 5})).kind == "ok", body
        assert signed(task_to(url + "?x=1")).kind == "ok"
        forged = make_engine(url_signing_secret="whsec_" + "A" * 32)(task_to(url, method="POST", params={"o": 1}))
        assert forged.kind != "ok" and "401" in forged.error
    finally:
        proc.kill()
        proc.wait()
