"""The Node producer (clients/node, delayd-client): the same records, validation and errors as
the Python Client for the same input, the package's own Lua scripts, and the store's metadata
read from Redis. Node runs as a real process (tests/node_helper.py) against the suite's Redis."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from node_helper import NODE_DIR, NodeError, NodeProducer, need_node
from store_helper import claim_due

from delayd import Client, TaskError
from delayd.store.keys import bucket_of

pytestmark = pytest.mark.system  # (node processes)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# add() arguments, each stored alike by both clients (times aside).
SAME_RECORD = [
    {"topic": "order:cancel", "id": 42, "call": "shop.tasks:cancel_order", "delay": 1800},
    {"topic": "t", "id": "a-1", "push": "jobs", "params": {"n": 1, "x": 2.5, "tiny": 1e-05, "big": 1.5e16,
                                                          "s": "é ✓ \U0001F600 \"q\" \\ \n", "l": [True, None, {}]}},
    {"topic": "notify", "id": 5, "url": "https://merchant.example/notify?a=1", "method": "post", "body": "json",
     "params": {"order": 5}, "intervals": "0,30,60.5", "persistent": False, "timeout": 2.5, "priority": 3,
     "callback": "shop.tasks:done"},
    {"topic": "t", "id": 2, "url": "http://[::1]:8080/x", "intervals": [0, 30, 60], "delay": 0.0015},
    {"topic": "t", "id": 3, "push": "q", "intervals": 10, "priority": 1},
    {"topic": "t", "id": 4, "push": "q", "every": 15},
    {"topic": "t", "id": 5, "push": "q", "every": 2.5, "delay": 0},
    {"topic": "t", "id": 6, "call": "a.b:c", "retries": 5},
    {"topic": "t", "id": 7, "call": "a.b:c", "retries": 0, "method": "POST"},
    {"topic": "t", "id": 8, "call": "a.b:c", "cron": "0 3 * * mon-fri", "tz": "Europe/Berlin", "delay": 60},
    {"topic": "t", "id": 9, "call": "a.b:c", "cron": "*/5  *  * * *", "at": 2000000000},
    {"topic": "t", "id": 10, "call": "a.b:c", "at": 1999999999.5},
    {"topic": "t", "id": 11, "call": "a.b:c", "at": "2033-05-18T03:33:20Z"},
    {"topic": "t", "id": 12, "call": "a.b:c", "at": "2033-05-18T05:33:20.250+02:00"},
    {"topic": "t", "id": 13, "call": "a.b:c", "at": "1999999999"},
    {"topic": "ünïcode", "id": "ключ", "push": "список"},
    {"topic": "notify", "id": 6, "url": "https://merchant.example/n", "signing_key": "acme.eu:2_a-b"},
    {"topic": "notify", "id": 7, "url": "https://merchant.example/n", "traceparent": TRACEPARENT,
     "tracestate": " congo=t61rcWkgMzE,rojo=00f067aa0ba902b7 "},
    {"topic": "notify", "id": 8, "call": "a.b:c", "traceparent": TRACEPARENT, "tracestate": "k=\u00e9"},
]

# add() arguments that both clients refuse, with the same message.
REFUSED = [
    {"topic": "t", "id": 1},
    {"topic": "t", "id": 1, "call": "a:b", "push": "q"},
    {"topic": "t", "id": 1, "call": "a:b", "url": "https://x.example/", "push": "q"},
    {"id": 1, "call": "a:b"},
    {"topic": "t", "call": "a:b"},
    {"topic": "", "id": 1, "call": "a:b"},
    {"topic": "a b", "id": 1, "call": "a:b"},
    {"topic": "t" * 513, "id": 1, "call": "a:b"},
    {"topic": "t", "id": "x:y", "call": "a:b"},
    {"topic": "t", "id": 1.5, "call": "a:b"},
    {"topic": "t", "id": True, "call": "a:b"},
    {"topic": "t", "id": 1, "call": "not a target"},
    {"topic": "t", "id": 1, "call": "a:b", "callback": "nope"},
    {"topic": "t", "id": 1, "url": "ftp://x.example/"},
    {"topic": "t", "id": 1, "url": "https:///path"},
    {"topic": "t", "id": 1, "url": "https://x.example/a b"},
    {"topic": "t", "id": 1, "url": "https://x.example/a\x85\xa0\u2028b"},  # (shown as Python's repr escapes them)
    {"topic": "t", "id": 1, "call": "a:b\xad"},
    {"topic": "t", "id": 1, "url": "https://[::1/"},
    {"topic": "t", "id": 1, "push": "a list"},
    {"topic": "t", "id": 1, "url": "https://x.example/", "method": "PUT"},
    {"topic": "t", "id": 1, "url": "https://x.example/", "body": "xml"},
    {"topic": "t", "id": 1, "call": "a:b", "params": [1, 2]},
    {"topic": "t", "id": 1, "call": "a:b", "params": "x"},
    {"topic": "t", "id": 1, "call": "a:b", "params": {"s": "x" * 70000}},
    {"topic": "t", "id": 1, "call": "a:b", "persistent": "yes"},
    {"topic": "t", "id": 1, "call": "a:b", "priority": 4},
    {"topic": "t", "id": 1, "call": "a:b", "priority": "1"},
    {"topic": "t", "id": 1, "call": "a:b", "timeout": 0},
    {"topic": "t", "id": 1, "call": "a:b", "timeout": 86401},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": []},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": "0,x"},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": [0, -1]},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": [0, 400000000]},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": True},
    {"topic": "t", "id": 1, "call": "a:b", "intervals": "0,inf"},  # (a number as JSON writes it: fields.DECIMAL)
    {"topic": "t", "id": 1, "call": "a:b", "intervals": "1_0"},
    {"topic": "t", "id": 1, "call": "a:b", "at": "Infinity"},
    {"topic": "t", "id": 1, "call": "a:b", "every": 0.5},
    {"topic": "t", "id": 1, "call": "a:b", "every": "10"},
    {"topic": "t", "id": 1, "call": "a:b", "every": 10, "intervals": [1]},
    {"topic": "t", "id": 1, "call": "a:b", "every": 10, "cron": "* * * * *"},
    {"topic": "t", "id": 1, "call": "a:b", "tz": "Europe/Berlin"},
    {"topic": "t", "id": 1, "call": "a:b", "cron": "* * * *", "delay": 0},
    {"topic": "t", "id": 1, "call": "a:b", "cron": 5, "delay": 0},
    {"topic": "t", "id": 1, "call": "a:b", "cron": "* * * * *", "tz": "Mars/Olympus", "delay": 0},
    {"topic": "t", "id": 1, "call": "a:b", "cron": "* * * * *", "tz": "localtime", "delay": 0},
    {"topic": "t", "id": 1, "call": "a:b", "retries": -1},
    {"topic": "t", "id": 1, "call": "a:b", "retries": 1.5},
    {"topic": "t", "id": 1, "call": "a:b", "retries": 3, "intervals": [1]},
    {"topic": "t", "id": 1, "call": "a:b", "retries": 3, "every": 10},
    {"topic": "t", "id": 1, "call": "a:b", "retries": 3, "persistent": False},
    {"topic": "t", "id": 1, "call": "a:b", "delay": -1},
    {"topic": "t", "id": 1, "call": "a:b", "delay": "10"},
    {"topic": "t", "id": 1, "call": "a:b", "delay": 1, "at": 2000000000},
    {"topic": "t", "id": 1, "call": "a:b", "at": -5},
    {"topic": "t", "id": 1, "call": "a:b", "at": "tomorrow"},
    {"topic": "t", "id": 1, "call": "a:b", "at": True},
    {"topic": "t", "id": 1, "call": "a:b", "colour": "red"},
    {"topic": "t", "id": 1, "url": "https://x.example/", "signing_key": "acme corp"},
    {"topic": "t", "id": 1, "url": "https://x.example/", "signing_key": 42},
    {"topic": "t", "id": 1, "url": "https://x.example/", "signing_key": "k" * 129},
    {"topic": "t", "id": 1, "push": "q", "signing_key": "acme"},
    {"topic": "t", "id": 1, "call": "a:b", "traceparent": TRACEPARENT.upper()},
    {"topic": "t", "id": 1, "call": "a:b", "traceparent": 42},
    {"topic": "t", "id": 1, "call": "a:b", "traceparent": "00-" + "0" * 32 + TRACEPARENT[35:]},
]


# Cron expressions: those cronsim accepts must pass, the others be refused with its reason.
CRONS = ["* * * * *", "0 3 * * mon-fri", "*/5 * * * *", "0 0 L * *", "0 0 LW * *", "0 9 * * 5L", "0 9 * * 1#2",
         "0 0 1,15 * *", "5-10/2 * * * *", "0 0 * jan,jul *", "0 0 * * 7", "0 0 31 1,3 *", "0 0 30 2 1", "7/15 * * * *",
         "0 0 L/2 * *", "0 0 29 2 *", "0 0 */3 * SUN-sat",
         "61 * * * *", "* 24 * * *", "0 0 0 * *", "0 0 32 * *", "0 0 * 13 *", "0 0 * * 8", "*/0 * * * *",
         "1,,2 * * * *",
         "10-5 * * * *", "0 0 31 4 *", "0 0 30 2 *", "0 0 * * 1#6", "0 0 * * L5", "0 0 * * xL", "0 0 * foo *",
         "a b c d e", "0 0 L5 * *", "0 0 * * mon#0", "- * * * *", "0 0 * * 1-", "0 0 31 2,4 *"]


ZONES = ["Europe/Berlin", "UTC", "US/Pacific", "Etc/GMT+5", "EST5EDT", "Asia/Calcutta", "GMT", "Zulu", "Europe/Kyiv",
         "America/Argentina/Buenos_Aires", "europe/berlin", "posixrules", "right/UTC", "Etc/Unknown", "localtime",
         "Factory", "", "Europe/Berlin ", "../etc/passwd"]


def records(r, prefix: str) -> dict[str, dict[str, str]]:
    """Every task record under `prefix`, by key without the prefix."""
    return {key[len(prefix):]: r.hgetall(key) for key in r.scan_iter(f"{prefix}{{*}}:t:*")}


def python_error(item: dict) -> str:
    fields = dict(item)
    with pytest.raises(TaskError) as caught:
        Client.from_url(fields.pop("url_", None) or "redis://127.0.0.1:1/0").build(**fields)
    return str(caught.value)


def test_the_same_input_stores_the_same_record_as_python(redis_url, r):
    producer = NodeProducer(redis_url, "js:")
    try:
        python = Client.from_url(redis_url, "py:")
        for item in SAME_RECORD:
            fields = dict(item)
            assert python.add(fields.pop("topic"), fields.pop("id"), **fields)
            assert producer.add(item) is True
        py, js = records(r, "py:"), records(r, "js:")
        assert sorted(py) == sorted(js) and len(py) == len(SAME_RECORD)
        for key, record in py.items():
            other = js[key]
            assert {k: v for k, v in other.items() if k not in ("created", "due")} == \
                   {k: v for k, v in record.items() if k not in ("created", "due")}, key
            # A delay counts from the add on Redis's clock; an absolute time is the same instant.
            assert int(other["due"]) - int(other["created"]) == int(record["due"]) - int(record["created"]) \
                or other["due"] == record["due"], key
        for item in SAME_RECORD:
            mine = producer.ask("get", item["topic"], item["id"])
            theirs = python.get(item["topic"], item["id"]).to_dict()
            for name in ("created_at", "due_at"):
                mine.pop(name), theirs.pop(name)
            assert mine == theirs
        python.close()
    finally:
        producer.close()


@pytest.fixture(scope="module")
def one_node(redis_server):
    """One node process for the module's refusals (validation happens before Redis is asked anything)."""
    producer = NodeProducer(redis_server.url)
    yield producer
    producer.close()


