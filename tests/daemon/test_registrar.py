"""The master's registry thread (delayd.daemon.registrar) and its metrics collector on a real Redis:
beats and scrapes reuse one connection. A client per beat (two per BEAT: the entry and the hosts) left the master's RSS
growing for hours (60-minute soak: 3.2 MiB/h): each new client's reply buffers, freed only by
a full garbage collection, fragment the heap."""
from __future__ import annotations

from redis_server import RedisServer

from delayd.config import load
from delayd.daemon.metrics import Collector
from delayd.daemon.registrar import Registrar
from delayd.store import connection
from delayd.store.registry import live, register

BEATS = 50


def connections_received(r) -> int:
    return int(r.info("stats")["total_connections_received"])


def test_beats_reuse_one_connection(redis_url, r):
    registrar = Registrar(load(env={"DELAYD_REDIS_URL": redis_url}), "host:1", lambda: {"pid": 1, "children": []})
    before = connections_received(r)
    for _ in range(BEATS):
        registrar.call(register, registrar.entry())
        registrar.call(registrar.watch_hosts)
    assert connections_received(r) - before <= 1
    assert [e["id"] for e in live(r, "delayd:")] == ["host:1"]
    clients = int(r.info("clients")["connected_clients"])
    registrar.start()
    registrar.stop()  # its entry removed, its connection closed
    assert live(r, "delayd:") == []
    assert connections_received(r) - before <= 1
    assert int(r.info("clients")["connected_clients"]) == clients - 1


def test_beat_after_a_redis_restart_reconnects(tmp_path):
    with RedisServer(str(tmp_path / "redis")) as server:
        registrar = Registrar(load(env={"DELAYD_REDIS_URL": server.url}), "host:1", lambda: {"pid": 1, "children": []})
        registrar.call(register, registrar.entry())
        server.restart()  # (no AOF: the entry is gone with the data)
        registrar.call(register, registrar.entry())
        registrar.call(register, registrar.entry())  # (the first after the restart may meet the dead socket)
        client = server.client()
        assert [e["id"] for e in live(client, "delayd:")] == ["host:1"]
        assert not registrar.failing
        client.close()
        connection.close(registrar.client)


def test_scrapes_reuse_one_connection(redis_url, r):
    collector = Collector(load(env={"DELAYD_REDIS_URL": redis_url}), lambda: [])
    before = connections_received(r)
    for _ in range(BEATS):
        names = {family.name for family in collector.collect()}
    assert "delayd_redis_up" in names
    assert connections_received(r) - before <= 1
    connection.close(collector.client)
