"""The embedded Redis: started and supervised by the master, persistent, stopped last."""
from __future__ import annotations

import json
import os
import stat

import psutil
import pytest
from daemon_helper import Daemon, delayd
from redis_server import wait_for

from delayd import Client
from delayd.config import load
from delayd.store.connection import embedded_socket

pytestmark = pytest.mark.system


def test_embedded_redis_persists_a_task_across_stop_and_start(tmp_path, monkeypatch):
    state = tmp_path / "s"
    monkeypatch.setenv("DELAYD_STATE_DIR", str(state))
    monkeypatch.delenv("DELAYD_REDIS_URL", raising=False)
    d = Daemon(None, state, buckets=2, queues=1).start()
    redis_proc = d.children("redis")[0]
    client = Client(config=load())  # finds the embedded Redis through the state dir
    client.add("e", 1, call="delayd.examples:noop", delay=1.5)
    # A task with ~200 bytes of params keeps a compact record (Redis's default turns it into a hash table)
    client.add("e", 2, call="delayd.examples:noop", delay=3600, params={"note": "x" * 200})
    record = client.store.keys_for("e:2").task("e:2")
    assert client.redis.object("encoding", record) in ("ziplist", "listpack")
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


def test_status_shows_every_title_whole(tmp_path):
    """`delayd status` cut TITLE at 28 characters: the embedded Redis (its title names its socket) read
    "delayd: redis unixsocket:/tm". The column is as wide as the longest title."""
    with Daemon(None, tmp_path / "state", buckets=1, queues=1) as d:
        processes = json.loads(delayd("status", "--json", env=d.env).stdout)["processes"]
        lines = delayd("status", env=d.env).stdout.splitlines()
        redis_title = next(p["title"] for p in processes if p["title"].startswith("delayd: redis"))
        assert str(embedded_socket(tmp_path / "state")) in redis_title
        header = lines[1]
        for p in processes:
            line = next(line for line in lines if line.lstrip().startswith(f"{p['pid']} "))
            assert f" {p['title']} " in line, (line, p["title"])
            assert line.index(" " + p["title"]) + 1 == header.index("TITLE")  # the column stays aligned
            assert line.index(p["state"], len(p["title"])) == header.index("STATE"), (line, header)


def test_without_the_daemon_a_command_says_the_embedded_redis_needs_it(tmp_path):
    """With no daemon running, `add` on the embedded Redis failed with a bare socket error."""
    env = {**os.environ, "DELAYD_STATE_DIR": str(tmp_path / "s")}
    env.pop("DELAYD_REDIS_URL", None)
    out = delayd("add", "t", "1", "--call", "delayd.examples:noop", env=env, check=1)
    assert len(out.stderr.splitlines()) == 1, out.stderr
    where = tmp_path / "s"
    assert out.stderr.startswith(f"delayd: error: cannot reach the embedded Redis of state directory {where}: ")
    assert out.stderr.rstrip().endswith("start the daemon (delayd start) or set DELAYD_REDIS_URL")
    out = delayd("add", "t", "1", "--call", "delayd.examples:noop", "--redis", "unix:///nonexistent.sock", env=env,
                 check=1)
    assert "cannot reach Redis at /nonexistent.sock" in out.stderr
    assert "delayd start" not in out.stderr  # a Redis of one's own: no word about the daemon


def test_the_socket_mode_lets_the_daemons_group_in(tmp_path):
    """The embedded Redis's socket was always srwx------: no other user (an app server in the
    daemon's group) could add tasks. redis_socket_mode sets it; 700 stays the default."""
    for mode, expected in ((None, 0o700), ("770", 0o770)):
        state = tmp_path / f"s{mode}"
        extra = {"DELAYD_REDIS_SOCKET_MODE": mode} if mode else {}
        with Daemon(None, state, buckets=1, queues=1, **extra):
            assert stat.S_IMODE(os.stat(embedded_socket(state)).st_mode) == expected
