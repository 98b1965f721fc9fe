"""Stored data that nothing can break on (SPEC promise 5, issues 13 and 18).

Anyone with access to Redis can write anything into it. For every field a script
reads, for keys of the wrong type and for index members without a record, these
tests corrupt one task amid good ones and show that every good task still runs
(none lost: Redis does not roll a failed script back, so a script that fails
half-way loses what it had popped), and that the bad one is quarantined (a failed
task with its reason, indexed, counted and expiring like any failed task) or read
as docs/redis-layout.md says.
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import zlib

import pytest
from daemon_helper import delayd
from redis_server import now_ms, set_aside, wait_for
from store_helper import promote_all
from test_store import client_of
from web_helper import Web

from delayd.model.task import Task, TaskError
from delayd.store import connection, registry
from delayd.store.keys import meta_key, wire
from delayd.store.transitions import Store

PREFIX = "delayd:"
DAY_MS = 86400 * 1000
QUOTAS = (5, 3, 2)
BAD = "bad:1"
GOOD = [f"good:{i}" for i in range(8)]


def add(store: Store, member: str, delay_ms: int = 0) -> None:
    topic, _, id = member.rpartition(":")
    task = Task.new(topic, id, call="shop.tasks:run")
    store.add(store.keys_for(member), [(task, "delay", delay_ms)], False)


def add_amid_good(store: Store, bad: str = BAD) -> None:
    """Good tasks, the bad one in the middle: all due now, all of priority 2."""
    for member in GOOD[:4] + [bad] + GOOD[4:]:
        add(store, member)


def run_ready(store: Store, lease_ms: int = 60_000, outcome: str = "ok") -> dict[str, str]:
    """Claim everything ready and finish it as a queue process would: `outcome`, or
    quarantine when the record does not parse. Returns member -> what was sent."""
    claimed = store.claim(0, QUOTAS, 1000, lease_ms, DAY_MS)
    sent, results = {}, []
    for t in claimed.tasks:
        try:
            t.task(claimed.now)
            results.append((t.member, t.claim, outcome, 1000, ""))
        except TaskError as exc:
            results.append((t.member, t.claim, "quarantine", 0, str(exc)))
        sent[t.member] = results[-1][2]
    if results:
        store.finish(0, results, DAY_MS)
    return sent


def run_everything(store: Store) -> dict[str, list[str]]:
    """Promote and run until nothing is left to do; member -> outcomes sent."""
    runs: dict[str, list[str]] = {}
    for _ in range(5):
        promote_all(store, 0, DAY_MS, 1000)
        sent = run_ready(store)
        if not sent:
            break
        for member, outcome in sent.items():
            runs.setdefault(member, []).append(outcome)
    return runs


def lapse(r, store: Store, lease_ms: int = 50) -> None:
    """Claim everything ready with a short lease, and wait until the leases lapsed."""
    claimed = store.claim(0, QUOTAS, 1000, lease_ms, DAY_MS)
    assert claimed.tasks
    wait_for(lambda: now_ms(r) > claimed.now + lease_ms, 2, message="leases to lapse")


def assert_quarantined(r, store: Store, member: str, reason: str) -> None:
    """Set aside as a failed task: reason in last_error and the quarantine hash, in
    done:failed, counted as failed, expiring after the retention period."""
    keys = store.keys_for(member)
    record = r.hgetall(keys.task(member))
    assert record["status"] == "failed", record
    assert record["error"].startswith("quarantined: ") and reason in record["error"], record
    name = wire(member)
    assert reason in r.hget(keys.quarantine, name)
    assert r.zscore(keys.done("failed"), name) is not None
    assert 0 < r.pttl(keys.task(member)) <= DAY_MS
    topic = member.rpartition(":")[0] or member
    assert r.hget(keys.counts, wire(f"failed|{topic}")) == "1"
    assert r.zscore(keys.delayed, name) is None and r.zscore(keys.leases, name) is None


def assert_good_ran_once(r, store: Store, runs: dict[str, list[str]]) -> None:
    for member in GOOD:
        assert runs.get(member) == ["ok"], f"{member} ran {runs.get(member)}"
        assert r.hget(store.keys_for(member).task(member), "status") == "ok"
    keys = store.keys[0]
    assert not any(r.llen(k) for k in keys.ready) and r.zcard(keys.leases) == 0 and r.zcard(keys.delayed) == 0
    assert r.hget(keys.counts, "ok|good") == str(len(GOOD))


def assert_run_or_quarantined(r, store: Store, reason: str | None) -> None:
    """Run everything: the good tasks once each; the bad one too if `reason` is None
    (its corrupt field read as its default), else it is quarantined with `reason`."""
    runs = run_everything(store)
    assert_good_ran_once(r, store, runs)
    if reason is None:
        assert runs[BAD] == ["ok"] and r.hget(store.keys[0].task(BAD), "status") == "ok"
    else:
        assert_quarantined(r, store, BAD, reason)


@pytest.fixture
def r(redis_url):
    """A connection as delayd makes them (bytes that are not UTF-8 read with surrogateescape)."""
    client = connection.connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def store(r):
    return Store(r, PREFIX, 1)


def corrupt(r, store: Store, member: str, field: str, value) -> None:
    key = store.keys_for(member).task(member)
    if field == "(list)":
        r.delete(key)
        r.rpush(key, "not", "a", "hash")
    elif field == "(string)":
        r.delete(key)
        r.set(key, b"\xff not a hash")
    elif field == "(missing)":
        r.delete(key)
    elif value is None:
        r.hdel(key, field)
    else:
        r.hset(key, field, value)


# What a claim reads. Fields it passes on unread (spec, due, created, priority) are
# checked by the worker, which quarantines the task through finish; counters read as
# their defaults (a corrupt claim token: the created time; runs: 0; lapsed: not lapsed).
READY_CASES = [
    ("due", "soon", "record does not parse"),
    ("due", b"\xff\xfe", "record does not parse"),
    ("due", "9" * 400, "record does not parse"),  # an integer too large for a float
    ("created", "-" + "9" * 400, "record does not parse"),
    ("error", b"\xff", "field 'error' is not UTF-8"),
    ("created", "yesterday", "record does not parse"),
    ("priority", "9", "priority must be 1, 2 or 3"),
    ("priority", "high", "record does not parse"),
    ("claim", "x", None),
    ("runs", "many", None),
    ("lapsed", "maybe", None),
    ("queued", "yes", "queued flag is yes"),
    ("status", "zzz", "ready entry with status zzz"),
    ("status", None, "ready entry with status (none)"),
    ("spec", b"{this is not a task \xff", "field 'spec' is not UTF-8"),
    ("spec", "[1, 2]", "spec is not a JSON object"),
    ("spec", '{"call":"a:b","cron":"* * * * *","tz":"localtime"}', "unknown time zone 'localtime'"),
    ("spec", None, "record does not parse"),
    ("(list)", None, "record is a list, not a hash"),
    ("(string)", None, "record is a string, not a hash"),
]


@pytest.mark.parametrize("field,value,reason", READY_CASES, ids=lambda v: repr(v)[:24])
def test_a_corrupt_ready_task_loses_no_other_task(r, store, field, value, reason):
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    corrupt(r, store, BAD, field, value)
    assert_run_or_quarantined(r, store, reason)


def test_a_ready_entry_that_is_not_topic_id_is_quarantined(r, store):
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    r.hset(store.keys[0].task("odd"), mapping={"spec": '{"call":"a:b"}', "status": "delayed", "queued": "1",
                                              "created": 1, "due": 1})
    r.linsert(store.keys[0].ready[1], "AFTER", BAD, "odd")
    assert_good_ran_once(r, store, run_everything(store))
    assert_quarantined(r, store, "odd", "member is not topic:id")


# What promote reads of a delayed member: that its record exists, its status and priority.
DELAYED_CASES = [
    ("status", None, "delayed entry without a record"),
    ("status", "ok", "delayed entry with status ok"),
    ("status", b"\xff", "delayed entry with status"),
    ("priority", "0", "record with a bad priority"),
    ("(missing)", None, "delayed entry without a record"),
    ("(list)", None, "record is a list, not a hash"),
]


@pytest.mark.parametrize("field,value,reason", DELAYED_CASES, ids=lambda v: repr(v)[:24])
def test_a_corrupt_delayed_task_loses_no_other_task(r, store, field, value, reason):
    add_amid_good(store)
    corrupt(r, store, BAD, field, value)
    runs = run_everything(store)
    assert_good_ran_once(r, store, runs)
    assert BAD not in runs
    assert_quarantined(r, store, BAD, reason)


# What promote reads of a lapsed lease: status, priority and the claim token (+1).
LAPSED_CASES = [
    ("claim", "x", None),
    ("claim", None, None),
    ("priority", "7", "record with a bad priority"),
    ("status", "zzz", "leased entry with status zzz"),
    ("(missing)", None, "leased entry without a record"),
    ("(string)", None, "record is a string, not a hash"),
]


@pytest.mark.parametrize("field,value,reason", LAPSED_CASES, ids=lambda v: repr(v)[:24])
def test_a_corrupt_lapsed_task_loses_no_other_task(r, store, field, value, reason):
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    lapse(r, store)
    corrupt(r, store, BAD, field, value)
    done = promote_all(store, 0, DAY_MS, 1000)
    assert done.reaped == len(GOOD) + (reason is None)
    assert_run_or_quarantined(r, store, reason)


def test_a_record_that_is_no_hash_when_its_run_finishes_is_quarantined_at_its_lapse(r, store):
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    claimed = store.claim(0, QUOTAS, 1000, 50, DAY_MS)
    corrupt(r, store, BAD, "(list)", None)
    applied = store.finish(0, [(t.member, t.claim, "retry", 0, "") for t in claimed.tasks], DAY_MS)
    assert applied == [t.member != BAD for t in claimed.tasks]
    wait_for(lambda: now_ms(r) > claimed.now + 50, 2, message="the lease to lapse")
    assert_good_ran_once(r, store, run_everything(store))
    assert_quarantined(r, store, BAD, "record is a list")


# Keys of the bucket itself with the wrong type, and counters that are not integers:
# each is set aside (its DUMP in the bucket's `corrupt` hash) or starts again, and nothing is lost.
def key_cases(keys):
    return {
        "delayed": (keys.delayed, "string"), "leases": (keys.leases, "string"),
        "ready": (keys.ready[1], "hash"), "done:ok": (keys.done("ok"), "list"),
        "quarantine": (keys.quarantine, "list"), "counts": (keys.counts, "string"),
        "totals": (keys.totals, "list"),
    }


def write_wrong(r, key: str, kind: str) -> None:
    r.delete(key)
    {"string": lambda: r.set(key, "x"), "list": lambda: r.rpush(key, "x"),
     "hash": lambda: r.hset(key, "x", "y")}[kind]()


@pytest.mark.parametrize("name", ["delayed", "leases", "ready", "done:ok", "quarantine", "counts", "totals"])
def test_a_bucket_key_of_the_wrong_type_is_set_aside(r, store, name):
    keys = store.keys[0]
    key, kind = key_cases(keys)[name]
    write_wrong(r, key, kind)
    add_amid_good(store, "bad:1" if name != "quarantine" else "bad:1")
    corrupt(r, store, BAD, "spec", "[1]")  # a quarantine as well, to write that hash
    runs = run_everything(store)
    assert_good_ran_once(r, store, runs)
    assert set_aside(r, key)[0] == kind and not r.exists(f"{key}:corrupt")
    assert_quarantined(r, store, BAD, "spec is not a JSON object")


def test_a_run_event_window_of_the_wrong_type_is_set_aside_and_the_new_one_expires(r, store):
    """The 10-second window and the minute a finish counts into (flush_stats, which gives each count to
    HINCRBY as text): one that is not a hash is set aside, and the hash written in its place expires like any
    window (its counter equals the change: the script that made it sets the expiry), also when the call
    counts one event only (one topic's `ok`)."""
    keys = store.keys[0]
    for member in ("w:1", "w:2"):
        add(store, member)
    promote_all(store)
    claimed = store.claim(0, QUOTAS, 10, 60_000, DAY_MS)
    window, minute = now_ms(r) // 10_000, now_ms(r) // 60_000
    wrong = [keys.window(window), keys.window(window + 1), keys.minute(minute), keys.minute(minute + 1)]
    for key in wrong:
        write_wrong(r, key, "string")
    assert store.finish(0, [(t.member, t.claim, "ok", 0, "") for t in claimed.tasks], DAY_MS) == [True, True]
    made = [key for key in wrong if r.type(key) == "hash"]
    assert any(":w:m:" in key for key in made) and any(":w:m:" not in key for key in made), made
    for key in made:
        assert set_aside(r, key)[0] == "string" and r.hgetall(key) == {"ok|w": "2"}, key
        assert r.pttl(key) > 0, key


def test_the_set_aside_hash_keeps_the_last_keys_only(r, store):
    """Keys set aside go in the slot's `corrupt` hash (DUMP and why), not beside themselves: at most the last
    16, the oldest dropped first, and of a key too large to keep, only why."""
    keys = store.keys[0]
    for i in range(20):
        write_wrong(r, keys.parked(f"p{i}"), "list")
        store.transport.run(store.delete_steps(f"p{i}:1", True, DAY_MS))  # delete.lua expects the parked zset
    assert r.hlen(keys.corrupt) == 32 and set_aside(r, keys.parked("p19"))[0] == "list"
    assert not any(r.exists(keys.parked(f"p{i}"), keys.parked(f"p{i}") + ":corrupt") for i in range(20))
    r.set(keys.parked("big"), random.randbytes(1_100_000))  # (DUMP compresses: random bytes do not shrink)
    store.transport.run(store.delete_steps("big:1", True, DAY_MS))
    assert r.hget(keys.corrupt, keys.parked("big")) == "" and not r.exists(keys.parked("big"))
    assert re.fullmatch(r"\d+ a string where a zset belongs \(its DUMP of 11\d{5} bytes is not kept\)",
                        r.hget(keys.corrupt, keys.parked("big") + "|why"))


def test_counters_that_are_not_integers_start_again(r, store):
    keys = store.keys[0]
    r.hset(keys.counts, mapping={"waiting|good": "many", "ready:2|good": "x"})
    r.hset(keys.totals, "ok|good", "lots")
    add_amid_good(store)
    assert_good_ran_once(r, store, run_everything(store))
    assert r.hget(keys.totals, "ok|good") == str(len(GOOD))  # started again from the first finish


def test_non_utf8_member_names_round_trip(r, store):
    """A name that is not UTF-8 is read (surrogateescape), quarantined under its own key."""
    add_amid_good(store)
    key = store.keys[0].task_prefix.encode() + b"bad:\xff"
    r.hset(key, mapping={"spec": '{"call":"a:b"}', "status": "delayed", "created": 1, "due": 1})
    r.zadd(store.keys[0].delayed, {b"bad:\xff": 1})
    assert_good_ran_once(r, store, run_everything(store))
    assert_quarantined(r, store, "bad:\udcff", "id is not valid UTF-8")
    assert r.hget(key, "status") == "failed"


# -- quarantined tasks are failed tasks: indexed, counted, expiring ---------------------
def quarantine_one(store: Store, retention_ms: int = DAY_MS) -> None:
    add(store, BAD)
    bucket = store.keys_for(BAD).bucket
    promote_all(store, bucket, DAY_MS, 1000)
    [t] = store.claim(bucket, QUOTAS, 10, 60_000, DAY_MS).tasks
    store.finish(bucket, [(t.member, t.claim, "quarantine", 0, "unknown target")], retention_ms)


def test_a_quarantined_task_is_listed_and_counted_as_failed(r, client):
    store = client.store
    quarantine_one(store)
    [task] = client.list(status="failed")
    assert task.key == BAD and task.last_error == "quarantined: unknown target"
    stats = client.stats()
    assert stats["counts"]["failed"] == 1 and stats["quarantined"] == 1


def test_a_quarantine_expires_with_the_retention_period(r, store):
    keys = store.keys[0]
    quarantine_one(store, retention_ms=30)
    assert r.hget(keys.quarantine, BAD) == "unknown target"
    wait_for(lambda: not r.exists(keys.task(BAD)), 3, message="the record to expire")
    promote_all(store, 0, 30, 1000)
    assert r.hlen(keys.quarantine) == 0 and r.zcard(keys.done("failed")) == 0
    assert r.hget(keys.counts, "failed|bad") is None


@pytest.mark.parametrize("action", ["add", "retry", "soft delete", "hard delete"])
def test_a_quarantine_reason_leaves_with_its_failed_task(r, store, redis_url, action):
    keys = store.keys[0]
    quarantine_one(store)
    client = client_of(redis_url, store)
    topic, _, id = BAD.rpartition(":")
    {"add": lambda: add(store, BAD), "retry": lambda: client.retry(topic, id),
     "soft delete": lambda: client.delete(topic, id),
     "hard delete": lambda: client.delete(topic, id, hard=True)}[action]()
    client.close()
    assert r.hlen(keys.quarantine) == 0 and r.zcard(keys.done("failed")) == 0


# -- a real daemon: no child restarted ------------------------------------------------
def make_due(r, client, member: str) -> None:
    keys = client.store.keys_for(member)
    r.zadd(keys.delayed, {member: now_ms(r)})
    r.publish(keys.wake_channel, 0)


@pytest.mark.system
@pytest.mark.daemon(buckets=2, queues=1, DELAYD_TASK_TIMEOUT="2", DELAYD_LEASE="3")
def test_the_daemon_sets_corrupt_records_aside_and_restarts_no_child(daemon, client, r, redis_url):
    children = {c.pid for c in daemon.children()}
    params = {"list": "ran", "redis": redis_url}
    damage = {"c:utf8": ("spec", b"{this is not a task \xff"), "c:due": ("due", "soon"), "c:list": ("(list)", None),
              "c:status": ("status", "zzz"),
              "c:tz": ("spec", '{"call":"delayd.examples:record","cron":"* * * * *","tz":"posixrules"}')}
    for member, (field, value) in damage.items():
        client.add(*member.split(":"), call="delayd.examples:record", params=params, delay=3600)
        corrupt(r, client.store, member, field, value)
        make_due(r, client, member)
    good = [f"g:{i}" for i in range(10)]
    for member in good:
        client.add(*member.split(":"), call="delayd.examples:record", params=params)
    wait_for(lambda: sorted(r.lrange("ran", 0, -1)) == sorted(f"{m}:1" for m in good), 20, message="good tasks ran")
    for member in damage:
        keys = client.store.keys_for(member)
        wait_for(lambda: r.zscore(keys.done("failed"), member) is not None, 10, message=f"{member} quarantined")
        assert r.hget(keys.task(member), "error").startswith("quarantined: ")
    assert {c.pid for c in daemon.children()} == children, "no child was restarted"
    assert "child_crashed" not in daemon.log() and "Traceback" not in daemon.log()


# -- the command line reads damaged data: exit 0 or 1, one line, never a traceback ------------
def assert_clean(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 1, (proc.args, proc.stderr)
    return proc


@pytest.mark.system
def test_the_command_line_reads_damaged_data(client, r):
    for member in ("c:good", "c:utf8", "c:list", "c:due"):
        client.add(*member.split(":"), call="a:b", delay=60)
    corrupt(r, client.store, "c:utf8", "spec", b"{this is not a task \xff")
    corrupt(r, client.store, "c:list", "(list)", None)
    corrupt(r, client.store, "c:due", "due", "soon")
    odd = client.store.keys[zlib.crc32(b"c:\xff") % client.store.buckets]  # a name that is not UTF-8
    r.hset(odd.task_prefix.encode() + b"c:\xff",
           mapping={"spec": '{"call":"a:b"}', "status": "delayed", "created": 1, "due": 1})
    r.zadd(odd.delayed, {b"c:\xff": 1})
    counts, totals = client.store.keys[0].counts, client.store.keys[1].totals
    r.hset(counts, mapping={"waiting|c": "many", b"ok|\xff": "1"})
    r.hset(totals, mapping={"le:zz|c": "1", "started|c": "x", b"started|\xfe": "2"})
    # Long TTLs: on a loaded machine the commands below take longer than a live daemon's 15 s.
    registry.register(r, "delayd:", "good", {"pid": 1, "started": 0, "host": "h", "children": []}, ttl=3600)
    info, _ = registry.keys("delayd:")
    for ident, body in (("json", b"{not json"), ("list", b"[1]"), ("types", b'{"started": "x", "children": [1]}'),
                        ("bytes", b'{"host": "\xff", "started": 1e999}')):
        registry.register(r, "delayd:", ident, {}, ttl=3600)
        r.hset(info, ident, body)

    for args, codes in ((["get", "c", "good"], (0,)), (["get", "c", "utf8"], (1,)), (["get", "c", "list"], (1,)),
                        (["get", "c", "due"], (1,)), (["get", "c", "\udcff", "--json"], (1,)),
                        (["ls"], (0,)), (["ls", "--json"], (0,)), (["ls", "--status", "delayed"], (0,)),
                        (["stats"], (0,)), (["stats", "--json"], (0,)),
                        (["status", "--cluster"], (0,)), (["status", "--cluster", "--json"], (0,))):
        assert_clean(delayd(*args, check=codes, errors="replace"))
    listed = [json.loads(line) for line in delayd("ls", "--json", errors="replace").stdout.splitlines()]
    assert {t["key"]: t["last_error"] for t in listed if t["last_error"]}.keys() == {
        "c:utf8", "c:list", "c:due", "c:\\xff"}
    daemons = json.loads(delayd("status", "--cluster", "--json", errors="replace").stdout)["daemons"]
    assert len(daemons) == 3  # good, types, bytes

    r.delete(info)
    r.set(info, "not a hash")
    assert_clean(delayd("status", "--cluster", check=1, errors="replace"))
    r.hset(meta_key("delayd:"), "buckets", "four")
    for verb in ("ls", "stats", "get"):
        assert_clean(delayd(verb, *(["c", "good"] if verb == "get" else []), check=1, errors="replace"))


# -- found by the fuzzer (tests/store/test_fuzz_stored.py), each example turned into a plain test ----------
# Numbers Lua's tonumber reads but that are no integer: a claim token written back as 1e+17 or
# 1.5 went to the worker as another number, so the run never finished and ran once per lease.
@pytest.mark.parametrize("field,value", [("claim", "1e17"), ("claim", "1.5"), ("claim", "nan"), ("claim", "-inf"),
                                         ("created", "1.5")])
def test_a_token_that_is_no_integer_reads_as_missing(r, store, field, value):
    add_amid_good(store)
    corrupt(r, store, BAD, "claim", None)
    corrupt(r, store, BAD, field, value)
    runs = run_everything(store)
    assert_good_ran_once(r, store, runs)
    if field == "created":  # the token counts from 0, and the worker quarantines the record
        assert_quarantined(r, store, BAD, "record does not parse")
    else:
        assert runs[BAD] == ["ok"] and r.hget(store.keys[0].task(BAD), "status") == "ok"


def test_a_due_time_that_is_no_integer_when_a_run_is_retried(r, store):
    """finish.lua: ZADD of a nan due time failed the script after its first write, and with it the batch."""
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    claimed = store.claim(0, QUOTAS, 1000, 60_000, DAY_MS)
    corrupt(r, store, BAD, "due", "nan")
    applied = store.finish(0, [(t.member, t.claim, "retry", 1000, "later") for t in claimed.tasks], DAY_MS)
    assert applied == [True] * (len(GOOD) + 1)
    due = r.zscore(store.keys[0].delayed, BAD)
    assert due is not None and claimed.now < due <= now_ms(r) + 1000


def test_a_due_time_that_is_no_integer_when_its_topic_is_paused(r, store, redis_url):
    """A pause parks a ready task at its due time (park.lua): a nan one failed the script half-way."""
    add_amid_good(store)
    promote_all(store, 0, DAY_MS, 1000)
    corrupt(r, store, BAD, "due", "nan")
    client = client_of(redis_url, store)
    assert client.pause("bad") == 1
    client.close()
    assert r.zscore(store.keys[0].parked("bad"), BAD) is not None
    assert_good_ran_once(r, store, run_everything(store))


@pytest.mark.system
def test_ls_reads_a_paused_topic_that_is_not_utf8(client, r):
    client.add("c", "good", call="a:b", delay=60)
    keys = client.store.keys[0]
    r.hset(keys.paused, b"z\xc7", "1")
    r.zadd(keys.paused.encode() + b":z\xc7", {b"z\xc7:1": 1})
    assert_clean(delayd("ls", errors="replace"))


@pytest.mark.system
def test_status_cluster_reads_a_daemon_id_that_is_not_utf8(client, r):
    registry.register(r, "delayd:", "z", {"pid": 1, "started": 0, "host": "h", "children": []})
    info, expires = registry.keys("delayd:")
    r.hset(info, b"z\xb1", r.hget(info, "z"))
    r.zadd(expires, {b"z\xb1": now_ms(r) + 60_000})
    proc = assert_clean(delayd("status", "--cluster", "--json", errors="replace"))
    assert sorted(d["id"] for d in json.loads(proc.stdout)["daemons"]) == ["z", "z\\xb1"]


@pytest.mark.system
@pytest.mark.parametrize("value", ["2000", "9" * 5000])
def test_a_bucket_count_out_of_range_is_refused(client, r, value):
    """A huge count made every reader allocate keys for each bucket (MemoryError, or the host's
    memory: the fuzzer's run was killed by the OOM killer at 24 GB); 5000 digits were a traceback."""
    r.hset(meta_key("delayd:"), "buckets", value)
    proc = assert_clean(delayd("stats", check=1, errors="replace"))
    assert "not a bucket count (1-1024)" in proc.stderr


# -- the dashboard reads damaged data: an answer or a clear error, never a 500 ------------------------
@pytest.fixture
def web(redis_url):
    with Web(redis_url) as server, server.client() as http:
        yield http


@pytest.mark.system
def test_the_dashboard_reads_a_paused_topic_that_is_not_utf8(web, client, r):
    client.add("c", "1", call="a:b", delay=60)
    r.hset(client.store.keys[0].paused, b"z\xc7", "1")
    answer = web.get("/api/stats")
    assert answer.status_code == 200 and "z\\xc7" in answer.json()["paused"]  # shown as `delayd ls` shows it


@pytest.mark.system
def test_the_dashboard_lists_a_record_that_is_no_hash(web, client, r):
    """One record of another type made the whole list a 503 (and the HTML error page a 500)."""
    for id in ("good", "bad"):
        client.add("c", id, call="a:b", delay=60)
    corrupt(r, client.store, "c:bad", "(list)", None)
    rows = {row["key"]: row for row in web.get("/api/tasks").json()["tasks"]}
    assert rows["c:good"]["task"] is not None
    assert rows["c:bad"]["task"] is None and "key is not a hash" in rows["c:bad"]["corrupt"]
    assert web.get("/tasks", headers={"accept": "text/html"}).status_code == 200
    detail = web.get("/api/tasks/c/bad")
    assert detail.status_code == 200 and "not a hash" in detail.json()["corrupt"]


@pytest.mark.system
def test_the_dashboard_error_page_renders(web):
    answer = web.get("/tasks/no/such", headers={"accept": "text/html"})
    assert answer.status_code == 404 and "not found: no:such" in answer.text


@pytest.mark.system
def test_the_dashboard_reads_minute_counters_that_are_not_integers(web, client, r):
    keys = client.store.keys[0]
    minute = now_ms(r) // 60_000
    r.hset(f"{keys.window_prefix}m:{minute}", mapping={"ok|c": "x", "le:1|c": "2", "ok|d": "9" * 5000})
    write_wrong(r, f"{keys.window_prefix}m:{minute - 1}", "list")
    answer = web.get("/api/stats")
    assert answer.status_code == 200 and answer.json()["last_hour"][-1]["started"] == 2


@pytest.mark.system
def test_the_dashboard_reads_index_entries_and_times_out_of_range(web, client, r):
    """A score of inf (int() of it raised) and a created time no calendar holds (strftime raised)."""
    client.add("c", "inf", call="a:b", delay=60)
    client.add("c", "late", call="a:b", delay=60)
    keys = client.store.keys_for("c:inf")
    r.zadd(keys.delayed, {"c:inf": float("inf")})
    r.hset(client.store.keys_for("c:late").task("c:late"), "created", "9" * 19)
    for path in ("/tasks", "/tasks/c/late", "/tasks/c/inf", "/"):
        assert web.get(path, headers={"accept": "text/html"}).status_code == 200, path
    listed = web.get("/api/tasks", params={"status": "delayed", "limit": 1}).json()
    follow = web.get("/api/tasks", params={"status": "delayed", "limit": 1, "cursor": listed["cursor"]}).json()
    assert {row["key"] for row in listed["tasks"] + follow["tasks"]} == {"c:inf", "c:late"}
    assert web.get("/api/stats").status_code == 200


@pytest.mark.system
def test_the_dashboard_pages_past_and_links_a_name_that_is_not_utf8(web, client, r):
    store = client.store
    for member in ("c:1", "c:2"):
        client.add(*member.split(":"), call="a:b", delay=60)
    odd = store.keys_for("c:\udcff")
    r.hset(odd.task("c:\udcff"), mapping={"spec": '{"call":"a:b"}', "status": "delayed", "created": 1, "due": 1})
    r.zadd(odd.delayed, {b"c:\xff": now_ms(r) + 30_000})
    seen, cursor = [], ""
    for _ in range(5):
        page = web.get("/api/tasks", params={"status": "delayed", "limit": 1, "cursor": cursor})
        assert page.status_code == 200, page.text
        seen += [row["key"] for row in page.json()["tasks"]]
        if not (cursor := page.json()["cursor"]):
            break
    assert sorted(seen) == ["c:1", "c:2", "c:\\xff"]
    assert web.get("/tasks", headers={"accept": "text/html"}).status_code == 200
    detail = web.get("/api/tasks/c/%FF")
    assert detail.status_code == 200 and "not valid UTF-8" in detail.json()["corrupt"]
