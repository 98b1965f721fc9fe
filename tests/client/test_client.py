"""The Client: connecting, adding (one and many), reading, listing, counting."""
from __future__ import annotations

import asyncio
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from daemon_helper import delayd
from redis_server import RedisServer, free_port, lose_scripts, wait_for
from store_helper import promote_all

from delayd import (
    AddInterrupted,
    AsyncClient,
    Client,
    DelaydError,
    RedisUnavailable,
    Task,
    TaskError,
)
from delayd import config as config_mod
from delayd.store.keys import LAYOUT, PROTOCOL, meta_key


def now_s(r) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def task_keys(r) -> list[str]:
    return [k for k in r.keys("*") if ":t:" in k]


# -- connecting --------------------------------------------------------------------
@pytest.fixture(scope="module")
def password_server(tmp_path_factory):
    server = RedisServer(str(tmp_path_factory.mktemp("pw")), password="s3cr3t-pw").start()
    yield server
    server.kill()


def test_from_url_with_password(password_server):
    client = Client.from_url(f"redis://:s3cr3t-pw@127.0.0.1:{password_server.port}/0")
    assert client.add("order:cancel", 1, call="shop.tasks:cancel", delay=60) is True
    assert client.get("order:cancel", 1).status == "delayed"
    assert "s3cr3t-pw" not in repr(client)
    client.close()
    assert password_server.client().exists("delayd:meta")


@pytest.mark.parametrize("url", ["redis://:wrong-pw@127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/0"])
def test_wrong_or_missing_password(password_server, url):
    client = Client.from_url(url.format(port=password_server.port))
    with pytest.raises(RedisUnavailable) as info:
        client.add("t", 1, call="a:b")
    message = str(info.value)
    assert f"127.0.0.1:{password_server.port}" in message
    assert "wrong-pw" not in message and "s3cr3t-pw" not in message and "\n" not in message


def test_from_url_unix_socket():
    directory = Path(tempfile.mkdtemp(prefix="dd-"))  # short: socket paths are limited to ~100 bytes
    sock = directory / "redis.sock"
    server = RedisServer(str(directory), extra=["--unixsocket", str(sock), "--unixsocketperm", "700"]).start()
    try:
        client = Client.from_url(f"unix://{sock}")
        assert client.add("t", 1, call="a:b") is True
        assert client.get("t", 1).key == "t:1"
        assert server.client().exists("delayd:meta")
        client.close()
    finally:
        server.kill()
    with pytest.raises(RedisUnavailable, match=str(sock)):
        Client.from_url(f"unix://{sock}").get("t", 1)


def test_unreachable_redis_names_host_and_port_never_the_password():
    port = free_port()
    client = Client.from_url(f"redis://:hunter2-secret@127.0.0.1:{port}/0")
    calls = [lambda: client.add("t", 1, call="a:b"), lambda: client.get("t", 1), lambda: client.list(),
             lambda: client.stats(), lambda: client.delete("t", 1), lambda: client.retry("t", 1),
             lambda: client.add_many([{"topic": "t", "id": 1, "call": "a:b"}])]
    for call in calls:
        with pytest.raises(RedisUnavailable) as info:
            call()
        message = str(info.value)
        assert f"127.0.0.1:{port}" in message and "hunter2" not in message and "\n" not in message
    assert "hunter2" not in repr(client)


def test_a_server_that_is_not_redis_is_redis_unavailable(http):
    """An HTTP server on the URL's port: add() raised redis-py's InvalidResponse (and the CLI printed
    its traceback); now every method and the AsyncClient's raise RedisUnavailable saying so."""
    url = f"redis://127.0.0.1:{http.server_address[1]}/0"
    words = f"the server at 127.0.0.1:{http.server_address[1]} did not answer as Redis: "
    client = Client.from_url(url)
    calls = [lambda: client.add("t", 1, call="a:b"), lambda: client.get("t", 1), lambda: client.stats(),
             lambda: client.add_many([{"topic": "t", "id": 1, "call": "a:b"}]), lambda: client.delete("t", 1)]
    for call in calls:
        with pytest.raises(RedisUnavailable) as info:
            call()
        assert str(info.value).startswith(words) and "\n" not in str(info.value), info.value
    client.close()

    async def asynchronous() -> str:
        async with AsyncClient.from_url(url) as c:
            with pytest.raises(RedisUnavailable) as info:
                await c.add("t", 1, call="a:b")
            return str(info.value)
    assert asyncio.run(asynchronous()).startswith(words)


