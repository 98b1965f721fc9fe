"""The held connection of single adds (delayd/store/held.py): its own socket reads, against a real Redis."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
import redis
from redis_server import RedisServer

from delayd import Client, RedisUnavailable
from delayd.store import redis_internals


def client_ids(r) -> set[int]:
    return {c["id"] for c in r.client_list()}


def test_an_add_after_the_server_closed_the_idle_connection_writes_once(client, r):
    client.add("t", 1, call="a:b")
    mine = client_ids(r) - {r.client_id()}
    for cid in mine:
        r.client_kill_filter(_id=cid)
    assert client.add("t", 2, call="a:b") is True
    assert client.add("t", 2, call="a:b", nx=True) is False  # written once
    assert client.get("t", 2).status == "delayed"


def test_an_error_reply_leaves_the_held_connection_in_step(client, r):
    """An error reply (OOM) is raised once; the next add reads its own reply, not a stale one."""
    client.add("seed", 1, call="a:b")
    r.config_set("maxmemory", 1)  # noeviction: every write is refused
    try:
        with pytest.raises(RedisUnavailable, match="OOM"):
            client.add("t", 1, call="a:b")
    finally:
        r.config_set("maxmemory", 0)
    assert client.add("t", 1, call="a:b", nx=True) is True
    assert client.add("t", 1, call="a:b", nx=True) is False


def test_threads_share_a_client(client, r):
    """A thread that finds the held connection busy takes a pooled one: every add is answered."""
    results: list[bool] = []

    def adder(n: int) -> None:
        results.extend(client.add("t", f"{n}-{i}", call="a:b", nx=True) for i in range(200))

    threads = [threading.Thread(target=adder, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 800
    assert client.stats()["counts"]["delayed"] == 800


@pytest.mark.system
def test_an_add_after_a_redis_restart(tmp_path):
    server = RedisServer(str(tmp_path)).start()
    try:
        client = Client.from_url(server.url)
        client.add("t", 1, call="a:b")
        server.restart()
        assert client.add("t", 2, call="a:b") is True
        assert client.get("t", 2) is not None
    finally:
        server.kill()
    with pytest.raises(RedisUnavailable, match=str(server.port)):
        client.add("t", 3, call="a:b")


def test_a_forked_child_adds_on_a_connection_of_its_own(client, r):
    client.add("t", 0, call="a:b")
    parent_port = client.transport.held.sock.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 if its add was answered on a socket of its own
        try:
            added = client.add("t", "child", call="a:b", nx=True)
            os._exit(0 if added is True and client.transport.held.sock.getsockname()[1] != parent_port else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.add("t", 1, call="a:b", nx=True) is True  # the parent's connection is still in step
    assert client.get("t", "child") is not None


def test_a_stopped_redis_times_out_as_the_socket_timeout_says(tmp_path):
    """The held socket is blocking with the kernel timing it out (on Linux): a Redis that
    stops answering still ends the add with RedisUnavailable, not a hang."""
    server = RedisServer(str(tmp_path)).start()
    outcome: dict = {}
    try:
        client = Client.from_url(server.url + "?socket_timeout=0.3")
        client.add("t", 1, call="a:b")
        server.proc.send_signal(signal.SIGSTOP)

        def add() -> None:
            try:
                outcome["added"] = client.add("t", 2, call="a:b")
            except RedisUnavailable as exc:
                outcome["error"] = str(exc)

        adder = threading.Thread(target=add, daemon=True)
        adder.start()
        adder.join(60)
        assert "error" in outcome, outcome or "the add did not return within 60 s"
        assert "Timeout" in outcome["error"] and str(server.port) in outcome["error"]
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.kill()


# -- redis-py internals (delayd/store/redis_internals.py): a release without them costs speed, not add ------
def adds_and_reads(client: Client) -> None:
    assert client.add("t", 1, call="a:b") is True
    assert client.add("t", 1, call="a:b", nx=True) is False
    assert client.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(2, 12)]) == 10
    assert client.get("t", 1).status == "delayed" and client.stats()["counts"]["delayed"] == 11


def test_without_redis_py_internals_adds_take_the_public_path(redis_url, r, monkeypatch):
    monkeypatch.setattr(redis_internals, "parse_error", None)
    client = Client.from_url(redis_url)
    try:
        assert client.transport.held is None
        adds_and_reads(client)
        r.config_set("maxmemory", 1)  # an error reply, mapped to its exception by redis-py
        try:
            with pytest.raises(RedisUnavailable, match="OOM"):
                client.add("t", 99, call="a:b")
        finally:
            r.config_set("maxmemory", 0)
    finally:
        client.close()


@pytest.mark.system
def test_adds_work_when_redis_py_renamed_its_private_parsers_module(redis_url, client):
    """Importing delayd does not need redis._parsers (blocked here as a renamed module would be)."""
    code = ("import sys, redis; sys.modules['redis._parsers'] = None\n"
            "from delayd import Client; c = Client.from_url(sys.argv[1]); assert c.transport.held is None\n"
            "print(c.add('t', 1, call='a:b'), c.add_many([{'topic': 't', 'id': 2, 'call': 'a:b'}]))")
    done = subprocess.run([sys.executable, "-c", code, redis_url], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "True 1\n", "")
    assert client.get("t", 1) is not None and client.get("t", 2) is not None


@pytest.mark.parametrize("name", ["_sock", "retry", "encoder"])
def test_a_connection_without_an_internal_is_not_held(name):
    class Renamed(redis.Connection):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            delattr(self, name)

    assert redis_internals.fit(redis.ConnectionPool())
    assert not redis_internals.fit(redis.ConnectionPool(connection_class=Renamed))