@pytest.mark.parametrize("item", REFUSED, ids=[json.dumps(item)[:60] for item in REFUSED])
def test_bad_input_is_refused_with_the_python_message_and_nothing_is_written(one_node, r, item):
    with pytest.raises(NodeError) as caught:
        one_node.add(item)
    assert (caught.value.name, str(caught.value)) == ("TaskError", python_error(item))
    assert r.keys("*") == []  # not even the meta hash: nothing is read or written before validation


def test_cron_expressions_and_zones_are_accepted_and_refused_as_python_does(node, r):
    mismatches = []
    for expr, tz in [*((expr, "UTC") for expr in CRONS), *(("0 3 * * *", zone) for zone in ZONES)]:
        item = {"topic": "t", "id": 1, "call": "a.b:c", "cron": expr, "tz": tz, "delay": 0}
        try:
            python = python_error(item)
        except pytest.fail.Exception:
            python = None  # accepted
        try:
            mine = node.add(item) and None
        except NodeError as exc:
            mine = str(exc)
        if mine != python:
            mismatches.append((expr, python, mine))
    assert mismatches == []


def test_add_many_validates_every_item_first_and_names_the_bad_one(node, r, client):
    items = [{"topic": "m", "id": i, "push": "q"} for i in range(1000)]
    with pytest.raises(NodeError, match=r"^item 1000: give exactly one of call, url or push$"):
        node.add_many([*items, {"topic": "m", "id": "x"}])
    assert r.keys("*") == []
    assert node.add_many(items) == 1000
    assert client.count("m") == 1000
    assert node.add_many(items[:10] + [{"topic": "m", "id": "new", "push": "q"}], nx=True) == 1
    with pytest.raises(NodeError, match=r"^item 0: unknown task field\(s\): nx$"):  # nx is addMany's, as in Python
        node.add_many([{"topic": "m", "id": 1, "push": "q", "nx": True}])
    assert client.count("m") == 1001


