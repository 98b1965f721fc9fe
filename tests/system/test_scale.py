"""Scale-out: two daemons on one Redis, a 3-master Redis Cluster, and Sentinel failover."""
from __future__ import annotations

import json

import chaos_handlers
import pytest
from cluster_helper import Cluster, SentinelSet
from daemon_helper import Daemon, delayd, settled
from redis_server import wait_for

from delayd import Client

pytestmark = pytest.mark.system


def all_ok(client: Client, topic: str, n: int) -> bool:
    tasks = client.list(topic=topic, status="ok", limit=n + 10)
    return len(tasks) == n


def test_two_daemons_share_one_redis_without_duplicate_runs(redis_url, tmp_path, client, r):
    params = {"list": "ran", "redis": redis_url}
    with Daemon(redis_url, tmp_path / "a", buckets=4, queues=1, DELAYD_LOG_LEVEL="DEBUG") as a, \
            Daemon(redis_url, tmp_path / "b", buckets=4, queues=1, DELAYD_LOG_LEVEL="DEBUG") as b:
        client.add_many([{"topic": "s", "id": i, "call": "delayd.examples:record", "params": params,
                          "delay": (i % 40) * 0.05} for i in range(400)])
        wait_for(lambda: r.llen("ran") >= 400 and settled(client, "s"), 30, message="400 runs, nothing left")
        # The log line follows the handler's RPUSH: wait for all of them.
        wait_for(lambda: a.log().count("event=run ") + b.log().count("event=run ") >= 400, 10,
                 message="400 run lines")
        ran_a, ran_b = a.log().count("event=run "), b.log().count("event=run ")
        assert ran_a > 0 and ran_b > 0, (ran_a, ran_b)  # the work spread over both daemons

        # `delayd status --cluster` lists both, from any host: no local daemon needed.
        listed = cluster_status(redis_url, tmp_path / "elsewhere")
        assert {d["pid"] for d in listed} == {a.master.pid, b.master.pid}
        for d in listed:
            assert d["state"] == "running" and d["buckets"] == 4 and d["queues"] == 1
            assert sorted(c["name"] for c in d["children"]) == ["bucket 0", "bucket 1", "bucket 2", "bucket 3",
                                                                 "queue 0"]
            assert all(c["pid"] for c in d["children"]) and d["seen_ago"] < 10
        text = status_cluster(redis_url, tmp_path / "elsewhere")
        assert text.returncode == 0 and "2 live daemons" in text.stdout, text
        assert str(a.master.pid) in text.stdout and str(b.master.pid) in text.stdout
        b.stop()  # a graceful stop takes its entry out at once
        assert [d["pid"] for d in cluster_status(redis_url, tmp_path / "elsewhere")] == [a.master.pid]
    done = status_cluster(redis_url, tmp_path / "elsewhere")
    assert done.returncode == 3 and "no live delayd daemon" in done.stdout, done
    # Both daemons stopped, every run in flight ended: a late duplicate would be here now.
    runs = r.lrange("ran", 0, -1)
    assert len(runs) == len(set(runs)) == 400  # each task moved once and run once
    assert a.log().count("event=run ") + b.log().count("event=run ") == 400


def status_cluster(redis_url: str, state_dir, *flags: str):
    return delayd("status", "--cluster", *flags, "--redis", redis_url, check=None, DELAYD_STATE_DIR=str(state_dir))


def cluster_status(redis_url: str, state_dir) -> list[dict]:
    out = status_cluster(redis_url, state_dir, "--json")
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout)["daemons"]


@pytest.fixture(scope="module")
def cluster():
    with Cluster(3) as c:
        yield c


