"""Real Redis Cluster and Sentinel set-ups on loopback, for the scale-out tests."""
from __future__ import annotations

import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import redis
from redis_server import RedisServer, free_port, wait_for

from delayd.daemon.embedded import find_redis_server


def cluster_port() -> int:
    """A free port low enough that port + 10000 (the cluster bus) is valid and free too."""
    for _ in range(1000):
        port = free_port()
        if port <= 55535:
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair for a cluster node")


def redis_cli() -> str:
    return str(Path(find_redis_server()).parent / "redis-cli")


class Cluster:
    """`masters` cluster-enabled redis-servers joined with `redis-cli --cluster create`, each with
    `replicas` replicas (3 masters or more); `node_timeout` (ms) is how soon a dead master fails over."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout: int = 2000):
        self.dir = Path(tempfile.mkdtemp(prefix="delayd-cluster-"))
        self.replicas = replicas
        self.nodes = [RedisServer(str(self.dir / f"n{i}"), choose_port=cluster_port, extra=[
            "--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / f"n{i}" / "nodes.conf"),
            "--cluster-node-timeout", str(node_timeout)]) for i in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/"

    def start(self) -> "Cluster":
        for node in self.nodes:
            node.start()
        if len(self.nodes) >= 3:
            subprocess.run([redis_cli(), "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                            "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
        else:  # redis-cli wants 3 masters: give the slots out by hand
            first = self.nodes[0].client()
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
            share = 16384 // len(self.nodes)
            for i, node in enumerate(self.nodes):
                end = 16384 if i == len(self.nodes) - 1 else (i + 1) * share
                node.client().execute_command("CLUSTER", "ADDSLOTS", *range(i * share, end))

        def ready() -> bool:
            return all(n.client().cluster("info")["cluster_state"] == "ok" for n in self.nodes) and \
                len(self.masters()) * (1 + self.replicas) == len(self.nodes)
        wait_for(ready, 30, interval=0.1, message="cluster_state ok")
        return self

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def node_ids(self) -> dict[str, RedisServer]:
        """Each live node by its cluster node id."""
        return {n.client().execute_command("CLUSTER", "MYID"): n for n in self.live()}

    def masters(self) -> list[RedisServer]:
        """The live nodes that serve slots now (as the first live node sees the cluster)."""
        ids = self.node_ids()
        view = self.live()[0].client().cluster("nodes")
        return [ids[v["node_id"]] for v in view.values() if "master" in v["flags"] and v["slots"]
                and "fail" not in v["flags"] and v["node_id"] in ids]

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A live replica of `master`."""
        ids = self.node_ids()
        mine = {i for i, n in ids.items() if n is master}
        view = master.client().cluster("nodes")
        return next(ids[v["node_id"]] for v in view.values()
                    if "slave" in v["flags"] and v["master_id"] in mine and v["node_id"] in ids)

    def owner(self, slot: int) -> RedisServer | None:
        """The master serving `slot`, as the first live master sees it (None: a node that is down)."""
        by_port = {n.port: n for n in self.live()}
        for start, end, master, *_ in self.masters()[0].client().execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return by_port.get(int(master[1]))
        raise LookupError(f"no master serves slot {slot}")

    def move_slot(self, slot: int, target: RedisServer, hold: Callable[[], None] = lambda: None) -> int:
        """Move `slot` to `target` as `redis-cli --cluster reshard` does (IMPORTING/MIGRATING, MIGRATE
        of its keys in batches of 10, SETSLOT NODE everywhere), calling `hold` once half its keys
        are moved: the window in which a command on the slot gets ASK or TRYAGAIN. The keys moved."""
        source = self.owner(slot)
        ids = {n.port: i for i, n in self.node_ids().items()}
        src, dst = source.client(), target.client()
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
        total = int(src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
        moved, held = 0, False
        while True:
            if not held and moved >= total // 2:
                hold()
                held = True
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
        for node in [target, source, *[m for m in self.masters() if m not in (target, source)]]:
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
        return moved

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, decode_responses=True)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SentinelSet:
    """One master, one replica, one sentinel watching them as service `mymaster`."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="delayd-sentinel-"))
        self.master = RedisServer(str(self.dir / "m"), aof=True)
        self.replica = RedisServer(str(self.dir / "r"), aof=True)
        self.sentinel_port = free_port()
        self.sentinel: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/mymaster/0"

    def start(self) -> "SentinelSet":
        self.master.start()
        self.replica.extra = ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        conf = self.dir / "sentinel.conf"
        conf.write_text(f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {self.master.port} 1\n"
                        "sentinel down-after-milliseconds mymaster 2000\n"
                        "sentinel failover-timeout mymaster 10000\n")
        self.sentinel = subprocess.Popen([find_redis_server(), str(conf), "--sentinel"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s = self.sentinel_client()
        wait_for(lambda: self._replica_known(s), 30, interval=0.1, message="sentinel sees the replica")
        return self

    def _replica_known(self, s) -> bool:
        try:
            return len(s.sentinel_slaves("mymaster")) >= 1 and \
                self.replica.client().info("replication").get("master_link_status") == "up"
        except redis.exceptions.ConnectionError:
            return False

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel_port, decode_responses=True)

    def master_port(self) -> int:
        return int(self.sentinel_client().sentinel_get_master_addr_by_name("mymaster")[1])

    def replicated(self) -> bool:
        """True once the replica has applied every write the master had when asked.

        Counting keys is not enough: a key may be there while the rest of its script's writes are not, and
        SENTINEL FAILOVER promotes the replica without waiting for it, so unreplicated writes are lost
        (Redis's asynchronous replication, not delayd's)."""
        offset = self.master.client().info("replication")["master_repl_offset"]
        return wait_for(lambda: self.replica.client().info("replication")["slave_repl_offset"] >= offset, 10,
                        interval=0.05, message="the replica caught up with the master")

    def failover(self) -> int:
        """Force a failover; return the new master's port once the sentinel reports it."""
        old = self.master_port()

        def asked() -> bool:  # NOGOODSLAVE until the sentinel has fresh INFO from the replica
            try:
                return self.sentinel_client().execute_command("SENTINEL", "FAILOVER", "mymaster")
            except redis.exceptions.ResponseError as exc:
                if "NOGOODSLAVE" in str(exc):
                    return False
                raise
        wait_for(asked, 30, interval=0.2, message="sentinel accepts FAILOVER")
        return wait_for(lambda: self.master_port() != old and self.master_port(), 30, interval=0.1,
                        message="failover done")

    def stop(self) -> None:
        if self.sentinel:
            self.sentinel.kill()
            self.sentinel.wait()
        self.replica.kill()
        self.master.kill()

    def __enter__(self) -> "SentinelSet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["Cluster", "SentinelSet"]
