"""Host health (issue 29, `delayd hosts`): queue processes fold their per-host delivery tallies into
Redis with hosts.lua; the last hour by minute, the breaker, since when a host fails and its last error
are read back by any client; hosts not seen for a day drop out. Through a real daemon: a dead merchant
shows failing, a healthy one does not, in `delayd hosts` and on the dashboard."""
from __future__ import annotations

import json

import pytest
from daemon_helper import delayd
from redis_server import free_port, wait_for
from web_helper import Web

from delayd.store.keys import host_key, hosts_seen_key
from delayd.store.transport import Transport
from delayd.targets.url.health import Health

DEAD, ALIVE = "http://10.0.0.1:80", "https://shop.example:443"


def report(client, *deliveries: tuple[str, bool, str, float]) -> None:
    """One queue process's report of `deliveries` (host, ok, error, circuit open for s), as the loop sends it."""
    health = Health()
    for delivery in deliveries:
        health.record(*delivery)
    Transport(client.redis).call(client.store.hosts_call(health.take()))


def by_host(client) -> dict:
    return {h.host: h for h in client.hosts()}


def test_reports_add_up_per_host_and_failing_since_holds_until_a_success(client, r):
    report(client, (DEAD, False, "connection failed: 10.0.0.1:80: Connection refused", 0.0), (ALIVE, True, "", 0.0))
    first = by_host(client)[DEAD]
    assert (first.deliveries, first.failures, first.breaker) == (1, 1, "closed")
    assert first.last_error == "connection failed: 10.0.0.1:80: Connection refused" and first.failing_since
    report(client, *[(DEAD, False, "timeout after 10 s waiting for the answer", 30.0)] * 4)  # another process
    hosts = by_host(client)
    dead, alive = hosts[DEAD], hosts[ALIVE]
    assert (dead.deliveries, dead.failures, dead.breaker) == (5, 5, "open") and dead.open_until > dead.seen_at
    assert dead.failing_since == first.failing_since and dead.last_error.startswith("timeout after 10 s")
    assert (alive.deliveries, alive.failures, alive.failing_since, alive.last_error) == (1, 0, None, None)
    report(client, (DEAD, False, "HTTP 500", 0.0), (DEAD, True, "", 0.0))  # it answers again
    dead = by_host(client)[DEAD]
    assert (dead.deliveries, dead.failures, dead.breaker, dead.failing_since) == (7, 6, "closed", None)
    assert dead.last_error == "HTTP 500" and dead.ok_at  # the last error stays readable
    assert r.pttl(host_key("delayd:", DEAD)) > 86_000_000  # a day after its last report


def test_the_hour_counts_only_its_minutes_and_hosts_unseen_for_a_day_drop_out(client, r):
    report(client, (DEAD, False, "HTTP 503", 0.0), (ALIVE, True, "", 0.0))
    key = host_key("delayd:", DEAD)
    (value,) = (v for f, v in r.hgetall(key).items() if f.startswith("m"))
    minute = int(value.split(",")[0])
    r.hset(key, f"m{(minute - 30) % 60}", f"{minute - 90},100,100")  # left from 90 minutes ago: not counted
    r.hset(key, f"m{(minute - 58) % 60}", f"{minute - 58},10,3")     # 58 minutes ago: counted
    dead = by_host(client)[DEAD]
    assert (dead.deliveries, dead.failures) == (11, 4)
    r.zadd(hosts_seen_key("delayd:"), {DEAD: 1})  # last seen long ago
    assert set(by_host(client)) == {ALIVE}  # not listed
    report(client, (ALIVE, True, "", 0.0))
    assert r.zrange(hosts_seen_key("delayd:"), 0, -1) == [ALIVE]  # and forgotten by the next report


def test_a_key_of_the_wrong_type_is_set_aside_not_a_crash(client, r):
    r.set(host_key("delayd:", DEAD), "garbage")
    r.set(hosts_seen_key("delayd:"), "garbage")
    assert client.hosts() == []
    report(client, (DEAD, False, "HTTP 500", 0.0))
    assert by_host(client)[DEAD].failures == 1


# (a cooldown longer than the test: on a loaded host the default 30 s can pass before the breaker is read)
@pytest.mark.daemon(buckets=1, queues=1, DELAYD_URL_BREAKER_FAILURES="2", DELAYD_URL_TIMEOUT="2",
                    DELAYD_URL_BREAKER_COOLDOWN="600")
def test_delayd_hosts_shows_a_dead_merchant_failing_and_a_healthy_one_not(daemon, client, http):
    dead = f"http://127.0.0.1:{free_port()}"
    for i in range(3):
        client.add("notify", f"ok{i}", url=f"{http.base}/success", persistent=False)
        client.add("notify", f"dead{i}", url=f"{dead}/notify", persistent=False)

    def listed() -> dict:
        lines = delayd("hosts", "--json", env=daemon.env).stdout.splitlines()
        return {host["host"]: host for host in map(json.loads, lines)}
    wait_for(lambda: len(listed()) == 2 and listed()[dead]["deliveries"] >= 2
             and listed()[http.base]["deliveries"] == 3, 20, message="both hosts reported")
    hosts = listed()
    bad, good = hosts[dead], hosts[http.base]
    assert bad["failing_since"] and bad["failures"] == bad["deliveries"] and "Connection refused" in bad["last_error"]
    assert bad["breaker"] == "open"  # two connection errors opened it
    assert (good["failures"], good["failing_since"], good["breaker"]) == (0, None, "closed")
    text = delayd("hosts", env=daemon.env).stdout.splitlines()
    assert text[0].split()[:4] == ["HOST", "SENT_1H", "FAILED_1H", "BREAKER"]
    assert text[1].startswith(dead) and "failing since" in text[1] and text[2].startswith(http.base)
    with Web(daemon.env["DELAYD_REDIS_URL"]) as web, web.client() as browser:
        assert [h["host"] for h in browser.get("/api/hosts").json()["hosts"]] == [dead, http.base]
        page = browser.get("/hosts").text
        assert page.index(dead) < page.index(http.base) and "Connection refused" in page and 'href="/hosts"' in page
