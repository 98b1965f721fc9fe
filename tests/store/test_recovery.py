"""Recovery paths of SPEC promise 1 and 5 against a real daemon: corrupt records are set
aside without crashing a worker, and a durable add waits for a replica or the disk."""
from __future__ import annotations

import json
import signal

import pytest
from redis_server import RedisServer, now_ms, wait_for

from delayd import Client, DurabilityError
from delayd.store import durable

pytestmark = pytest.mark.daemon(buckets=2, queues=1, DELAYD_TASK_TIMEOUT="2", DELAYD_LEASE="3")


def make_due_with_spec(client: Client, r, member: str, spec: str) -> None:
    """Overwrite the record's spec, then make the task due now (as a bad write to Redis would)."""
    keys = client.store.keys_for(member)
    r.hset(keys.task(member), "spec", spec)
    r.zadd(keys.delayed, {member: now_ms(r)})
    r.publish(keys.wake_channel, 0)


@pytest.mark.system
@pytest.mark.parametrize("spec", [
    "{not json",
    json.dumps(["a", "list"]),
    json.dumps({"params": {"a": 1}}),                           # no target
    json.dumps({"call": "delayd.examples:noop", "params": [1]}),  # params not an object
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


# -- durable=True ------------------------------------------------------------------------

def redis_version(r) -> tuple[int, int]:
    return durable.version(r.info("server"))


def test_durable_plan_per_redis():
    info = {"redis_version": "6.2.14", "connected_slaves": 0, "aof_enabled": 1}
    assert durable.command({**info, "connected_slaves": 2}, "everysec", 500) == ("WAIT", 1, 500)
    assert durable.command({**info, "redis_version": "7.2.4"}, "everysec", 500) == ("WAITAOF", 1, 0, 500)
    assert durable.command(info, "always", 500) == ()
    with pytest.raises(durable.Unconfirmable, match="appendfsync everysec"):
        durable.command(info, "everysec", 500)
    with pytest.raises(durable.Unconfirmable, match="appendonly no"):
        durable.command({**info, "aof_enabled": 0, "redis_version": "7.4.0"}, None, 500)
    assert durable.confirmed(("WAIT", 1, 500), 1) and not durable.confirmed(("WAIT", 1, 500), 0)
    assert durable.confirmed(("WAITAOF", 1, 0, 500), [1, 0]) and not durable.confirmed(("WAITAOF", 1, 0, 500), [0, 0])


def test_durable_refused_without_replica_or_fsynced_aof_writes_nothing(client, r):
    # The suite's Redis has no AOF and no replica: nothing can confirm a write.
    with pytest.raises(DurabilityError, match="nothing was written"):
        client.add("d", 1, call="delayd.examples:noop", durable=True)
    with pytest.raises(DurabilityError, match="nothing was written"):
        client.add_many([{"topic": "d", "id": 2, "call": "delayd.examples:noop"}], durable=True)
    assert client.get("d", 1) is None and client.get("d", 2) is None
    assert client.add("d", 1, call="delayd.examples:noop")  # without durable: as ever


def test_durable_on_aof(tmp_path):
    with RedisServer(str(tmp_path / "everysec"), aof=True) as server:
        c = Client.from_url(server.url)
        if redis_version(server.client()) >= (7, 2):  # WAITAOF
            assert c.add("d", 1, call="delayd.examples:noop", durable=True)
        else:  # appendfsync everysec on Redis < 7.2: cannot be confirmed
            with pytest.raises(DurabilityError, match="everysec"):
                c.add("d", 1, call="delayd.examples:noop", durable=True)
            assert c.get("d", 1) is None
        c.close()
    with RedisServer(str(tmp_path / "always"), aof=True, extra=["--appendfsync", "always"]) as server:
        c = Client.from_url(server.url)
        assert c.add("d", 1, call="delayd.examples:noop", durable=True)  # fsynced before Redis answered
        assert c.add_many([{"topic": "d", "id": i, "call": "delayd.examples:noop"} for i in range(2, 1200)],
                          durable=True) == 1198
        c.close()


@pytest.fixture
def primary_and_replica(tmp_path):
    primary = RedisServer(str(tmp_path / "primary")).start()
    replica = RedisServer(str(tmp_path / "replica"), extra=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    p, rr = primary.client(), replica.client()
    wait_for(lambda: p.info("replication")["connected_slaves"] >= 1
             and rr.info("replication").get("master_link_status") == "up", 20, message="replica in sync")
    yield primary, replica
    p.close()
    rr.close()
    replica.stop()
    primary.stop()


@pytest.mark.system
def test_durable_waits_for_a_replica(primary_and_replica):
    primary, replica = primary_and_replica
    c = Client.from_url(primary.url)
    rr = replica.client()
    assert c.add("d", 1, call="delayd.examples:noop", durable=True)
    member = "d:1"
    assert rr.hget(c.store.keys_for(member).task(member), "status") == "delayed"  # on the replica at return
    items = [{"topic": "d", "id": i, "call": "delayd.examples:noop"} for i in range(2, 2002)]
    assert c.add_many(items, durable=True) == 2000
    assert sum(rr.zcard(k.delayed) for k in c.store.keys) == 2001

    # The plan (WAIT) is kept: durable adds do not ask INFO and CONFIG each time.
    p = primary.client()
    p.config_resetstat()
    for i in range(5):
        assert c.add("d", f"again{i}", call="delayd.examples:noop", durable=True)
    assert "cmdstat_info" not in p.info("commandstats")

    # A replica that does not answer: the add is written, but the error says it is not confirmed.
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        c.durable_timeout = 0.3
        with pytest.raises(DurabilityError, match="written but not confirmed by WAIT"):
            c.add("d", "late", call="delayd.examples:noop", durable=True)
        assert c.get("d", "late") is not None
        p.config_resetstat()
        with pytest.raises(DurabilityError, match="written but not confirmed by WAIT"):
            c.add("d", "late2", call="delayd.examples:noop", durable=True)
        assert p.info("commandstats")["cmdstat_info"]["calls"] == 1  # the failure made it ask again
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    p.close()
    rr.close()
    c.close()
