"""What the stored-data fuzzer writes into Redis (tests/store/test_fuzz_stored.py): hypothesis
strategies for damage, and the functions that write it.

A plan is a list of steps. A *victim* step adds a task, brings it to a phase (waiting,
running, parked or finished) and damages its record: one field set to random bytes or
removed, or the whole key replaced by another type. A *noise* step writes random
entries into the bucket's indexes, counters, quarantine and paused hashes, the parked
set of a paused topic, the daemon registry or the meta hash, or gives one of those keys
another type. Noise never names a good task: its members and topics start with `z`
(or are empty), and a shared index (delayed, leases, ready lists, paused) gets another
type only while it is empty, so the damage itself removes no good task.
"""
from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import redis
from hypothesis import strategies as st
from redis_server import now_ms

BUCKETS = 2
FIELDS = ("spec", "priority", "status", "created", "due", "runs", "claim", "last_run", "error", "queued",
          "lapsed", "last_due", "zz")
KINDS = ("string", "list", "hash", "zset", "set")
# Values that look like what a script or a parser expects, and the edges of those parsers:
# Lua's tonumber takes hex, spaces, nan and inf; Redis prints big numbers with an exponent.
TRAPS = (b"", b"nan", b"inf", b"-inf", b"1e400", b"1.5", b"-1", b"0", b"0x10", b" 7 ", b"1e17",
         b"99999999999999999999", b"9007199254740993", b"1", b"2", b"3", b"r", b"delayed", b"running", b"ok",
         b"failed", b"deleted", b"{}", b"[]", b"null", b'{"call": 5}', b'{"call":"fuzz_handlers:outcome","params":[]}',
         b'{"call":"fuzz_handlers:outcome","every":0}', b'{"url":"http://\xff/"}',
         b'{"cron":"* * * * *","tz":"Mars/Base"}',
         b"\xff\xfe", b"\xed\xa0\x80", b"\x00", b"{this is not a task \xff")


class Blob(bytes):
    """Bytes too long to print in a failing example: shown by length and start."""

    def __repr__(self) -> str:
        return f"Blob({bytes(self[:8])!r} * {len(self)} bytes)"


