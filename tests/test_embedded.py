"""The embedded Redis: started and supervised by the master, persistent, stopped last."""
from __future__ import annotations

import os
import stat

import psutil

from daemon_helper import Daemon
from redis_server import wait_for

from delayd import Client, embedded
from delayd.config import load


def test_embedded_redis_persists_a_task_across_stop_and_start(tmp_path, monkeypatch):
    state = tmp_path / "s"
    monkeypatch.setenv("DELAYD_STATE_DIR", str(state))
    monkeypatch.delenv("DELAYD_REDIS_URL", raising=False)
    d = Daemon(None, state, buckets=2, queues=1).start()
    redis_proc = d.children("redis")[0]
    client = Client(config=load())  # finds the embedded Redis through the state dir
    client.add("e", 1, call="delayd.examples:noop", delay=1.5)
    client.close()
    d.stop()
    assert d.proc.returncode == 0
    assert "registry_unavailable" not in d.log()  # it left the registry before stopping its Redis
    assert not psutil.pid_exists(redis_proc.pid) or redis_proc.status() == psutil.STATUS_ZOMBIE
    assert (state / "appendonly.aof").exists() or (state / "appendonlydir").exists()

    with Daemon(None, state, buckets=2, queues=1):
        client = Client(config=load())
        assert client.get("e", 1) is not None  # the task added before the stop is still there
        wait_for(lambda: client.get("e", 1).status == "ok", 15, message="task ran after the restart")
        client.close()


def test_the_socket_mode_lets_the_daemons_group_in(tmp_path):
    """The embedded Redis's socket was always srwx------: no other user (an app server in the
    daemon's group) could add tasks. redis_socket_mode sets it; 700 stays the default."""
    for mode, expected in ((None, 0o700), ("770", 0o770)):
        state = tmp_path / f"s{mode}"
        extra = {"DELAYD_REDIS_SOCKET_MODE": mode} if mode else {}
        with Daemon(None, state, buckets=1, queues=1, **extra):
            assert stat.S_IMODE(os.stat(embedded.socket_path(state)).st_mode) == expected