def test_invalid_task_is_rejected_before_connecting():
    client = Client.from_url(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(TaskError):
        client.add("t", 1, call="not a target")


def test_redis_lost_after_first_use_is_redis_unavailable(tmp_path):
    server = RedisServer(str(tmp_path)).start()
    client = Client.from_url(server.url)
    try:
        client.add("t", 1, call="a:b")
        assert [t.key for t in client.list()] == ["t:1"]
    finally:
        server.kill()
    for call in (client.list, lambda: list(client.iter_tasks()), client.stats, lambda: client.get("t", 1)):
        with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{server.port}"):
            call()


# -- adding ------------------------------------------------------------------------
def test_add_and_get(client, r):
    assert client.add("order:cancel", 42, call="shop.tasks:cancel_order", delay=1800, params={"o": 42},
                      priority=3) is True
    task = client.get("order:cancel", 42)
    assert isinstance(task, Task)
    assert (task.topic, task.id, task.key, task.params, task.priority) == (
        "order:cancel", "42", "order:cancel:42", {"o": 42}, 3)
    assert task.status == "delayed" and task.runs == 0 and task.last_run_at is None
    assert abs(task.created_at - now_s(r)) < 5
    assert task.due_at - task.created_at == pytest.approx(1800, abs=0.002)
    assert client.get("order:cancel", 43) is None


def test_add_nx(client):
    assert client.add("t", 1, call="a:b", params={"v": 1}) is True
    assert client.add("t", 1, call="a:b", params={"v": 2}, nx=True) is False
    assert client.get("t", 1).params == {"v": 1}
    assert client.add("t", 1, call="a:b", params={"v": 3}) is True
    assert client.get("t", 1).params == {"v": 3}


def test_schedule_defaults(client):
    client.add("t", "now", call="a:b")
    task = client.get("t", "now")
    assert task.intervals == [0] and task.persistent is True and task.due_at == task.created_at
    client.add("t", "first", call="a:b", intervals=[5, 30])
    task = client.get("t", "first")
    assert task.due_at - task.created_at == pytest.approx(5, abs=0.002)
    client.add("t", "delayed", call="a:b", intervals="5,30", delay=0.25)
    task = client.get("t", "delayed")
    assert task.due_at - task.created_at == pytest.approx(0.25, abs=0.002) and task.intervals == [5, 30]


@pytest.mark.parametrize("at, expected", [
    (2_000_000_000, 2_000_000_000.0),
    (2_000_000_000.25, 2_000_000_000.25),
    ("2000000000", 2_000_000_000.0),
    ("2033-05-18T03:33:20Z", 2_000_000_000.0),
    ("2033-05-18T03:33:20+00:00", 2_000_000_000.0),
    ("2033-05-18T05:33:20.500+02:00", 2_000_000_000.5),
    (datetime(2033, 5, 18, 3, 33, 20, tzinfo=timezone.utc), 2_000_000_000.0),
    (datetime.fromtimestamp(2_000_000_000).isoformat(), 2_000_000_000.0),  # naive: local time
])
def test_add_at(client, at, expected):
    assert client.add("t", 1, call="a:b", at=at) is True
    assert client.get("t", 1).due_at == expected


@pytest.mark.parametrize("kw", [
    {"at": "tomorrow"}, {"at": -1}, {"at": True}, {"at": 1e12}, {"at": "nan"}, {"at": [1]},
    {"at": 2_000_000_000, "delay": 5}, {"delay": -1}, {"delay": "5"}, {"delay": float("nan")},
    {"delay": float("inf")}, {"colour": "red"},
])
def test_add_bad_when_writes_nothing(client, r, kw):
    with pytest.raises(TaskError):
        client.add("t", 1, call="a:b", **kw)
    assert r.dbsize() == 0


def test_add_in_the_past_is_due_now(client):
    client.add("t", 1, call="a:b", at=datetime.now(timezone.utc) - timedelta(hours=1))
    task = client.get("t", 1)
    assert task.due_at < task.created_at


# -- add_many ----------------------------------------------------------------------
def test_add_many_writes_every_task(client, r):
    items = [{"topic": "bulk", "id": i, "call": "a:b", "params": {"i": i}, "priority": 1 + i % 3}
             for i in range(1234)]
    assert client.add_many(items) == 1234
    assert len(task_keys(r)) == 1234
    buckets = client.store.buckets
    assert sum(r.zcard(f"delayd:{{{b}}}:delayed") for b in range(buckets)) == 1234
    assert client.get("bulk", 1000).params == {"i": 1000}
    assert client.add_many(items[:10], nx=True) == 0
    assert client.add_many(items[:10] + [{"topic": "bulk", "id": "new", "call": "a:b"}], nx=True) == 1
    assert client.add_many([]) == 0


def test_add_many_with_a_task_given_twice_treats_the_second_as_existing(client, r):
    """A member that comes twice in one add.lua call finds its first copy there (nx keeps it;
    otherwise it is replaced), as it would in two calls: a shortcut such as one EXISTS for
    a whole batch must not miss it."""
    twice = [{"topic": "dup", "id": 1, "call": "a:b", "params": {"n": n}} for n in (1, 2)]
    others = [{"topic": "dup", "id": f"other{i}", "call": "a:b"} for i in range(3)]
    assert client.add_many(twice + others, nx=True) == 4
    assert client.get("dup", 1).params == {"n": 1}
    assert client.add_many([{"topic": "dup", "id": 2, "call": "a:b", "params": {"n": n}} for n in (1, 2)]) == 2
    assert client.get("dup", 2).params == {"n": 2}
    record = r.hgetall(client.store.keys_for("dup:2").task("dup:2"))
    assert int(record["claim"]) > int(record["created"])  # replaced: its token went up
    assert sum(int(r.hget(k.counts, "waiting|dup") or 0) for k in client.store.keys) == 5


def test_add_many_validates_without_cyclic_collections_and_leaves_the_collector_as_it_was(client):
    """Validating 20,000 tasks ran ~100 cyclic garbage collections that freed nothing (tens of
    thousands of live tasks scanned again and again: ~2 of the ~5 us per task); the collector
    is held off meanwhile (one collection when it is back on), then left as the application had it."""
    import gc
    starts: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(info["generation"])

    items = [{"topic": "gc", "id": i, "call": "a:b", "intervals": [0, 5]} for i in range(20_000)]
    gc.callbacks.append(record)
    try:
        assert len(client.build_many(items)) == 20_000
    finally:
        gc.callbacks.remove(record)
    assert len(starts) <= 1 and gc.isenabled()  # (one may start as soon as it is back on)
    with pytest.raises(TaskError, match="item 3"):
        client.build_many([*items[:3], {"topic": "gc"}])
    assert gc.isenabled()
    gc.disable()
    try:
        client.build_many(items[:10])
        assert not gc.isenabled()  # switched off by the application: left off
    finally:
        gc.enable()


def test_add_many_validates_everything_before_writing(client, r):
    items = [{"topic": "bulk", "id": i, "call": "a:b"} for i in range(600)]
    items[550] = {"topic": "bulk", "id": 550, "call": "a:b", "intervals": "0,x"}
    with pytest.raises(TaskError, match="item 550"):
        client.add_many(items)
    assert r.dbsize() == 0
    many = [{"topic": "bulk", "id": i, "call": "a:b"} for i in range(5000)]  # more calls than the stream's window
    many[-1]["priority"] = 7
    with pytest.raises(TaskError, match="item 4999"):
        client.add_many(many)
    assert r.dbsize() == 0
    for bad in (["not a dict"], [{"id": 1, "call": "a:b"}], [{"topic": "t", "id": 1, "call": "a:b", "bogus": 1}],
                [{"topic": "t", "id": 1, "call": "a:b", "at": "whenever"}]):
        with pytest.raises(TaskError, match="item 0"):
            client.add_many(bad)
    assert r.dbsize() == 0


def test_a_connection_lost_midway_says_how_many_were_written(client, r):
    """Killed while calls are streamed (several in flight): AddInterrupted counts the tasks of the
    replies read ("at least": a call in flight may have been written too)."""
    items = [{"topic": "lost", "id": i, "call": "a:b"} for i in range(200_000)]
    outcome: dict = {}

    def add_many() -> None:
        try:
            outcome["written"] = client.add_many(items)
        except AddInterrupted as exc:
            outcome["error"] = exc

    adder = threading.Thread(target=add_many)
    adder.start()
    keys = client.store.keys
    wait_for(lambda: sum(r.zcard(k.delayed) for k in keys) > 0 or not adder.is_alive(), 60,
             message="the first calls to be written")
    r.client_kill_filter(_type="normal", skipme=True)
    adder.join()
    error = outcome.get("error")
    assert error is not None, f"add_many finished before the kill: {outcome}"
    in_redis = sum(r.zcard(k.delayed) for k in keys)
    assert error.written <= in_redis < len(items) and error.total == len(items) and not error.exact
    assert "\n" not in str(error) and f"(after at least {error.written} of {len(items)} tasks" in str(error)
    assert client.add("after", 1, call="a:b") is True  # the client reconnects


def test_add_many_accepts_a_generator(client):
    assert client.add_many({"topic": "g", "id": i, "url": "http://h/"} for i in range(5)) == 5


def test_adds_after_redis_lost_its_script_cache(client, r):
    """A single add (held connection) and a streamed add_many of many calls in flight both
    load the script again after SCRIPT FLUSH (FUNCTION FLUSH), and every task is written once."""
    client.add("t", 0, call="a:b")
    lose_scripts(r)
    assert client.add("t", 1, call="a:b") is True
    lose_scripts(r)
    items = [{"topic": "t", "id": i, "call": "a:b"} for i in range(2, 3002)]  # ~15+ calls, more than the window
    assert client.add_many(items) == 3000
    assert len(task_keys(r)) == 3002
    assert client.stats()["counts"]["delayed"] == 3002


def test_add_many_error_reply_leaves_the_client_usable(client, r):
    """Error replies to streamed calls are raised once the replies in flight are read;
    the next add on the same client gets its own reply, not a stale one."""
    client.add("seed", 1, call="a:b")
    items = [{"topic": "t", "id": i, "call": "a:b"} for i in range(2000)]
    r.config_set("maxmemory", 1)  # noeviction: every write is refused with OOM
    try:
        with pytest.raises(RedisUnavailable, match="OOM"):
            client.add_many(items)
    finally:
        r.config_set("maxmemory", 0)
    assert client.add("after", 1, call="a:b", nx=True) is True
    assert client.add("after", 1, call="a:b", nx=True) is False
    assert client.add_many(items[:10], nx=True) == 10


def test_a_full_redis_still_deletes(client, r):
    """Out of memory (maxmemory, noeviction), adds are refused but deletes run: a hard delete is how an
    operator frees memory, on every server (Redis 7's functions refuse a write whole unless flagged)."""
    client.add_many([{"topic": "t", "id": i, "call": "a:b", "delay": 60} for i in range(3)])
    r.config_set("maxmemory", 1)
    try:
        with pytest.raises(RedisUnavailable, match="OOM"):
            client.add("t", "more", call="a:b")
        assert client.delete("t", 0, hard=True) is True
        assert client.delete("t", 1) is True
    finally:
        r.config_set("maxmemory", 0)
    assert client.get("t", 0) is None and client.get("t", 1).status == "deleted"
    assert client.get("t", 2).status == "delayed"


def test_add_many_refused_part_way_says_how_many_were_written(client, r):
    """Redis refuses the batches after its memory filled up (maxmemory, noeviction): the error said
    only that, not how many tasks the batches before it had written."""
    client.add("seed", 1, call="a:b")
    items = [{"topic": "t", "id": i, "call": "a:b", "params": {"pad": "x" * 100}} for i in range(5000)]
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 400_000)  # room for a few batches of 200
    try:
        with pytest.raises(AddInterrupted) as refused:
            client.add_many(items)
    finally:
        r.config_set("maxmemory", 0)
    error = refused.value
    assert 0 < error.written < 5000 and error.written == len(task_keys(r)) - 1, (error.written, len(task_keys(r)))
    assert "refused the command: OOM" in str(error) and error.total == 5000
    assert str(error).endswith(f"(after {error.written} of 5000 tasks were written)")


