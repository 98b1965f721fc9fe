"""Redis going away under a running daemon: children stay up and work resumes."""
from __future__ import annotations

from daemon_helper import Daemon
from redis_server import RedisServer, wait_for

from delayd import Client


def test_daemon_survives_a_redis_restart_with_aof(tmp_path):
    with RedisServer(str(tmp_path / "redis"), aof=True) as server:
        client = Client.from_url(server.url)
        r = server.client()
        with Daemon(server.url, tmp_path / "d", buckets=2, queues=1) as d:
            before = {c.pid for c in d.children()}
            params = {"list": "ran", "redis": server.url}
            client.add("o", "before", call="delayd.examples:record", params=params)
            client.add("o", "later", call="delayd.examples:record", params=params, delay=2.0)
            wait_for(lambda: r.lrange("ran", 0, -1) == ["o:before:1"], 10, message="first task ran")

            server.stop()   # SHUTDOWN with AOF on: the data stays on disk
            wait_for(lambda: "redis_unavailable" in d.log(), 30, interval=0.1, message="outage logged")
            server.start()  # same port, same directory
            r = server.client()
            client.add("o", "after", call="delayd.examples:record", params=params)
            wait_for(lambda: sorted(r.lrange("ran", 0, -1)) == ["o:after:1", "o:before:1", "o:later:1"], 20,
                     message="tasks added before and after the restart ran")
            assert {c.pid for c in d.children()} == before  # no child crashed or was restarted
            assert "redis_back" in d.log()
            assert d.log().count("redis_unavailable") <= 6  # about once per process, not once per retry
        client.close()
