"""The master's registry thread (delayd.daemon.registrar) and its metrics collector on a real Redis:
beats and scrapes reuse one connection. A client per beat (two per BEAT: the entry and the hosts) left the master's RSS
growing for hours (60-minute soak: 3.2 MiB/h): each new client's reply buffers, freed only by
a full garbage collection, fragment the heap."""
from __future__ import annotations

import logging
from typing import Callable

import pytest
from redis_server import RedisServer, free_port

from delayd import Client
from delayd.config import Config, load
from delayd.daemon.metrics import Collector
from delayd.daemon.registrar import Registrar
from delayd.store.registry import live, register

BEATS = 50
ENTRY = lambda: {"pid": 1, "children": []}  # noqa: E731


def configured(redis_url: str) -> Callable[[], Config]:
    """The master's config as the registrar and the collector ask for it (it follows reloads)."""
    config = load(env={"DELAYD_REDIS_URL": redis_url})
    return lambda: config


def connections_received(r) -> int:
    return int(r.info("stats")["total_connections_received"])


def test_beats_reuse_one_connection(redis_url, r):
    registrar = Registrar(configured(redis_url), "host:1", ENTRY)
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
        registrar = Registrar(configured(server.url), "host:1", ENTRY)
        registrar.call(register, registrar.entry())
        server.restart()  # (no AOF: the entry is gone with the data)
        registrar.call(register, registrar.entry())
        registrar.call(register, registrar.entry())  # (the first after the restart may meet the dead socket)
        client = server.client()
        assert [e["id"] for e in live(client, "delayd:")] == ["host:1"]
        assert not registrar.failing
        client.close()
        registrar.redis.close()


def test_scrapes_reuse_one_connection(redis_url, r):
    collector = Collector(configured(redis_url), lambda: [])
    before = connections_received(r)
    for _ in range(BEATS):
        names = {family.name for family in collector.collect()}
    assert "delayd_redis_up" in names
    assert connections_received(r) - before <= 1
    collector.redis.close()


class Events(logging.Handler):
    """The events the registry thread logs (delayd's logger does not propagate to pytest's caplog)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __call__(self, name: str) -> list[dict]:
        """The fields of each `name` event."""
        return [record.fields for record in self.records if record.getMessage() == name]


@pytest.fixture
def events():
    handler, logger = Events(), logging.getLogger("delayd.registry")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_register_and_watch_hosts_each_report_their_own_outage(redis_server, redis_url, r, events):
    """One `failing` flag served both calls: with the register script refused and the hosts read fine,
    the log said registry_unavailable and registry_back in turn, every beat."""
    r.acl_setuser("beats", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                  commands=["+@all", "-@scripting"])
    registrar = Registrar(configured(f"redis://beats:pw@127.0.0.1:{redis_server.port}/0"), "host:1", ENTRY)
    try:
        for _ in range(3):
            registrar.call(register, registrar.entry())
            registrar.call(registrar.watch_hosts)
        assert [e["call"] for e in events("registry_unavailable")] == ["register"]
        assert events("registry_back") == [] and registrar.failing == {"register"}
        r.acl_setuser("beats", commands=["+@all"])
        registrar.call(register, registrar.entry())
        assert [e["call"] for e in events("registry_back")] == ["register"] and not registrar.failing
        assert [e["id"] for e in live(r, "delayd:")] == ["host:1"]
    finally:
        registrar.redis.close()
        r.acl_deluser("beats")


def test_a_cluster_down_at_start_ends_neither_the_registry_thread_nor_a_scrape():
    """RedisCluster(...) connects in its constructor, which ran outside the `try`: the exception
    would have ended the registry thread (and failed the scrape)."""
    url = f"redis+cluster://127.0.0.1:{free_port()}/"
    registrar = Registrar(configured(url), "host:1", ENTRY)
    registrar.call(register, registrar.entry())
    assert registrar.failing == {"register"}
    registrar.start()
    assert registrar.is_alive()
    registrar.stop()  # (its unregister refused too, and logged)
    collector = Collector(configured(url), lambda: [])
    up = next(f for f in collector.collect() if f.name == "delayd_redis_up")
    assert up.samples[0].value == 0


def test_the_registry_and_the_metrics_follow_a_reload_to_another_redis(redis_url, r, tmp_path):
    """They kept the start's config: after a reload that changed redis_url (or its password), the
    daemon's entry and /metrics stayed on the old Redis (or failed on the old password)."""
    with RedisServer(str(tmp_path / "other"), password="new-pw") as other:
        configs = [load(env={"DELAYD_REDIS_URL": redis_url}), load(env={"DELAYD_REDIS_URL": other.url})]
        registrar = Registrar(lambda: configs[0], "host:1", ENTRY)
        collector = Collector(lambda: configs[0], lambda: [])
        client = Client.from_url(other.url)
        try:
            client.add("t", 1, call="a:b", delay=60)
            registrar.call(register, registrar.entry())
            assert tasks(collector) == 0
            configs.pop(0)  # the reload
            registrar.call(register, registrar.entry())
            assert [e["id"] for e in live(other.client(), "delayd:")] == ["host:1"]
            assert tasks(collector) == 1 and not registrar.failing
        finally:
            client.close()
            registrar.redis.close()
            collector.redis.close()


def tasks(collector: Collector) -> float:
    """All tasks the collector's scrape counted (delayd_tasks, every topic and status)."""
    family = next(f for f in collector.collect() if f.name == "delayd_tasks")
    return sum(sample.value for sample in family.samples)