# -- the bucket count, the layout version and the protocol version ---------------------
@pytest.mark.system
@pytest.mark.parametrize("field, ours", [("layout", LAYOUT), ("protocol", PROTOCOL)])
def test_the_versions_are_recorded_and_a_store_of_another_is_refused(redis_url, r, field, ours):
    key = meta_key("delayd:")
    c = Client.from_url(redis_url)
    c.add("t", 1, call="a:b")
    assert r.hget(key, field) == str(ours)
    # A store written before the field existed (same version) gets it on first use.
    r.hdel(key, field)
    assert Client.from_url(redis_url).get("t", 1) is not None and r.hget(key, field) == str(ours)
    # A store of another version (a newer delayd's) is refused by every reader, and nothing is written.
    for other in ("2", "x" * 100):
        r.hset(key, field, other)
        before = sorted(r.keys("*"))
        with pytest.raises(DelaydError, match=f"this delayd reads {field} {ours}"):
            Client.from_url(redis_url).add("t", 2, call="a:b")
        assert sorted(r.keys("*")) == before
    proc = delayd("stats", "--redis", redis_url, check=1)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"says {field} = 'xxxx" in proc.stderr and "Traceback" not in proc.stderr


def test_bucket_count_is_recorded_and_reused(redis_url, r):
    first = Client.from_url(redis_url, config=config_mod.load(buckets=3))
    first.add_many([{"topic": "t", "id": i, "call": "a:b"} for i in range(50)])
    assert r.hget(meta_key("delayd:"), "buckets") == "3"
    second = Client.from_url(redis_url, config=config_mod.load(buckets=8))
    assert second.store.buckets == 3
    assert all(second.get("t", i) is not None for i in range(50))
    second.add_many([{"topic": "u", "id": i, "call": "a:b"} for i in range(50)])
    tags = {k.split("}")[0] for k in r.keys("delayd:{*")}
    assert tags == {"delayd:{0", "delayd:{1", "delayd:{2"}
    assert len(second.list(limit=1000)) == 100
    # Another prefix is another store, with its own count.
    other = Client.from_url(redis_url, prefix="other:", config=config_mod.load(buckets=5))
    other.add("t", 1, call="a:b")
    assert r.hget("other:meta", "buckets") == "5" and other.store.buckets == 5
    assert first.get("t", 1) is not None and other.get("t", 2) is None


