"""A claim is one call (claim.lua: docs/redis-layout.md, "Declared keys"); during an upgrade, a queue process
of the earlier version killed between the two calls of its claim (its take.lua, then its claim.lua) leaves
a take in `taking`, whose members go back to their ready list when its hold ends, and run once."""
from __future__ import annotations

import threading

import pytest
import redis
from redis_server import now_ms, wait_for
from store_helper import old_take

from delayd.store.scripts import SCRIPTS

pytestmark = [pytest.mark.system]


def test_a_take_of_an_earlier_version_whose_queue_process_was_killed_runs_once(redis_url, daemon_factory, client, r):
    """The queue process is stopped (SIGSTOP), the take an earlier version's would send is made for it, so
    that it dies holding a take it never claims; then it is SIGKILLed. The daemon's promote puts the take back
    after its hold and the restarted queue process runs the task, once."""
    daemon = daemon_factory(redis_url, buckets=1, queues=1)
    [queue] = daemon.children("queue")
    queue.suspend()
    keys = client.store.keys[0]
    client.add("lost", "1", call="delayd.examples:record", params={"list": "ran", "redis": redis_url})
    wait_for(lambda: r.llen(keys.ready[1]) == 1, 10, message="the task ready")
    old_take(r, keys, ["lost:1"], now_ms(r) + 1000)
    queue.kill()
    wait_for(lambda: client.get("lost", "1").status == "ok", 30, message="the task ran")
    assert r.lrange("ran", 0, -1) == ["lost:1:1"]
    assert r.zcard(keys.taking) == 0 and r.llen(keys.ready[1]) == 0 and r.zcard(keys.leases) == 0


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


def test_a_ready_message_of_the_earlier_form_starts_the_task_in_one_claim_call(redis_url, daemon_factory, client, r):
    """An earlier version's promote names the members after the bucket ('0 m1 m2'): read as the bucket."""
    daemon_factory(redis_url, buckets=1, queues=1)
    keys = client.store.keys[0]
    seen: list[str] = []
    with r.monitor() as monitor:
        threading.Thread(target=claims_seen, args=(monitor, seen), daemon=True).start()
        client.add("old", "0", push="out", delay=0)  # (loads the scripts)
        wait_for(lambda: client.get("old", "0").status == "ok", 10, message="the first task ran")
        client.add("old", "1", push="out", delay=3600)
        r.echo("from")
        r.zrem(keys.delayed, "old:1")  # made ready as an earlier promote would, announced naming its member
        r.hset(keys.task("old:1"), "queued", "1")
        r.rpush(keys.ready[1], "old:1")
        r.publish("delayd:ready", "0 old:1")
        wait_for(lambda: client.get("old", "1").status == "ok", 10, message="the task ran")
        r.echo("to")
        wait_for(lambda: "ECHO to" in seen, 10, message="MONITOR caught up")
        assert seen[seen.index("ECHO from") + 1:seen.index("ECHO to")] == ["claim"]
