"""A server that changes kind under a running daemon: Redis 7 (delayd's scripts as FCALL of its function
library) replaced on the same port by Redis 6.2, which has no functions. Every process chose FCALL once,
at its first call, and kept it: after the outage each call answered `unknown command 'FCALL'`, and
buckets and queues stalled with no log line after redis_unavailable. They choose again (delayd.store.dialect)."""
from __future__ import annotations

import asyncio

import pytest
from daemon_helper import Daemon
from redis_server import RedisServer, free_port, servers_without_and_with_functions, wait_for

from delayd import AsyncClient, Client

pytestmark = pytest.mark.system


def test_a_daemon_finds_the_kind_of_a_server_that_changed_under_it(tmp_path):
    older, newer = servers_without_and_with_functions()
    port = free_port()
    seven = RedisServer(str(tmp_path / "seven"), port=port, binary=newer).start()
    six = RedisServer(str(tmp_path / "six"), port=port, binary=older)
    with Daemon(seven.url, tmp_path / "d", buckets=4, queues=1) as d:  # (6.2 starts empty: the client's default)
        try:
            params = {"list": "ran", "redis": seven.url}
            client = Client.from_url(seven.url)
            client.add("o", 1, call="delayd.examples:record", params=params)
            r = seven.client()
            wait_for(lambda: r.lrange("ran", 0, -1) == ["o:1:1"], 20, message="a task ran on Redis 7")
            assert "cmdstat_fcall" in r.info("commandstats")  # (functions: the daemon's dialect there)
            r.close()
            client.close()
            seven.stop()
            wait_for(lambda: "redis_unavailable" in d.log(), 30, interval=0.1, message="the outage logged")
            six.start()  # Redis 6.2 on the same port: no FCALL
            client = Client.from_url(six.url)
            client.add("o", 2, call="delayd.examples:record", params=params)
            client.add("o", 3, call="delayd.examples:record", params=params, delay=1.0)
            r = six.client()
            wait_for(lambda: sorted(r.lrange("ran", 0, -1)) == ["o:2:1", "o:3:1"], 30,
                     message="tasks ran on Redis 6.2")
            wait_for(lambda: d.log().count("redis_back") == d.log().count("redis_unavailable"), 10,
                     message="every process that logged the outage logged its end")
            r.close()
            client.close()
        finally:
            seven.stop()
            six.stop()


def test_clients_find_the_kind_of_a_server_that_changed_under_them(tmp_path):
    """A Client's single call (its held connection) and an AsyncClient's answered `unknown command 'FCALL'`
    after Redis 7 was replaced by 6.2; now they choose EVALSHA and send the call again, once. (A
    stream of calls, add_many's, is refused once, nothing of it written: its calls are made as they
    are sent; the next one goes by EVALSHA.)"""
    older, newer = servers_without_and_with_functions()
    port = free_port()
    seven = RedisServer(str(tmp_path / "seven"), port=port, binary=newer).start()
    six = RedisServer(str(tmp_path / "six"), port=port, binary=older)
    client = Client.from_url(seven.url)
    try:
        async def swapped() -> list:
            async with AsyncClient.from_url(seven.url) as c:
                done = [await c.add("a", 1, call="a:b", delay=60)]
                assert client.add("s", 1, call="a:b", delay=60) is True
                await c.redis.connection_pool.disconnect()  # (its pool's first request after a restart fails)
                seven.stop()
                six.start()  # on the same port: no FCALL
                done.append(client.add("s", 2, call="a:b", delay=60))
                done.append(await c.delete("s", 2))
                return done
        assert asyncio.run(swapped()) == [True, True, True]
        assert client.get("s", 2).status == "deleted"
    finally:
        client.close()
        seven.stop()
        six.stop()