# -- reading -----------------------------------------------------------------------
def finish(client, member, outcome, error=""):
    """Run one task to an outcome through the store, as a queue process would."""
    store = client.store
    keys = store.keys_for(member)
    for b in range(store.buckets):
        promote_all(store, b, client.config.retention_ms, 1000)
    claimed = store.claim(keys.bucket, (5, 3, 2), 1000, 60_000, client.config.retention_ms)
    tokens = {t.member: t.claim for t in claimed.tasks}
    store.finish(keys.bucket, [(member, tokens[member], outcome, 1000, error)], client.config.retention_ms)
    # Put the others back as they were (due now) for the test's counts.
    for other, token in tokens.items():
        if other != member:
            store.finish(keys.bucket, [(other, token, "retry", 0, "")], client.config.retention_ms)


def test_list_filters_and_pages(client):
    for i in range(5):
        client.add("a", i, call="x:y", delay=60)
    for i in range(3):
        client.add("b", i, call="x:y", delay=60)
    client.add("b", "now", call="x:y")
    finish(client, "b:now", "failed", "said fail")
    client.delete("a", 4)

    assert sorted(t.key for t in client.list(topic="a")) == [f"a:{i}" for i in range(5)]
    assert sorted(t.key for t in client.list(topic="a", status="delayed")) == [f"a:{i}" for i in range(4)]
    assert [t.key for t in client.list(status="deleted")] == ["a:4"]
    [failed] = client.list(status="failed")
    assert failed.key == "b:now" and failed.last_error == "said fail" and failed.runs == 1
    assert client.list(topic="c") == [] and client.list(status="running") == []
    assert len(client.list()) == 9

    everything = [t.key for t in client.list(limit=1000)]
    pages = [t.key for offset in range(0, 9, 2) for t in client.list(limit=2, offset=offset)]
    assert pages == everything and len(set(pages)) == 9
    assert client.list(limit=3, offset=8) == client.list()[8:]
    assert len(client.list(limit=3)) == 3


