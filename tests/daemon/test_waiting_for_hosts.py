"""The URL tasks waiting for each host (issue 29: host health's "tasks waiting for it") through a real daemon,
a real local HTTP server as the merchant, `delayd hosts` (table and --json), /metrics and the dashboard's
/api/hosts and /hosts: a disabled merchant's kept tasks and a merchant only scheduled for later are listed
with their counts though nothing was sent to them in the last day; enabled, the daemon drains the tasks and
the count ends at 0. The counting itself: tests/store/test_host_waiting.py."""
from __future__ import annotations

import json

import pytest
from daemon_helper import delayd
from redis_server import free_port, wait_for
from test_observability import samples, scrape, value
from web_helper import Web

pytestmark = pytest.mark.system


def listed(env: dict) -> dict[str, dict]:
    return {host["host"]: host for host in map(json.loads, delayd("hosts", "--json", env=env).stdout.splitlines())}


def test_delayd_hosts_metrics_and_dashboard_count_the_tasks_waiting_until_the_daemon_drains_them(
        redis_url, daemon_factory, client, http):
    port = free_port()
    d = daemon_factory(redis_url, buckets=2, queues=1, DELAYD_METRICS_PORT=str(port))
    shop, later = http.base, f"http://127.0.0.1:{free_port()}"  # later: due in an hour, nothing listens
    delayd("hosts", "disable", shop, env=d.env)
    client.add_many([{"topic": topic, "id": i, "url": f"{shop}/success?i={i}"}
                     for topic in ("orders", "refunds") for i in range(10)])
    client.add_many([{"topic": "reminders", "id": i, "url": f"{later}/remind", "delay": 3600} for i in range(3)])
    wait_for(lambda: client.stats()["parked"] == 20, 15, message="the disabled merchant's 20 tasks set aside")

    hosts = listed(d.env)
    assert (hosts[shop]["tasks_waiting"], hosts[shop]["deliveries"]) == (20, 0) and hosts[shop]["disabled_at"]
    assert (hosts[later]["tasks_waiting"], hosts[later]["deliveries"], hosts[later]["disabled_at"]) == (3, 0, None)
    lines = delayd("hosts", env=d.env).stdout.splitlines()
    assert lines[0].split()[:5] == ["HOST", "SENT_1H", "FAILED_1H", "BREAKER", "WAITING"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[shop][1:5] == ["0", "0", "closed", "20"] and rows[later][1:5] == ["0", "0", "closed", "3"]
    families = samples(scrape(port))
    assert value(families, "delayd_host_tasks_waiting", host=shop) == 20
    assert value(families, "delayd_host_tasks_waiting", host=later) == 3
    with Web(redis_url) as web, web.client() as browser:
        hosts = browser.get("/api/hosts").json()["hosts"]
        assert {h["host"]: h["tasks_waiting"] for h in hosts} == {shop: 20, later: 3}
        assert '<td class="num">20</td>' in browser.get("/hosts").text

    delayd("hosts", "enable", shop, env=d.env)
    wait_for(lambda: client.count(status="ok") == 20, 30, message="the daemon delivered the 20 tasks")
    assert len(http.requests) == 20
    assert listed(d.env)[shop]["tasks_waiting"] == 0  # counted out as each finished
    wait_for(lambda: listed(d.env)[shop]["deliveries"] == 20, 10, message="the deliveries reported")
    assert listed(d.env)[later]["tasks_waiting"] == 3
    assert value(samples(scrape(port)), "delayd_host_tasks_waiting", host=shop) == 0
    client.delete("reminders", 0)
    client.delete("reminders", 1, hard=True)
    assert listed(d.env)[later]["tasks_waiting"] == 1