def test_what_the_add_script_refuses_rejects_with_a_task_error_and_writes_nothing(redis_url, r):
    producer = NodeProducer(redis_url, paramsLimit=4 << 20)  # past the script's own limit on a spec (1 MiB)
    try:
        producer.add({"topic": "t", "id": 0, "push": "q"})
        with pytest.raises(NodeError, match=r"^delayd:bad-task .*spec") as caught:
            producer.add({"topic": "t", "id": 1, "push": "q", "params": {"x": "y" * (2 << 20)}})
        assert caught.value.name == "TaskError"
        # A call is written whole or not at all: two tasks of one bucket, the second refused.
        same = next(i for i in range(3, 100) if bucket_of(f"t:{i}", 4) == bucket_of("t:2", 4))
        with pytest.raises(NodeError, match=r"^delayd:bad-task .*\(0 of 2 task\(s\) were written\)$"):
            producer.add_many([{"topic": "t", "id": 2, "push": "q"},
                               {"topic": "t", "id": same, "push": "q", "params": {"x": "y" * (2 << 20)}}])
        assert [key.rsplit(":", 1)[1] for key in r.keys("*:t:t:*")] == ["0"]
    finally:
        producer.close()


def test_nx_replace_delete_and_get(node, client):
    assert node.add({"topic": "t", "id": 1, "push": "q", "params": {"v": 1}, "delay": 60})
    assert node.add({"topic": "t", "id": 1, "push": "q", "params": {"v": 2}, "delay": 60}, nx=True) is False
    assert node.add({"topic": "t", "id": 1, "push": "q", "params": {"v": 2}, "delay": 60, "nx": True}) is False
    assert client.get("t", 1).params == {"v": 1}
    assert node.add({"topic": "t", "id": 1, "push": "q", "params": {"v": 3}, "delay": 60})
    assert node.get("t", 1)["params"] == {"v": 3}
    assert node.delete("t", 1) is True
    assert node.get("t", 1)["status"] == "deleted" == client.get("t", 1).status
    assert node.delete("t", 1, True) is True
    assert node.get("t", 1) is None and client.get("t", 1) is None
    assert node.delete("t", 1) is False
    assert node.delete("missing", "x", True) is False
    node.add({"topic": "t", "id": 2, "push": "q"})
    claim_due(client.store, "t:2")
    assert node.delete("t", 2) == "claimed"  # too late: a run already claimed (SPEC section 10)


