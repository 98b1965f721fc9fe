"""A queue process killed between the two halves of a claim (take.lua, claim.lua: docs/redis-layout.md,
"Declared keys"): the members it took go back to their ready list when their hold ends, and run once."""
from __future__ import annotations

import threading

import pytest
import redis
from redis_server import wait_for
from store_helper import QUOTAS

from delayd.store.scripts import SCRIPTS

pytestmark = [pytest.mark.system]


def test_a_task_taken_by_a_queue_process_killed_before_its_claim_runs_once(redis_url, daemon_factory, client, r):
    """The queue process is stopped (SIGSTOP) and the take it would send next is sent for it, so
    that it dies holding a take it never claims; then it is SIGKILLed. The daemon's promote puts the
    take back after its hold and the restarted queue process runs the task, once."""
    daemon = daemon_factory(redis_url, buckets=1, queues=1)
    [queue] = daemon.children("queue")
    queue.suspend()
    keys = client.store.keys[0]
    client.add("lost", "1", call="delayd.examples:record", params={"list": "ran", "redis": redis_url})
    wait_for(lambda: r.llen(keys.ready[1]) == 1, 10, message="the task ready")
    store = client.store
    taken = store.taken(store.transport.call(store.take_call(0, QUOTAS, 10)))
    assert taken.members == ["lost:1"] and r.zrange(keys.taking, 0, -1) == [taken.key] and r.llen(keys.ready[1]) == 0
    queue.kill()
    wait_for(lambda: client.get("lost", "1").status == "ok", 30, message="the task ran")
    assert r.lrange("ran", 0, -1) == ["lost:1:1"]
    assert r.zcard(keys.taking) == 0 and r.llen(keys.ready[1]) == 0 and r.zcard(keys.leases) == 0
    late = store.claimed(store.transport.call(store.claim_call(0, taken, 60_000, 60_000)))
    assert late.tasks == [] and r.lrange("ran", 0, -1) == ["lost:1:1"]  # its claim, were it to come, is fenced


def claims_seen(monitor, seen: list[str]) -> None:
    """Each take.lua and claim.lua call MONITOR shows (EVALSHA by SHA, or FCALL by function), as 'take' or
    'claim' ('claim hinted' in pop mode), appended to `seen`, and the test's ECHO marks as they are."""
    names = {SCRIPTS[name].sha: name for name in ("take", "claim")}
    names.update({SCRIPTS[name].function: name for name in ("take", "claim")})
    try:
        for command in monitor.listen():
            text = command["command"]
            if text.startswith("ECHO "):  # the test's marks, in the same stream
                seen.append(text)
            for script, name in names.items():
                if script in text:
                    seen.append(name + (" hinted" if name == "claim" and "}:ready:1" in text else ""))
    except (redis.ConnectionError, ValueError):  # the monitor closed at the end of the test
        return


def test_an_idle_daemon_starts_a_due_task_in_one_claim_call(redis_url, daemon_factory, client, r):
    """The ready message names the task: the queue process's next call pops and starts it (claim.lua's
    pop mode), no take before it. A first task loads the scripts (a NOSCRIPT call shows in MONITOR too);
    the queue process's next idle takes come WAIT_CAP s after its start."""
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
        assert seen[seen.index("ECHO from") + 1:seen.index("ECHO to")] == ["claim hinted"] * 3


def test_a_ready_message_of_the_old_form_starts_the_task_by_take_and_claim(redis_url, daemon_factory, client, r):
    """A daemon not upgraded yet announces 'N' without members: the queue process takes, then claims."""
    daemon_factory(redis_url, buckets=1, queues=1)
    keys = client.store.keys[0]
    seen: list[str] = []
    with r.monitor() as monitor:
        threading.Thread(target=claims_seen, args=(monitor, seen), daemon=True).start()
        client.add("old", "0", push="out", delay=0)  # (loads the scripts)
        wait_for(lambda: client.get("old", "0").status == "ok", 10, message="the first task ran")
        client.add("old", "1", push="out", delay=3600)
        r.echo("from")
        r.zrem(keys.delayed, "old:1")  # made ready as an old promote would, announced without its member
        r.hset(keys.task("old:1"), "queued", "1")
        r.rpush(keys.ready[1], "old:1")
        r.publish("delayd:ready", "0")
        wait_for(lambda: client.get("old", "1").status == "ok", 10, message="the task ran")
        r.echo("to")
        wait_for(lambda: "ECHO to" in seen, 10, message="MONITOR caught up")
        assert seen[seen.index("ECHO from") + 1:seen.index("ECHO to")] == ["take", "claim"]