def test_list_shows_corrupt_records_with_the_reason(client, r):
    client.add("t", 1, call="a:b")
    keys = client.store.keys_for("t:1")
    r.hset(keys.task("t:1"), "spec", "{broken")
    client.add("t", 2, call="a:b")
    corrupt, good = client.list()
    assert (corrupt.key, good.key) == ("t:1", "t:2") and good.call == "a:b"
    assert corrupt.status == "delayed" and corrupt.target == "-"
    assert corrupt.last_error.startswith("corrupt record: record does not parse")
    with pytest.raises(TaskError, match="t:1: corrupt record"):
        client.get("t", 1)


def test_stats(client, r):
    assert client.stats()["counts"] == {"delayed": 0, "running": 0, "ok": 0, "failed": 0, "deleted": 0}
    for p in (1, 2, 3):
        for i in range(p):
            client.add(f"p{p}", i, call="a:b", priority=p)
    client.add("later", 1, call="a:b", at=2_000_000_000)
    client.add("later", 2, call="a:b", at=2_100_000_000)
    client.add("gone", 1, call="a:b", delay=60)
    client.delete("gone", 1)
    client.add("ok", 1, call="a:b", priority=1)
    finish(client, "ok:1", "ok")
    store = client.store
    for b in range(store.buckets):
        promote_all(store, b, client.config.retention_ms, 1000)

    stats = client.stats()
    assert stats["counts"] == {"delayed": 8, "running": 0, "ok": 1, "failed": 0, "deleted": 1}
    assert stats["ready"] == {"3": 3, "2": 2, "1": 1}
    assert stats["waiting"] == 2 and stats["buckets"] == store.buckets == len(stats["per_bucket"])
    assert stats["next_due_at"] == 2_000_000_000.0  # the head of the delayed sets
    # oldest_due_at: the earliest due time of what is due but not started (the ready tasks)
    assert stats["time"] - 5 < stats["oldest_due_at"] <= stats["time"]
    assert 0 <= stats["oldest_due_lag"] < 5
    assert abs(stats["time"] - now_s(r)) < 5
    assert sum(b["waiting"] for b in stats["per_bucket"]) == 2
    assert set(stats["topics"]) == {"p1", "p2", "p3", "later", "gone", "ok"}
    assert stats["topics"]["p3"]["ready"] == {"3": 3, "2": 0, "1": 0}
    assert stats["topics"]["later"]["counts"]["delayed"] == 2 and stats["topics"]["later"]["oldest_due_at"] is None
    assert stats["topics"]["ok"]["runs_last_minute"]["ok"] == 1
    assert stats["topics"]["gone"]["counts"]["deleted"] == 1

    client.add("late", 1, call="a:b", at=now_s(r) - 100)
    stats = client.stats()
    assert stats["oldest_due_at"] < stats["time"] and 99 < stats["oldest_due_lag"] < 110
    assert 99 < stats["topics"]["late"]["oldest_due_lag"] < 110
    assert stats["topics"]["p1"]["oldest_due_lag"] < 5