def test_a_cron_task_without_delay_or_at_leaves_its_first_due_time_to_the_daemon(node, r):
    assert node.add({"topic": "t", "id": 1, "call": "a.b:c", "cron": "0 3 * * *", "tz": "Europe/Berlin"})
    record = r.hgetall(next(r.scan_iter("delayd:{*}:t:t:1")))
    assert record["first"] == "cron" and record["due"] == record["created"]  # resolved at the first claim
    assert node.get("t", 1)["cron"] == "0 3 * * *"


def test_camel_case_names_are_read_as_the_python_ones(node):
    with pytest.raises(NodeError, match=r"unknown task field\(s\): max_wait_time$"):
        node.add({"topic": "t", "id": 1, "push": "q", "maxWaitTime": 3})
    assert node.add({"topic": "t", "id": 2, "url": "https://x.example/", "signingKey": "acme"})
    assert node.ask("get", "t", 2)["signing_key"] == "acme"


def test_a_store_of_another_layout_or_a_bad_bucket_count_is_refused_in_one_line(redis_url, r):
    refusals = (({"buckets": "4", "layout": "2", "protocol": "1"}, "says layout = '2'; this client reads layout 1"),
                ({"buckets": "4", "layout": "1", "protocol": "2"}, "protocol = '2'; this client reads protocol 1"),
                ({"buckets": "zero", "layout": "1", "protocol": "1"}, "buckets = 'zero', not a bucket count"))
    for fields, words in refusals:
        r.flushall()
        r.hset("delayd:meta", mapping=fields)
        producer = NodeProducer(redis_url)
        try:
            with pytest.raises(NodeError, match=words) as caught:
                producer.add({"topic": "t", "id": 1, "push": "q"})
            assert caught.value.name == "StoreError" and "\n" not in str(caught.value)
        finally:
            producer.close()
        assert r.keys("*t:*") == []


