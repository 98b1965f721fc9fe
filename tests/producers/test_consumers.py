"""The reliable consumers of a push target in other languages (clients/node/examples/consumer.mjs,
clients/php/examples/consumer.php): what a consumer that stopped mid-task left in its processing
list is handled first, then new tasks in order, each acknowledged; and tasks a real daemon pushes
are taken by each. One process per run (system tier, as the house rule for commands has it)."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from node_helper import NODE_DIR, need_node
from php_helper import ROOT, require_php
from redis_server import RedisServer, wait_for

pytestmark = pytest.mark.system


def node_consumer() -> list[str]:
    return [need_node(), str(NODE_DIR / "examples" / "consumer.mjs")]


def php_consumer() -> list[str]:
    require_php()
    return ["php", str(ROOT / "clients" / "php" / "examples" / "consumer.php")]


CONSUMERS = [pytest.param(node_consumer, id="node"), pytest.param(php_consumer, id="php")]


def consume(command: list[str], redis_url: str, queue: str, count: int) -> list[str]:
    """The consumer's output lines, run until it has handled `count` tasks."""
    proc = subprocess.run([*command, redis_url, queue, "--count", str(count)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and not proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout.splitlines()


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_what_a_stopped_consumer_left_is_handled_first(consumer, r, redis_url):
    left = {"key": "t:1", "params": {"left": True}}
    r.rpush("q:processing", json.dumps(left))  # taken by a consumer that died before its acknowledgement
    r.rpush("q", json.dumps({"key": "t:2", "params": {}}), json.dumps({"key": "t:3", "params": {"é": "/"}}))
    assert consume(consumer(), redis_url, "q", 3) == ['t:1 {"left":true}', "t:2 {}", 't:3 {"é":"/"}']
    assert r.llen("q") == 0 and r.llen("q:processing") == 0


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_a_consumer_reads_a_unix_socket_and_a_password_url(consumer):
    """The PHP consumer read only host, port and db: the README's daemon (a unix socket, `unix:///…/redis.sock`)
    gave it a warning, then a fatal error, and a password was never sent. Node's (ioredis) read both."""
    command = consumer()
    directory = Path(tempfile.mkdtemp(prefix="dd-"))  # short: socket paths are limited to ~100 bytes
    sock = directory / "redis.sock"
    server = RedisServer(str(directory), password="pa:ss@word",
                         extra=["--unixsocket", str(sock), "--unixsocketperm", "700"]).start()
    try:
        r = server.client(db=2)
        r.rpush("q", json.dumps({"key": "t:1", "params": {}}), json.dumps({"key": "t:2", "params": {}}))
        r.config_set("requirepass", "")  # (the socket's turn: no password, only the db)
        assert consume(command, f"unix://{sock}?db=2", "q", 1) == ["t:1 {}"]
        r.config_set("requirepass", "pa:ss@word")
        assert consume(command, f"redis://:pa%3Ass%40word@127.0.0.1:{server.port}/2", "q", 1) == ["t:2 {}"]
        assert r.llen("q") == 0 and r.llen("q:processing") == 0
        r.close()
    finally:
        server.kill()


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_a_consumer_waits_for_the_task_the_daemon_pushes(consumer, r, redis_url, daemon, client):
    """Started before anything is due, the consumer blocks (no poll) until the daemon pushes."""
    command = consumer()
    proc = subprocess.Popen([*command, redis_url, "jobs", "--count", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(c.get("cmd") == "blmove" for c in r.client_list()), 15,
                 message="the consumer blocks in BLMOVE")
        client.add_many([{"topic": "mail", "id": i, "push": "jobs", "params": {"n": i}, "delay": 0.2}
                         for i in range(2)])
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and not err, err
    assert sorted(out.splitlines()) == ['mail:0 {"n":0}', 'mail:1 {"n":1}']
    wait_for(lambda: client.get("mail", 1).status == "ok" and client.get("mail", 0).status == "ok",
             message="both pushed tasks ok")
    assert r.llen("jobs") == 0 and r.llen("jobs:processing") == 0
