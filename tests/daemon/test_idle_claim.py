"""A claim is one call (claim.lua: docs/redis-layout.md, "Declared keys"): an idle daemon starts a task due now
with one claim call."""
from __future__ import annotations

import threading

import pytest
import redis
from redis_server import wait_for

from delayd.store.scripts import SCRIPTS

pytestmark = [pytest.mark.system]


def claims_seen(monitor, seen: list[str]) -> None:
    """Each claim.lua call MONITOR shows (EVALSHA by SHA, or FCALL by function), as 'claim', appended to `seen`,
    and the test's ECHO marks as they are."""
    names = (SCRIPTS["claim"].sha, SCRIPTS["claim"].function)
    try:
        for command in monitor.listen():
            text = command["command"]
            if text.startswith("ECHO "):  # the test's marks, in the same stream
                seen.append(text)
            if any(name in text for name in names):
                seen.append("claim")
    except (redis.ConnectionError, ValueError):  # the monitor closed at the end of the test
        return


def test_an_idle_daemon_starts_a_due_task_in_one_claim_call(redis_url, daemon_factory, client, r):
    """The ready message names the bucket: the queue process's next call pops and starts the task. A first
    task loads the scripts (a NOSCRIPT call shows in MONITOR too); the queue process's next idle claims come
    WAIT_CAP s after its start."""
    daemon_factory(redis_url, buckets=1, queues=1)
    seen: list[str] = []
    with r.monitor() as monitor:
        threading.Thread(target=claims_seen, args=(monitor, seen), daemon=True).start()
        for i in range(4):
            if i == 1:
                r.echo("from")
            client.add("idle", str(i), push="out", delay=0)
            wait_for(lambda i=i: client.get("idle", str(i)).status == "ok", 10, message="the task ran")
        r.echo("to")
        wait_for(lambda: "ECHO to" in seen, 10, message="MONITOR caught up")
        assert seen[seen.index("ECHO from") + 1:seen.index("ECHO to")] == ["claim"] * 3