# -- delete and retry --------------------------------------------------------------
def test_delete_soft_and_hard(client, r):
    client.add("t", 1, call="a:b", delay=60)
    assert client.delete("t", 1) is True
    assert client.get("t", 1).status == "deleted"
    assert client.delete("t", 1, hard=True) is True
    assert client.get("t", 1) is None
    assert client.delete("t", 1) is False
    assert task_keys(r) == []


def test_retry(client):
    client.add("t", 1, call="a:b")
    with pytest.raises(TaskError, match="not failed"):
        client.retry("t", 1)
    finish(client, "t:1", "failed")
    assert client.get("t", 1).status == "failed"
    assert client.retry("t", 1) is True
    task = client.get("t", 1)
    assert task.status == "delayed" and task.runs == 1
    assert client.retry("missing", 1) is False


# -- the allowlist -----------------------------------------------------------------
def test_allowlist_rejects_at_add_and_writes_nothing(redis_url, r):
    client = Client.from_url(redis_url, allowed_modules=["shop"])
    for kw in ({"call": "evil.x:f"}, {"call": "shopping:f"}, {"call": "shop.x:f", "callback": "os:system"}):
        with pytest.raises(TaskError, match="allowed"):
            client.add("t", 1, **kw)
        with pytest.raises(TaskError, match="allowed"):
            client.add_many([{"topic": "t", "id": 2, "call": "shop:f"}, {"topic": "t", "id": 1, **kw}])
    assert r.dbsize() == 0
    assert client.add("t", 1, call="shop.tasks.refunds:run", callback="shop:done") is True
    assert client.add("t", 2, url="http://h/") is True  # the allowlist is about code, not URLs


