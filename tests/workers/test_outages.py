"""Redis going away under a running daemon: children stay up and work resumes."""
from __future__ import annotations

import queue
import signal
import threading
from pathlib import Path

import pytest
import redis
from daemon_helper import Daemon, delayd, settled
from redis_server import RedisServer, wait_for

from delayd import Client
from delayd.client.sync_client import RedisUnavailable
from delayd.store import connection
from delayd.workers import process as worker


@pytest.mark.system
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
            wait_for(lambda: settled(client, "o"), 10, message="nothing left to run")
        # The daemon stopped, every run in flight ended: a late duplicate would be here now.
        assert sorted(r.lrange("ran", 0, -1)) == ["o:after:1", "o:before:1", "o:later:1"]
        client.close()


def logged(d: Daemon, proc: str, event: str) -> bool:
    """Has process `proc` (e.g. queue.0) logged `event`?"""
    return any(f"proc={proc} " in line and f"event={event} " in line + " " for line in d.log().splitlines())


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.system
def test_redis_out_of_memory_is_an_outage_not_a_crash(tmp_path):
    """maxmemory with noeviction refuses renew, promote and add: the children wait it out,
    the runs in flight are recorded once memory is back, and nothing is restarted."""
    ran = tmp_path / "ran"
    with RedisServer(str(tmp_path / "redis")) as server:
        client = Client.from_url(server.url)
        r = server.client()
        with Daemon(server.url, tmp_path / "d", buckets=1, queues=1, DELAYD_TASK_TIMEOUT="8", DELAYD_LEASE="12",
                    DELAYD_ALLOWED_MODULES="delayd.examples,handlers_fixture") as d:
            before = {c.pid for c in d.children()}
            client.add_many([{"topic": "m", "id": i, "call": "handlers_fixture:slow_touch",
                              "params": {"path": str(ran), "seconds": 6}} for i in range(3)])
            wait_for(lambda: client.stats()["counts"]["running"] == 3, 10, message="three runs in flight")
            # Due while memory is out: its promote is refused.
            client.add("m", "due", call="handlers_fixture:touch", params={"path": str(ran)}, delay=1)
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", 1)
            try:
                with pytest.raises(RedisUnavailable, match="refused the command: OOM command not allowed"):
                    client.add("m", "refused", call="delayd.examples:noop")
                out = delayd("add", "m", "refused", "--call", "delayd.examples:noop", env=d.env, check=1)
                assert out.stderr.startswith("delayd: error: Redis at ") and "OOM" in out.stderr, out.stderr
                assert len(out.stderr.splitlines()) == 1, out.stderr
                # The queue's lease renewal (every 4 s) and the bucket's promote are refused.
                wait_for(lambda: logged(d, "queue.0", "redis_unavailable")
                         and logged(d, "bucket.0", "redis_unavailable"),
                         20, interval=0.1, message="both children saw the refusal")
                wait_for(lambda: len(lines(ran)) == 3, 20, interval=0.1, message="the handlers returned")
            finally:
                r.config_set("maxmemory", 0)
            wait_for(lambda: client.stats()["counts"]["ok"] == 4, 20, interval=0.1,
                     message="the runs in flight recorded and the due task run once memory is back")
            client.add("m", "after", call="handlers_fixture:touch", params={"path": str(ran)})
            wait_for(lambda: client.get("m", "after").status == "ok", 20, message="a new task ran")
            assert {c.pid for c in d.children()} == before  # no child crashed or was restarted
            assert "child_crashed" not in d.log()
            assert logged(d, "queue.0", "redis_back") and logged(d, "bucket.0", "redis_back")
            assert client.get("m", "refused") is None
            wait_for(lambda: settled(client, "m"), 10, message="nothing left to run")
        assert sorted(lines(ran)) == ["m:0:1", "m:1:1", "m:2:1", "m:after:1", "m:due:1"]  # each ran once
        client.close()


def busy(server: RedisServer) -> threading.Thread:
    """Make Redis answer BUSY to everyone else: a script that loops until SCRIPT KILL."""
    spinner_client = redis.Redis(host="127.0.0.1", port=server.port)  # no socket timeout: it waits
    spinner_client.config_set("lua-time-limit", 10)

    def spin():
        try:
            spinner_client.eval("while true do end", 0)
        except redis.exceptions.ResponseError:
            pass  # killed
        spinner_client.close()
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    probe = server.client()

    def refused() -> bool:
        try:
            probe.get("probe")
        except redis.exceptions.ResponseError as exc:
            return "BUSY" in str(exc)
        return False
    wait_for(refused, 5, message="Redis busy")
    probe.close()
    return spinner


@pytest.mark.system
def test_a_stop_sends_the_outcomes_in_hand_before_exiting(tmp_path):
    """A run finished while Redis refused (BUSY): the stop's deadline comes, and the
    queue process still sends the outcome before it exits, instead of dropping it."""
    with RedisServer(str(tmp_path / "redis")) as server:
        client = Client.from_url(server.url)
        d = Daemon(server.url, tmp_path / "d", buckets=1, queues=1, DELAYD_GRACEFUL_TIMEOUT="9",
                   DELAYD_TASK_TIMEOUT="8", DELAYD_LEASE="60", DELAYD_LOG_LEVEL="DEBUG").start()
        try:
            client.add("s", 1, call="delayd.examples:slow", params={"seconds": 1})
            wait_for(lambda: client.get("s", 1).status == "running", 10, message="running")
            spinner = busy(server)
            wait_for(lambda: logged(d, "queue.0", "run"), 10, interval=0.05, message="the run finished")
            d.signal(signal.SIGTERM)
            wait_for(lambda: logged(d, "queue.0", "stop_timeout"), 15, interval=0.02,
                     message="the queue's stop deadline")
            server.client().script_kill()
            spinner.join(5)
            assert d.wait(20) == 0
        finally:
            d.stop()
        task = client.get("s", 1)
        assert (task.status, task.runs) == ("ok", 1), task  # recorded: it will not run again
        assert not logged(d, "queue.0", "outcomes_unsent")
        client.close()


def test_the_wake_up_listener_outlives_a_message_it_cannot_read(r, redis_url):
    """A message the listener cannot decode (not UTF-8, written by anyone with Redis
    access) must not end wake-ups: the next message still arrives."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    listener = threading.Thread(target=worker.listen, args=(connection.connect(redis_url), "chan", events, "ready"),
                                daemon=True)
    listener.start()
    assert events.get(timeout=10) == ("ready", None)  # subscribed
    r.publish("chan", b"\xff\xfe not UTF-8")
    wait_for(lambda: r.publish("chan", "1") and drain(events, ("ready", "1")), 10, interval=0.2,
             message="a wake-up after the unreadable message")
    assert listener.is_alive()


def drain(events: queue.SimpleQueue, wanted) -> bool:
    """Take everything waiting on `events`; True if `wanted` was among it."""
    seen = False
    while True:
        try:
            seen = events.get_nowait() == wanted or seen
        except queue.Empty:
            return seen