def test_the_bucket_count_recorded_in_redis_is_used(redis_url, r):
    r.hset("delayd:meta", mapping={"buckets": "7", "layout": "1", "protocol": "1"})
    producer = NodeProducer(redis_url)
    try:
        producer.add({"topic": "t", "id": 1, "push": "q"})
        python = Client.from_url(redis_url)
        assert python.get("t", 1) is not None and len(r.keys("delayd:{*}:t:t:1")) == 1
        python.close()
    finally:
        producer.close()


def test_adds_go_on_after_redis_loses_its_scripts(node, r, client):
    node.add({"topic": "t", "id": 1, "push": "q"})
    r.script_flush()
    assert node.add({"topic": "t", "id": 2, "push": "q"})
    r.script_flush()
    assert node.add_many([{"topic": "t", "id": i, "push": "q"} for i in range(3, 500)]) == 497
    r.script_flush()
    assert node.delete("t", 1)
    assert client.count("t") == 499


def test_get_of_a_corrupt_record_rejects_as_python_does(node, r, client):
    node.add({"topic": "t", "id": 1, "push": "q"})
    key = next(r.scan_iter("delayd:{*}:t:t:1"))
    for damage in ({"spec": "[1, 2]"}, {"spec": "{nope"}, {"status": "exploded"}):
        r.hset(key, mapping=damage)
        with pytest.raises(NodeError, match=r"^t:1: corrupt record: ") as caught:
            node.get("t", 1)
        with pytest.raises(TaskError, match=r"^t:1: corrupt record: "):
            client.get("t", 1)
        assert caught.value.name == "TaskError"
        r.hset(key, mapping={"spec": '{"push":"q"}', "status": "delayed"})
    r.delete(key)
    r.set(key, "not a hash")
    with pytest.raises(NodeError, match=r"^t:1: corrupt record: its key is not a hash$"):
        node.get("t", 1)


def test_without_node_the_tests_skip_and_under_ci_they_fail(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="node is not installed"):
        need_node()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="node is not installed"):
        need_node()


def test_calls_are_made_with_the_command_class_of_the_applications_own_ioredis(tmp_path):
    # An application with its own copy of ioredis (another version, in practice: ioredis 6's
    # sendCommand refused the package's ioredis 5 commands).
    shutil.copytree(NODE_DIR / "node_modules", tmp_path / "node_modules", symlinks=True)
    (tmp_path / "node_modules" / "delayd-client").symlink_to(NODE_DIR)
    script = ("import Redis, { Command } from 'ioredis'; import { Client } from 'delayd-client';"
              "const c = new Client(new Redis({ lazyConnect: true }));"
              "console.log(new c.PackedCall('', 'k') instanceof Command);")
    out = subprocess.run([need_node(), "--input-type=module", "-e", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.strip() == "true"