def test_allowlist_from_environment(redis_url, r, monkeypatch):
    monkeypatch.setenv("DELAYD_ALLOWED_MODULES", "shop.tasks, billing")
    client = Client.from_url(redis_url)
    assert client.allowed_modules == ("shop.tasks", "billing")
    with pytest.raises(TaskError, match="DELAYD_ALLOWED_MODULES"):
        client.add("t", 1, call="shop.tasks_evil:f")
    assert r.dbsize() == 0
    assert client.add("t", 1, call="billing.charge:run") is True


def test_no_allowlist_configured_accepts_any_shape_valid_call(client):
    # The daemon enforces its allowlist when it runs the task; the Client checks only when configured.
    assert client.allowed_modules is None
    assert client.add("t", 1, call="anything.at.all:f") is True


def test_client_without_url_uses_environment(redis_url, r):
    client = Client()
    assert client.url == redis_url
    client.add("t", 1, call="a:b")
    assert r.exists("delayd:meta")


@pytest.mark.system
def test_client_warns_once_about_an_unknown_delayd_variable(tmp_path):
    """DELAYD_REDIS_UR (a typo) silently meant the embedded Redis; the daemon warns at start, now Client() too."""
    import os
    import subprocess
    import sys
    code = "from delayd import AsyncClient, Client; Client(); Client(); AsyncClient(); print('made')"
    env = {**os.environ, "DELAYD_REDIS_UR": "redis://127.0.0.1:1/0", "DELAYD_STATE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "made\n", done.stderr
    assert done.stderr.splitlines() == ["delayd: DELAYD_REDIS_UR is not a delayd option and is ignored "
                                        "(did you mean DELAYD_REDIS_URL?)"], done.stderr


def test_a_refusal_reads_the_same_on_every_server():
    """Redis 6.2 wraps a script's OOM in the script error's text; 7+ and Valkey give it its own code,
    which redis-py turns into OutOfMemoryError and leaves out of the message."""
    import redis

    from delayd.client.errors import refusal
    reason = "OOM command not allowed when used memory > 'maxmemory'."
    sha = "9921e81978ef6ab26870c5868cd6e90a39e93f96"
    assert refusal(redis.exceptions.ResponseError(
        f"Error running script (call to f_{sha}): @user_script:449: @user_script: 449: -{reason}")) == reason
    assert refusal(redis.exceptions.OutOfMemoryError(
        f"command not allowed when used memory > 'maxmemory'. script: {sha}, on @user_script:449.")) == reason
    assert refusal(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")) == reason
    assert refusal(redis.exceptions.ResponseError("BUSY Redis is busy running a script.")) == \
        "BUSY Redis is busy running a script."


def test_a_target_allowed_once_is_not_allowed_by_another_allowlist(redis_url, r):
    """Targets found allowed are remembered with the allowlist they were checked against: a client with
    another list (or its list changed) checks them again."""
    loose = Client.from_url(redis_url, allowed_modules=["shop", "evil"])
    assert loose.add("t", 1, call="evil.x:f", callback="shop:done") is True
    strict = Client.from_url(redis_url, allowed_modules=["shop"])
    for kw in ({"call": "evil.x:f"}, {"call": "shop:f", "callback": "evil.x:f"}):
        with pytest.raises(TaskError, match="evil.x:f is not in the allowed modules"):
            strict.add("t", 2, **kw)
    loose.allowed_modules = ("shop",)
    with pytest.raises(TaskError, match="allowed"):
        loose.add("t", 3, call="evil.x:f")
    assert [task.id for task in strict.iter_tasks("t")] == ["1"]
