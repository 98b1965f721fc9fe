"""Recovery paths of SPEC promise 1 and 5 against a real daemon: corrupt records are set
aside without crashing a worker, and a durable add waits for a replica or the disk."""
from __future__ import annotations

import json

import pytest

from daemon_helper import Daemon
from redis_server import wait_for

from delayd import Client


@pytest.fixture
def daemon(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", buckets=2, queues=1, DELAYD_TASK_TIMEOUT="2", DELAYD_LEASE="3").start()
    yield d
    d.stop()


def make_due_with_spec(client: Client, r, member: str, spec: str) -> None:
    """Overwrite the record's spec, then make the task due now (as a bad write to Redis would)."""
    keys = client.store.keys_for(member)
    r.hset(keys.task(member), "spec", spec)
    seconds, micros = r.time()
    r.zadd(keys.delayed, {member: seconds * 1000 + micros // 1000})
    r.publish(keys.wake_channel, 0)


@pytest.mark.parametrize("spec", [
    "{not json",
    json.dumps(["a", "list"]),
    json.dumps({"topic": "c", "id": "1"}),                                   # no target
    json.dumps({"topic": "other", "id": "9", "call": "delayd.examples:noop"}),  # names another task
])
def test_a_corrupt_record_is_quarantined_and_the_worker_lives_on(daemon, client, r, redis_url, spec):
    queue = daemon.child("delayd: queue 0")
    params = {"list": "ran", "redis": redis_url}
    client.add("c", 1, call="delayd.examples:record", params=params, delay=3600)
    make_due_with_spec(client, r, "c:1", spec)
    keys = client.store.keys_for("c:1")
    wait_for(lambda: r.hget(keys.quarantine, "c:1"), 10, message="record quarantined")
    record = r.hgetall(keys.task("c:1"))
    assert record["status"] == "failed" and record["error"].startswith("quarantined: ")
    assert r.zscore(keys.leases, "c:1") is None and r.zscore(keys.delayed, "c:1") is None
    # The worker did not crash, and it still runs good tasks.
    client.add("c", 2, call="delayd.examples:record", params=params)
    wait_for(lambda: r.lrange("ran", 0, -1) == ["c:2:1"], 10, message="a good task ran")
    assert daemon.child("delayd: queue 0").pid == queue.pid
    # Set aside for good: it is in no index a worker reads, so it never runs again.
    assert r.hget(keys.task("c:1"), "status") == "failed"
    assert r.lrange("ran", 0, -1) == ["c:2:1"]