def test_cluster_runs_tasks_with_buckets_spread_over_shards(cluster, tmp_path):
    client = Client.from_url(cluster.url)
    rc = cluster.client()
    nodes = {rc.get_node_from_key(keys.delayed).name for keys in client.store.keys}
    assert len(nodes) >= 2  # bucket hash tags land on different shards
    # A short lease: the killed worker's leased tasks come back in seconds, not after the default lease.
    with Daemon(cluster.url, tmp_path / "d", buckets=client.store.buckets, queues=2, DELAYD_LEASE="3",
                DELAYD_TASK_TIMEOUT="2") as d:
        client.add_many([{"topic": "c", "id": i, "call": "delayd.examples:noop", "delay": (i % 10) * 0.1}
                         for i in range(300)])
        client.add("c", "push", push="delayd-cluster-out")
        queue = d.child("delayd: queue 0")
        queue.kill()  # a worker dies mid-run: its leased tasks come back
        wait_for(lambda: all_ok(client, "c", 301), 60, interval=0.1, message="all cluster tasks ok")
        # At least once: the push may repeat only if queue 0 was killed between its push and its finish,
        # and then with the same run number (the pushed value is the task as `get --json` prints it).
        pushed = [json.loads(v) for v in rc.lrange("delayd-cluster-out", 0, -1)]
        assert 1 <= len(pushed) <= 2
        assert {(p["key"], p["runs"]) for p in pushed} == {("c:push", 1)}
        # The registry's keys share one slot: status --cluster works on a Redis Cluster too.
        assert [x["pid"] for x in cluster_status(cluster.url, tmp_path / "elsewhere")] == [d.master.pid]
        stats = client.stats()
        assert stats["counts"]["ok"] >= 301 and stats["counts"]["delayed"] == 0
    client.close()


def test_sentinel_failover_loses_no_task(tmp_path):
    with SentinelSet() as sentinels:
        client = Client.from_url(sentinels.url)
        with Daemon(sentinels.url, tmp_path / "d", buckets=2, queues=1) as d:
            client.add_many([{"topic": "f", "id": i, "call": "delayd.examples:noop", "delay": 1 + (i % 30) * 0.1}
                             for i in range(300)])
            sentinels.replicated()
            sentinels.failover()
            try:
                wait_for(lambda: all_ok(client, "f", 300), 60, interval=0.2, message="all tasks ok after failover")
            except AssertionError:
                print(client.stats(), d.log()[-5000:])
                raise
        client.close()


def test_killed_daemon_work_is_taken_over_by_the_other(redis_url, tmp_path, client, r):
    """SIGKILL one daemon's master (its children follow): the survivor runs everything,
    including the runs the dead one had begun and not finished."""
    env = {"DELAYD_LEASE": "3", "DELAYD_TASK_TIMEOUT": "2", "DELAYD_ALLOWED_MODULES": "delayd.examples,chaos_handlers"}
    a = Daemon(redis_url, tmp_path / "a", buckets=4, queues=1, **env).start()
    with Daemon(redis_url, tmp_path / "b", buckets=4, queues=1, **env):
        a_queues = {str(q.pid) for q in a.children("queue")}

        def begun_by_a() -> set[str]:
            """Tasks a queue process of daemon a began (slow_record says which process runs it)."""
            entries = (entry.partition(" ") for entry in r.lrange(chaos_handlers.STARTED, 0, -1))
            return {member for pid, _, member in entries if pid in a_queues}
        client.add_many([{"topic": "k", "id": i, "call": "chaos_handlers:slow_record",
                          "params": {"seconds": 1, "list": "ran", "redis": redis_url}} for i in range(100)])
        wait_for(begun_by_a, 10, message="daemon a running tasks")
        kids = a.children()
        a.master.kill()
        a.proc.wait(10)
        wait_for(lambda: not [k for k in kids if k.is_running() and k.status() != "zombie"], 10,
                 message="a's children gone")
        # The precondition, checked: a died holding runs (begun, not finished).
        held = {m for m in begun_by_a() if client.get(*m.split(":")).status != "ok"}
        assert held, "daemon a held no unfinished run when it was killed"
        wait_for(lambda: all_ok(client, "k", 100), 60, interval=0.2, message="survivor finished all 100")
        finished = {entry.rpartition(":")[0] for entry in r.lrange("ran", 0, -1)}
        assert held <= finished and len(finished) == 100


def test_closing_a_sentinel_client_closes_its_connections_to_the_sentinels():
    """Client.close (and the daemon's start-up check) leave no sentinel connection behind for a
    forked child to inherit (redis-py's own close leaves them to the garbage collector)."""
    with SentinelSet() as sentinels:
        watcher = sentinels.sentinel_client()

        def sentinel_clients() -> int:
            return watcher.execute_command("CLIENT", "LIST").count("cmd=")
        alone = sentinel_clients()
        client = Client.from_url(sentinels.url)
        client.add("s", 1, push="out")
        assert sentinel_clients() > alone
        client.close()
        wait_for(lambda: sentinel_clients() == alone, 5, message="the sentinel connection closed")
        del client  # (kept alive until here: redis-py's close alone would leave its connection open)
