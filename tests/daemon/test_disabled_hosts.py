"""Disabling a merchant's host through a real daemon (issue 29): real local HTTP servers as merchants,
`delayd hosts disable` -> nothing sent to it, its tasks kept (not run, not counted), the other merchant
served; `delayd hosts enable` -> sent, in due order; each event logged by the master and counted in
/metrics."""
from __future__ import annotations

import json

import pytest
from daemon_helper import delayd, one_line_error
from redis_server import free_port, wait_for
from test_observability import samples, scrape, value
from url_helper import _Handler, _serving

pytestmark = pytest.mark.system


def test_a_disabled_host_gets_nothing_keeps_its_tasks_and_gets_them_in_due_order_on_enable(
        redis_url, daemon_factory, client, http):
    port = free_port()
    d = daemon_factory(redis_url, buckets=1, queues=1, DELAYD_URL_HOST_CONCURRENCY="1", DELAYD_METRICS_PORT=str(port))
    with _serving(_Handler) as other:
        shop = http.base  # http://127.0.0.1:<port>
        assert delayd("hosts", "disable", shop).stdout.strip() == f"disabled {shop}"
        # Added in the reverse of their due order: id i is due (6 - i) * 20 ms from now.
        for i in range(6):
            client.add("shop", i, url=f"{shop}/success?i={i}", delay=(6 - i) * 0.02)
        client.add_many([{"topic": "other", "id": i, "url": f"{other.base}/success"} for i in range(3)])
        wait_for(lambda: all(client.get("other", i).status == "ok" for i in range(3)), 15,
                 message="the other merchant served")
        wait_for(lambda: client.stats()["topics"].get("shop", {}).get("parked") == 6, 10, message="6 set aside")
        assert http.requests == []
        assert all((t.status, t.runs, t.attempts) == ("delayed", 0, []) for t in (client.get("shop", i)
                                                                                 for i in range(6)))
        listed = {h["host"]: h for h in map(json.loads, delayd("hosts", "--json").stdout.splitlines())}
        assert listed[shop]["disabled_at"] and listed[other.base]["disabled_at"] is None
        assert "DISABLED since" in delayd("hosts").stdout
        assert value(samples(scrape(port)), "delayd_host_disabled", host=shop) == 1
        wait_for(lambda: f"host_disabled host={shop}" in d.log(), 10, message="the master logs the disable")

        assert "6 tasks set aside went back" in delayd("hosts", "enable", shop).stdout
        wait_for(lambda: len(http.requests) == 6, 15, message="the 6 tasks sent on enable")
        assert [int(req["query"]["i"][0]) for req in http.requests] == [5, 4, 3, 2, 1, 0]  # due order
        wait_for(lambda: all(client.get("shop", i).status == "ok" for i in range(6)), 10, message="6 ok")
        assert all(client.get("shop", i).runs == 1 for i in range(6))
        families = samples(scrape(port))
        assert value(families, "delayd_host_switches_total", event="disabled") == 1
        assert value(families, "delayd_host_switches_total", event="enabled") == 1
        wait_for(lambda: f"host_enabled host={shop}" in d.log(), 10, message="the master logs the enable")


def test_bad_hosts_are_refused_with_one_line():
    proc = delayd("hosts", "disable", "ftp://shop.example", check=1)
    assert proc.stderr.strip() == ("delayd: error: bad host 'ftp://shop.example': give scheme://host[:port] (http or "
                                   "https) or a bare host[:port]")
    assert delayd("hosts", "disable", check=2).stderr.strip().endswith("(scheme://host[:port] or a bare host)")


def test_disabling_a_host_never_seen_warns_as_pause_does(redis_url, client):
    proc = delayd("hosts", "disable", "nonsense")
    assert one_line_error(proc) == ("delayd: warning: no task of host nonsense was delivered in the last day or waits "
                                    "(a typo?); disabled all the same: its tasks added later are kept, not sent")
    assert proc.stdout.strip() == "disabled http://nonsense:80, https://nonsense:443"
    client.add("shop", 1, url="https://shop.example/notify", delay=600)
    assert delayd("hosts", "disable", "https://shop.example").stderr == "", "a task waits for it"
    assert delayd("hosts", "disable", "nonsense").stderr == "", "disabled: listed by delayd hosts"


def test_url_disable_after_disables_a_dead_host_and_keeps_its_task(redis_url, daemon_factory, client):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request fails
    daemon_factory(redis_url, buckets=1, queues=1, DELAYD_URL_DISABLE_AFTER="1")
    client.add("hook", 1, url=f"{dead}/notify", intervals=[0] + [1] * 30)
    wait_for(lambda: any(h.host == dead and h.disabled_at for h in client.hosts()), 20,
             message="the dead host disabled after failing for a second")
    wait_for(lambda: client.stats()["topics"].get("hook", {}).get("parked") == 1, 10, message="its task set aside")
    task = client.get("hook", 1)
    assert task.status == "delayed" and 2 <= task.runs <= 6  # the runs before it was disabled, no more