# Huge values: 1 KiB and 1 MiB of one unit (deep JSON nesting, a number too long for a double, ...).
HUGE = st.tuples(st.sampled_from([b"x", b"[", b"9", b"\xff", b'{"a":']), st.sampled_from([1 << 10, 1 << 20])).map(
    lambda t: Blob(t[0] * (t[1] // len(t[0]))))
# Numbers that Lua's tonumber reads but that are no integer count or time in ms.
NUMBERS = (b"nan", b"inf", b"-inf", b"1e400", b"1.5", b"-1", b"0x10", b"1e17", b"99999999999999999999",
           b"9007199254740993", b"-9e18", b"0.5e3", b"1e-9")
VALUES = st.one_of(st.sampled_from(TRAPS), st.sampled_from(NUMBERS), st.binary(max_size=40),
                   st.integers(-2 ** 70, 2 ** 70).map(lambda i: str(i).encode()),
                   st.floats().map(lambda f: repr(f).encode()), HUGE)
SCORES = st.one_of(st.just("now"), st.floats(allow_nan=False), st.integers(-2 ** 62, 2 ** 62),
                   st.sampled_from([0, 1.5, 2 ** 53 + 1, float("inf"), float("-inf")]))
# Names that cannot be a good task's (good topics are g<n>, victims' b<n>...).
NAMES = st.one_of(st.just(b""), st.binary(max_size=24).map(lambda b: b"z" + b),
                  st.sampled_from([b"z\xff:1", b"z:", b":z", b"z:a:b", Blob(b"z" * 100_000)]))
COUNTER_FIELDS = st.one_of(NAMES, st.sampled_from([b"waiting|z", b"ok|z", b"failed|z", b"le:zz|z", b"le:1e999|z",
                                                   b"lateness_ms|z", b"started|z", b"ready:2|z", b"|", b"ok|z\xff"]))
REGISTRY_BODIES = st.one_of(VALUES, st.sampled_from([
    b"{not json", b"[1]", b'{"started": "x", "children": [1]}', b'{"host": "\xff", "started": 1e999}',
    b'{"children": [{"pid": "x", "restarts": null, "name": 5}], "ttl": "x", "started": -1e308}',
    b'{"id": 5, "pid": 1e400, "buckets": [], "state": {}}']))


class Victim(NamedTuple):
    phase: str    # waiting, running, parked or finished when its record is damaged
    outcome: str  # what its handler answers: success, fail or retry (once)
    damage: tuple


class Noise(NamedTuple):
    what: str
    args: tuple


class Plan(NamedTuple):
    steps: list      # Victim and Noise steps, in order; a good task is added before each
    goods: list      # (outcome, priority, delay_s) of each good task
    meta: Any        # bytes for the meta hash's `buckets`, or None


DAMAGE = st.one_of(
    st.tuples(st.just("field"), st.sampled_from(FIELDS), VALUES),
    st.tuples(st.just("drop"), st.sampled_from(FIELDS)),
    st.tuples(st.just("type"), st.sampled_from(("string", "list", "zset", "set", "missing"))),
)
VICTIMS = st.builds(Victim, st.sampled_from(["waiting", "running", "parked", "finished"]),
                    st.sampled_from(["success", "fail", "retry"]), DAMAGE)
BUCKET = st.integers(0, BUCKETS - 1)
NOISE = st.one_of(
    st.builds(lambda *a: Noise("index", a), st.sampled_from(["delayed", "leases", "done:ok", "done:failed",
                                                             "done:deleted"]), BUCKET, NAMES, SCORES),
    st.builds(lambda *a: Noise("ready", a), BUCKET, st.sampled_from([1, 2, 3]), NAMES),
    st.builds(lambda *a: Noise("parked", a), BUCKET, NAMES, st.one_of(st.sampled_from([b"1", b"r"]), VALUES), NAMES,
              SCORES),
    st.builds(lambda *a: Noise("hash", a), st.sampled_from(["quarantine", "counts", "totals", "window", "minute"]),
              BUCKET, COUNTER_FIELDS, VALUES),
    st.builds(lambda *a: Noise("daemon", a), NAMES, REGISTRY_BODIES, SCORES),
    st.builds(lambda *a: Noise("meta", a), NAMES, VALUES),
    st.builds(lambda *a: Noise("keytype", a), st.sampled_from([
        "delayed", "leases", "ready:1", "ready:2", "ready:3", "done:ok", "done:failed", "done:deleted", "quarantine",
        "counts", "totals", "window", "minute", "paused", "info", "expires"]), BUCKET, st.sampled_from(KINDS)),
)
GOODS = st.tuples(st.sampled_from(["success", "fail", "retry"]), st.integers(1, 3), st.sampled_from([0, 0, 0.05]))


@st.composite
def plans(draw: Any, victims: int = 3, noise: int = 5) -> Plan:
    steps = draw(st.permutations(draw(st.lists(VICTIMS, min_size=1, max_size=victims))
                                 + draw(st.lists(NOISE, max_size=noise))))
    goods = draw(st.lists(GOODS, min_size=len(steps) + 1, max_size=len(steps) + 3))
    return Plan(steps, goods, draw(st.none() | VALUES))


# -- writing it ---------------------------------------------------------------------------
# Shared indexes get another type only while empty (no good task is removed by the damage).
ONLY_IF_EMPTY = ("delayed", "leases", "ready:1", "ready:2", "ready:3", "paused")
_WRITE = "if ARGV[1] == '0' or redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) " \
         "redis.call(ARGV[2], KEYS[1], unpack(ARGV, 3)) end"
_KIND_ARGS = {"string": ("SET", b"\xff not a hash"), "list": ("RPUSH", b"x"), "hash": ("HSET", b"x", b"\xff"),
              "zset": ("ZADD", 1, b"x"), "set": ("SADD", b"x")}


def write_kind(r: Any, key: Any, kind: str, only_if_empty: bool = False) -> None:
    """Replace `key` by a key of type `kind` (atomically, and only if it is empty when asked)."""
    r.eval(_WRITE, 1, key, int(only_if_empty), *_KIND_ARGS[kind])


def score_of(r: Any, score: Any) -> float:
    return now_ms(r) if score == "now" else score


def damage_record(r: Any, key: Any, damage: tuple) -> None:
    kind = damage[0]
    if kind == "field":
        r.hset(key, damage[1], damage[2])
    elif kind == "drop":
        r.hdel(key, damage[1])
    elif damage[1] == "missing":
        r.delete(key)
    else:
        write_kind(r, key, damage[1])


def bucket_key(store: Any, name: str, bucket: int, now: int) -> str:
    keys = store.keys[bucket]
    named = {"delayed": keys.delayed, "leases": keys.leases, "quarantine": keys.quarantine, "counts": keys.counts,
             "totals": keys.totals, "paused": keys.paused, "window": f"{keys.window_prefix}{now // 10_000}",
             "minute": f"{keys.window_prefix}m:{now // 60_000}"}
    if name.startswith("ready:"):
        return keys.ready[3 - int(name[-1])]
    if name.startswith("done:"):
        return keys.done(name[5:])
    return named[name]


def apply_noise(r: Any, store: Any, registry_keys: tuple[str, str], meta: str, step: Noise) -> None:
    """Write `step`; a write that the key's type refuses (earlier noise changed it) is left out."""
    with contextlib.suppress(redis.exceptions.ResponseError):
        _write_noise(r, store, registry_keys, meta, step)


def _write_noise(r: Any, store: Any, registry_keys: tuple[str, str], meta: str, step: Noise) -> None:
    what, args = step
    now = now_ms(r)
    if what == "index":
        name, bucket, member, score = args
        r.zadd(bucket_key(store, name, bucket, now), {member: score_of(r, score)})
    elif what == "ready":
        bucket, priority, member = args
        r.rpush(store.keys[bucket].ready[3 - priority], member)
    elif what == "parked":
        bucket, topic, flag, member, score = args
        r.hset(store.keys[bucket].paused, topic, flag)
        r.zadd(store.keys[bucket].paused.encode() + b":" + topic, {member: score_of(r, score)})
    elif what == "hash":
        name, bucket, field, value = args
        r.hset(bucket_key(store, name, bucket, now), field, value)
    elif what == "daemon":
        ident, body, score = args
        r.hset(registry_keys[0], ident, body)
        r.zadd(registry_keys[1], {ident: score_of(r, score) if score != "now" else now + 60_000})
    elif what == "meta":
        field, value = args
        if field != b"buckets":
            r.hset(meta, field, value)
    elif what == "keytype":
        name, bucket, kind = args
        key = registry_keys[("info", "expires").index(name)] if name in ("info", "expires") else \
            bucket_key(store, name, bucket, now)
        write_kind(r, key, kind, only_if_empty=name in ONLY_IF_EMPTY)
