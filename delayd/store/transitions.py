"""The Redis layout and its atomic transitions (one Lua script each).

Every key of one bucket shares the hash tag `{N}`, so every script touches one
Redis Cluster slot. See docs/redis-layout.md for the whole layout.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from typing import Any, Iterable, NamedTuple, Sequence

import redis
from redis.cluster import RedisCluster

from delayd.config import MAX_BUCKETS
from delayd.model.task import DEFAULT_RETRIES, Task, is_utf8
from delayd.store import lua_lib, resp
from delayd.store.held import checked_out
from delayd.store.steps import Read, ScriptCall, Send, Steps, command, run

PRIORITIES = (3, 2, 1)
STREAM_WINDOW = 4  # script calls sent ahead of their replies by stream_steps


def bucket_of(member: str, buckets: int) -> int:
    """The bucket of a task key: a stable hash of `topic:id`, not of the topic alone.

    (surrogateescape: a name read from Redis that is not UTF-8 hashes as its bytes.)"""
    return zlib.crc32(member.encode("utf-8", "surrogateescape")) % buckets


def wire(name: str) -> str | bytes:
    """A name read from Redis, ready to send back: its own bytes if it was not UTF-8.

    Connections read such bytes as lone surrogates (delayd.store.connection), which hiredis
    cannot encode; every other name goes out as it is."""
    if name.isascii() or is_utf8(name):
        return name
    return name.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class BucketKeys:
    """Names of one bucket's keys and channels."""

    prefix: str
    bucket: int

    @cached_property
    def tag(self) -> str:
        return f"{self.prefix}{{{self.bucket}}}:"

    @property
    def task_prefix(self) -> str:
        return self.tag + "t:"

    def task(self, member: str) -> str | bytes:
        return wire(self.task_prefix + member)

    @property
    def delayed(self) -> str:
        return self.tag + "delayed"

    @property
    def leases(self) -> str:
        return self.tag + "leases"

    @property
    def ready(self) -> tuple[str, str, str]:
        """Ready lists of call and push tasks, highest priority first."""
        return tuple(f"{self.tag}ready:{p}" for p in PRIORITIES)  # type: ignore[return-value]

    @property
    def ready_url(self) -> tuple[str, str, str]:
        """Ready lists of URL tasks (claimed for the event loop), highest priority first."""
        return tuple(f"{self.tag}ready:u{p}" for p in PRIORITIES)  # type: ignore[return-value]

    def done(self, status: str) -> str:
        return f"{self.tag}done:{status}"

    @property
    def quarantine(self) -> str:
        return self.tag + "quarantine"

    @property
    def paused(self) -> str:
        """Hash topic -> 1 of the topics paused (every bucket has the flag, so its scripts
        read it in their own slot); `paused:<topic>` is the zset of that topic's parked tasks."""
        return self.tag + "paused"

    @property
    def recurring(self) -> str:
        """Zset of the bucket's recurring tasks (members at score 0: name order), kept by add,
        finish and delete; the dashboard's schedules page reads it instead of every record."""
        return self.tag + "recurring"

    def parked(self, topic: str) -> str | bytes:
        """(A topic read from the paused hash may not be UTF-8: sent back as its own bytes.)"""
        return wire(f"{self.paused}:{topic}")

    @property
    def counts(self) -> str:
        """Hash `<state>|<topic>` -> tasks in that state (kept in step by every script)."""
        return self.tag + "counts"

    @property
    def totals(self) -> str:
        """Hash `<event>|<topic>` -> runs by outcome, starts, lateness buckets, since the start."""
        return self.tag + "totals"

    @property
    def window_prefix(self) -> str:
        """`P{N}:w:<n>`: the same events as totals for the 10-second window n (expires)."""
        return self.tag + "w:"

    @property
    def wake_channel(self) -> str:
        """Published to when this bucket's next due time or lease expiry moved earlier."""
        return f"{self.prefix}wake:{self.bucket}"


def ready_channel(prefix: str) -> str:
    """Published to (with the bucket number) when a bucket made tasks ready."""
    return f"{prefix}ready"


def meta_key(prefix: str) -> str:
    return f"{prefix}meta"


# The version of the layout in docs/redis-layout.md, kept in the meta hash: any change that a
# delayd of another layout would misread (a key, a field, a format) comes with a new number, so
# that such a delayd refuses the store in one line instead of misreading it or writing into it.
LAYOUT = 1


def recorded_buckets(redis_client: Any, prefix: str, default: int) -> int:
    """The bucket count recorded in Redis for `prefix`; records `default` on first use.
    Refuses (StoreError) a store of another layout version."""
    return run(redis_client, bucket_count(prefix, default))


def bucket_count(prefix: str, default: int) -> Steps[int]:
    """recorded_buckets as steps (see delayd.store.steps): one round trip once the store is in use."""
    key = meta_key(prefix)
    try:
        stored, layout = yield command("HMGET", key, "buckets", "layout")
        if stored is None or layout is None:  # first use (or a store from before the layout field)
            if stored is None:
                yield command("HSETNX", key, "buckets", default)
            yield command("HSETNX", key, "layout", LAYOUT)
            stored, layout = yield command("HMGET", key, "buckets", "layout")
    except redis.exceptions.ResponseError:  # WRONGTYPE: not a hash
        raise StoreError(f"{key} in Redis is not a hash; it should hold the bucket count "
                         f"(buckets {default}?)") from None
    if layout != str(LAYOUT):
        shown = repr(layout[:40]) + ("..." if len(layout) > 40 else "")
        raise StoreError(f"{key} in Redis says layout = {shown}; this delayd reads layout {LAYOUT} (a store "
                         "written by another version of delayd: use that version, or another prefix)")
    # (At most MAX_BUCKETS, as the configuration: a huge count would allocate keys for every bucket.)
    count = int(stored) if stored.isascii() and stored.isdigit() and len(stored) <= 5 else 0
    if not 0 < count <= MAX_BUCKETS:
        shown = repr(stored[:40]) + ("..." if len(stored) > 40 else "")
        raise StoreError(f"{key} in Redis holds buckets = {shown}, not a bucket count (1-{MAX_BUCKETS}); "
                         f"set it right (HSET {key} buckets N) before using this store")
    return count


class StoreError(ValueError):
    """The store's own metadata in Redis is unreadable (one line, for the user)."""


class Promoted(NamedTuple):
    """What one promote.lua call did, and when the bucket needs looking at again."""

    moved: int       # due tasks moved to the ready lists
    reaped: int      # lapsed leases put back to run again
    next_due: int    # ms, the earliest due time still in `delayed`; -1 if none
    next_lease: int  # ms, the earliest lease expiry; -1 if none
    clock_us: int    # µs, Redis's clock during the call
    full: bool       # a batch hit the limit: call again at once


class ClaimedTask(NamedTuple):
    """One task handed out by claim.lua: its member and the record fields it was claimed with.

    runs and claim were computed by the script; the other fields are as stored (so
    any of them may be corrupt: `Task.from_record` checks them)."""

    member: str
    spec: str
    runs: int
    claim: int
    due: str
    created: str
    error: str
    priority: str

    def task(self, now_ms: int, default_retries: int = DEFAULT_RETRIES) -> Task:
        """The task as its handler sees it (`default_retries`: the daemon's `retries` setting);
        raises TaskError for a corrupt record."""
        return Task.from_record(self.member, {
            "spec": self.spec, "priority": self.priority, "status": "running", "created": self.created,
            "due": self.due, "last_run": now_ms, "runs": self.runs, "claim": self.claim, "error": self.error},
            default_retries)


class Claimed(NamedTuple):
    now: int                  # ms, Redis's clock during the claim (the runs' last_run)
    tasks: list[ClaimedTask]


CLAIMED_FIELDS = len(ClaimedTask._fields)


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`, run by SHA with a reload on NOSCRIPT.

    Unlike redis-py's Script in a pipeline, this never adds a SCRIPT EXISTS round trip.
    """

    _lib = resources.files(__package__).joinpath("lua/_lib.lua").read_text()

    def __init__(self, name: str):
        self.name = name
        body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()
        self.source = lua_lib.source(self._lib, body)  # with the helpers of _lib.lua it uses
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            # Redis restarted or its script cache was flushed: EVAL loads it again.
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def call_async(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """__call__ on a redis.asyncio client."""
        try:
            return await client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    def many(self, client: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Run `calls` on `client` in one pipelined round trip (`stream` on a connection checked
        out for them), or one call after the other on a Cluster, whose pipeline refuses EVALSHA."""
        if isinstance(client, RedisCluster):
            return [self(client, keys, args) for keys, args in calls]
        with checked_out(client) as conn:
            return self.stream(conn, calls, window=len(calls))

    def head(self, keys: Sequence[Any], args: Sequence[Any]) -> resp.Head:
        """EVALSHA of this script with `keys` and leading `args`, packed once: head.pack(more_args)
        is a whole call (see delayd.store.resp)."""
        return resp.Head("EVALSHA", self.sha, len(keys), *keys, *args)

    def request(self, held: Any, packed: bytes) -> Any:
        """One call packed by head() on `held` (a delayd.store.held.HeldConnection); after NOSCRIPT,
        SCRIPT LOAD and the same call again (the SHA does not change)."""
        try:
            return held.request(packed)
        except redis.exceptions.NoScriptError:
            held.request(resp.pack(("SCRIPT", "LOAD", self.source)))
            return held.request(packed)

    def stream_steps(self, calls: Iterable[bytes], window: int = STREAM_WINDOW,
                     replies: list[Any] | None = None) -> Steps[list[Any]]:
        """Many calls of this script packed by head(), streamed: see `stream_steps`."""
        return stream_steps(((self, call) for call in calls), window, replies)

    def stream(self, conn: Any, calls: Iterable[tuple[Sequence[str], Sequence[Any]]],
               window: int = STREAM_WINDOW, replies: list[Any] | None = None) -> list[Any]:
        """Many calls of this script on `conn`: see `stream`."""
        return stream(conn, (ScriptCall(self, keys, args) for keys, args in calls), window, replies)


def stream_steps(calls: Iterable[tuple[Script, bytes]], window: int = STREAM_WINDOW,
                 replies: list[Any] | None = None) -> Steps[list[Any]]:
    """Run script calls (each a Script and its packed EVALSHA, of any scripts) on one connection
    (the caller's alone), `window` calls ahead of the replies: Redis runs call k while Python
    packs the next ones, where a pipeline packs all, then waits for all. Calls are produced
    lazily. Returns one reply per call.

    `replies`, if given, fills as the calls are answered, in order: after a failure it holds
    the replies of the calls answered before the first unanswered one (an error reply as its
    exception), so that a caller knows what they did.

    A call refused with NOSCRIPT (Redis lost its script cache) is followed at once by a SCRIPT
    LOAD of its script (once per script) and sent again, once; the calls in flight behind it
    are refused too and sent again in their order, so the calls still run in order. After an
    error reply nothing more is sent; the first error is raised once the replies in flight are
    read. Connection errors leave the connection to be dropped.
    """
    replies = [] if replies is None else replies
    sent: list[tuple[Script, bytes]] = []
    answers: dict[int, Any] = {}           # replies read ahead of an earlier call's (sent again)
    pending: deque[int | None] = deque()   # what each reply in flight answers: a call, or a SCRIPT LOAD
    loaded: set[str] = set()
    again: set[int] = set()
    errors: list[Exception] = []

    def read() -> Steps[None]:
        n = pending.popleft()
        try:
            reply = yield Read()
        except redis.exceptions.NoScriptError as exc:
            script = sent[n][0] if n is not None else None
            if n is None or n in again or errors:  # (after an error nothing more is sent)
                errors.append(exc)
                reply = exc
            else:
                if script.name not in loaded:
                    loaded.add(script.name)
                    yield Send(resp.pack(("SCRIPT", "LOAD", script.source)))
                    pending.append(None)
                again.add(n)
                yield Send(sent[n][1])
                pending.append(n)
                return
        except redis.exceptions.ResponseError as exc:
            errors.append(exc)
            reply = exc
        if n is not None:
            answers[n] = reply
            while len(replies) in answers:
                replies.append(answers.pop(len(replies)))

    for call in calls:
        if errors:
            break
        sent.append(call)
        yield Send(call[1])
        pending.append(len(sent) - 1)
        while len(pending) > window:
            yield from read()
    while pending:
        yield from read()
    if errors:
        raise errors[0]
    return replies


def stream(conn: Any, calls: Iterable[ScriptCall], window: int = STREAM_WINDOW,
           replies: list[Any] | None = None) -> list[Any]:
    """stream_steps on a redis-py connection (checked out for the caller alone), the calls
    packed as redis-py packs them."""
    def packed() -> Iterable[tuple[Script, bytes]]:
        for call in calls:
            yield call.script, b"".join(conn.pack_command("EVALSHA", call.script.sha, len(call.keys),
                                                          *call.keys, *call.args))
    return run(conn, stream_steps(packed(), window, replies))


SCRIPTS = {name: Script(name) for name in ("add", "promote", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now",
                                           "browse")}


# finish's next due time for a recurring task's last run (ended by its outcome): it leaves `recurring`.
SCHEDULE_ENDS = "end"

# Parked tasks moved back per resume.lua call: ~2.5 ms of Redis time (100k in one call took ~100 ms).
RESUME_BATCH = 1000
# Ready-list entries park.lua looks at per call (a pause walks every ready list this many at a time).
PARK_CHUNK = 1000


class Resumed(NamedTuple):
    """resume.lua's answer: tasks moved back to `delayed`, how many are still parked, the
    resume's generation, and whether a pause that began after the resume holds the bucket."""

    moved: int
    left: int
    generation: int = 0
    overtaken: bool = False


class Paused(NamedTuple):
    """A pause's outcome: the ready tasks it parked, its generation, and whether a resume that
    began after it reached the first bucket before the pause had flagged them all (the pause
    then finished that resume: the topic is not paused)."""

    parked: int
    generation: int
    overtaken: bool


class RunNow(NamedTuple):
    """run_now.lua's answer: code (1 due now, 2 due now but paused, 3 already due, 0 missing,
    -1 not delayed) and the task's status."""

    code: int
    status: str


Score = int | float   # an index's time in ms; a float only for the infinities Redis allows in a zset


def score_of(text: str) -> Score:
    """A zset score as Redis sends it ('1700000000000', 'inf', '-inf'): an int unless infinite."""
    value = float(text)
    return int(value) if math.isfinite(value) else value


class Browsed(NamedTuple):
    """browse.lua's answer for one bucket's index (the dashboard's task list)."""

    matches: list[tuple[str, Score]]   # (member, score), in the walk's order
    examined: int                      # index entries looked at
    stop: tuple[Score, str] | None     # the last entry examined; None when the index was read to its end
    size: int                          # entries in the index
    problem: str | None                # why the index could not be read (a key of the wrong type), else None


class Finish(NamedTuple):
    """One run's outcome as finish.lua records it."""

    member: str
    claim: int
    outcome: str        # ok, failed, retry, quarantine, defer
    gap_ms: int = 0     # retry: from the due time to the next run
    error: str = ""     # '' clears last_error
    next_due: Any = ""  # a recurring task's next due time (ms), or ''
    wait_ms: int = 0    # the next run no earlier than now + wait (Retry-After; defer: the probe)
    attempt: str = ""   # a line for the delivery log (attempts.encode), or ''


FINISH_FIELDS = len(Finish._fields)


class Store:
    """The transitions of the task store, for one key prefix and bucket count."""

    def __init__(self, redis_client: Any, prefix: str, buckets: int):
        self.redis = redis_client
        self.prefix = prefix
        self.buckets = buckets
        self.keys = [BucketKeys(prefix, b) for b in range(buckets)]
        self._add_heads: dict[tuple[int, bool], resp.Head] = {}

    def keys_for(self, member: str) -> BucketKeys:
        return self.keys[bucket_of(member, self.buckets)]

    # -- producers -------------------------------------------------------------------
    def add_args(self, tasks: Iterable[tuple[Task, str, int]]) -> list[Any]:
        """Flatten (task, mode, value_ms) triples into add.lua's per-task ARGV (a recurring
        task's mode gets a '*': it goes in the `recurring` index too)."""
        args: list[Any] = []
        for task, mode, value in tasks:
            args += [task.key, task.spec_json(), task.priority, mode + "*" if task.recurring else mode, value]
        return args

    def add_call(self, keys: BucketKeys, tasks: list[tuple[Task, str, int]], nx: bool) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of one add.lua call writing `tasks` of one bucket."""
        return [keys.delayed], [keys.tag, int(nx), keys.wake_channel, *self.add_args(tasks)]

    def add_packed(self, keys: BucketKeys, tasks: list[tuple[Task, str, int]], nx: bool) -> bytes:
        """add_call as one packed EVALSHA (the part that is the same for every call of a bucket
        is packed once)."""
        head = self._add_heads.get((keys.bucket, nx))
        if head is None:
            head = self._add_heads[keys.bucket, nx] = SCRIPTS["add"].head(*self.add_call(keys, [], nx))
        return head.pack(self.add_args(tasks))

    def add(self, keys: BucketKeys, tasks: list[tuple[Task, str, int]], nx: bool, held: Any = None) -> Any:
        """Write tasks of one bucket in one script call; returns 1/0 per task. `held`: a
        delayd.store.held.HeldConnection to send it on instead of the store's client."""
        if held is not None:
            return SCRIPTS["add"].request(held, self.add_packed(keys, tasks, nx))
        return SCRIPTS["add"](self.redis, *self.add_call(keys, tasks, nx))

    def delete_steps(self, member: str, hard: bool, retention_ms: int) -> Steps[bool]:
        keys = self.keys_for(member)
        return bool((yield ScriptCall(
            SCRIPTS["delete"],
            [keys.task(member), keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"), keys.done("deleted"),
             keys.quarantine, keys.counts, keys.paused, keys.recurring],
            [wire(member), int(hard), retention_ms],
        )))

    def retry_call(self, member: str) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of retry.lua for `member`."""
        keys = self.keys_for(member)
        return ([keys.task(member), keys.delayed, keys.done("failed"), keys.counts, keys.quarantine],
                [wire(member), keys.wake_channel])

    def retry_steps(self, member: str) -> Steps[int]:
        """1: the failed task runs again now; 0: no such task; -1: it is not failed."""
        return int((yield ScriptCall(SCRIPTS["retry"], *self.retry_call(member))))

    def retry_many(self, members: Sequence[str]) -> list[int]:
        """retry_steps' answer for each member, in one pipelined round trip (Script.many)."""
        return [int(code) for code in SCRIPTS["retry"].many(self.redis, [self.retry_call(m) for m in members])]

    def run_now_steps(self, member: str) -> Steps[RunNow]:
        keys = self.keys_for(member)
        code, status = yield ScriptCall(SCRIPTS["run_now"], [keys.task(member), keys.delayed, keys.paused,
                                                             keys.counts], [wire(member), keys.wake_channel])
        return RunNow(int(code), status)

    def pause_steps(self, topic: str) -> Steps[Paused]:
        """Pause `topic`: flag it in every bucket (one generation for all, taken on the first),
        then park the topic's tasks already in the ready lists, PARK_CHUNK entries per call.
        The first bucket's walk also checks that the pause still holds there: if a resume that
        began after it has resumed the topic, that resume may have passed buckets before they
        were flagged, so the pause finishes it (for its own generation and older only)."""
        generation = ""
        for keys in self.keys:
            generation = int((yield ScriptCall(SCRIPTS["pause"], [keys.paused], [topic, generation])))
        parked = 0
        for keys in self.keys:
            for ready in (*keys.ready, *keys.ready_url):
                position = 0
                while position >= 0:
                    moved, position = yield ScriptCall(
                        SCRIPTS["park"], [keys.paused, ready, keys.counts],
                        [keys.task_prefix, topic, generation, position, PARK_CHUNK])
                    parked, position = parked + int(moved), int(position)
                if position == -2:  # resumed here by a later resume
                    if keys is self.keys[0]:
                        yield from self.resume_steps(topic, generation + 1)
                        return Paused(parked, generation, True)
                    break
        return Paused(parked, generation, False)

    def resume_batch_steps(self, bucket: int, topic: str, batch: int = RESUME_BATCH,
                           generation: int | None = None) -> Steps[Resumed]:
        """Move the earliest `batch` parked tasks of `topic` back to wait for their turn, unless a
        pause of `generation` or later holds the bucket (None: a new resume, its generation taken here)."""
        keys = self.keys[bucket]
        moved, left, generation, overtaken = yield ScriptCall(
            SCRIPTS["resume"], [keys.paused, keys.delayed, keys.counts],
            [topic, keys.wake_channel, batch, "" if generation is None else generation])
        return Resumed(int(moved), int(left), int(generation), bool(overtaken))

    def resume_steps(self, topic: str, generation: int | None = None) -> Steps[Resumed]:
        """Resume `topic` in every bucket, a batch per call: the pauses before `generation`
        (None: a new resume, which takes its generation on the first bucket). Stops at a bucket
        that a later pause holds (`overtaken`: the pause wins); `moved` counts the parked tasks
        that went back."""
        moved = 0
        for bucket in range(self.buckets):
            while True:
                step = yield from self.resume_batch_steps(bucket, topic, generation=generation)
                moved, generation = moved + step.moved, step.generation
                if step.overtaken:
                    return Resumed(moved, step.left, generation, True)
                if not step.left:
                    break
        return Resumed(moved, 0, generation or 0, False)

    # -- bucket process --------------------------------------------------------------
    def promote(self, bucket: int, limit: int, retention_ms: int) -> Promoted:
        keys = self.keys[bucket]
        moved, reaped, next_due, next_lease, clock_us, full = SCRIPTS["promote"](
            self.redis,
            [keys.delayed, keys.leases, *keys.ready, keys.done("ok"), keys.done("failed"),
             keys.done("deleted"), keys.quarantine, keys.counts, keys.totals, keys.paused, *keys.ready_url],
            [keys.task_prefix, limit, retention_ms, ready_channel(self.prefix), bucket, keys.window_prefix],
        )
        return Promoted(moved, reaped, next_due, next_lease, clock_us, bool(full))

    # -- queue process ---------------------------------------------------------------
    # (Each transition as a ScriptCall, for the queue's one round trip per turn, and its reply decoded.)
    def claim_call(self, bucket: int, quotas: tuple[int, int, int], n: int, lease_ms: int, retention_ms: int,
                   url: bool = False) -> ScriptCall:
        keys = self.keys[bucket]
        return ScriptCall(SCRIPTS["claim"],
                          [*(keys.ready_url if url else keys.ready), keys.leases, keys.counts, keys.totals,
                           keys.done("failed"), keys.quarantine],
                          [keys.task_prefix, *quotas, n, lease_ms, keys.wake_channel, keys.window_prefix,
                           retention_ms])

    @staticmethod
    def claimed(reply: list[Any]) -> Claimed:
        return Claimed(reply[0], [ClaimedTask._make(reply[i:i + CLAIMED_FIELDS])
                                  for i in range(1, len(reply), CLAIMED_FIELDS)])

    def claim(self, bucket: int, quotas: tuple[int, int, int], n: int, lease_ms: int, retention_ms: int,
              url: bool = False) -> Claimed:
        """Lease up to n ready tasks of a bucket: URL tasks if `url`, else call and push tasks
        (corrupt entries are quarantined by the script)."""
        return self.claimed(self.claim_call(bucket, quotas, n, lease_ms, retention_ms, url).call(self.redis))

    def finish_call(self, bucket: int, results: list[Finish], retention_ms: int, attempts_kept: int = 10) -> ScriptCall:
        keys = self.keys[bucket]
        args: list[Any] = [keys.task_prefix, retention_ms, keys.wake_channel, keys.window_prefix, attempts_kept]
        for entry in results:
            member, claim, outcome, gap_ms, error, next_due, wait_ms, attempt = (
                entry if len(entry) == FINISH_FIELDS else Finish(*entry))
            args += (wire(member), claim, outcome, gap_ms, wire(error), next_due, wait_ms, wire(attempt))
        return ScriptCall(SCRIPTS["finish"], [keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"),
                                              keys.quarantine, keys.counts, keys.totals, keys.recurring], args)

    @staticmethod
    def flags(reply: list[Any]) -> list[bool]:
        """finish's and renew's reply: per run, False where it was fenced off."""
        return [bool(flag) for flag in reply]

    def finish(self, bucket: int, results: list[Finish], retention_ms: int, attempts_kept: int = 10) -> list[bool]:
        """Record outcomes, one Finish (or a tuple of its first fields) per run; a next due time
        (recurring tasks) reschedules the task whatever the outcome but failed, and SCHEDULE_ENDS
        in its place marks a recurring task's last run. False where the run was fenced off."""
        return self.flags(self.finish_call(bucket, results, retention_ms, attempts_kept).call(self.redis))

    def renew_call(self, bucket: int, runs: list[tuple[str, int]], lease_ms: int) -> ScriptCall:
        keys = self.keys[bucket]
        args: list[Any] = [keys.task_prefix, lease_ms]
        for member, claim in runs:
            args += [wire(member), claim]
        return ScriptCall(SCRIPTS["renew"], [keys.leases], args)

    def renew(self, bucket: int, runs: list[tuple[str, int]], lease_ms: int) -> list[bool]:
        """Extend the leases of (member, claim token) runs; False where the run was fenced off."""
        return self.flags(self.renew_call(bucket, runs, lease_ms).call(self.redis))

    # -- the dashboard (reads only) ------------------------------------------------------
    def browse(self, indexes: Sequence[str], order: str, start: tuple[Score, str] | None, topic: str, prefix: str,
               limit: int, budget: int) -> list[Browsed]:
        """Walk each of `indexes` (`delayed`, `leases` or `done:<status>` of a bucket) from after `start`
        in `order` ('asc'/'desc'), keeping members of `topic` whose id starts with `prefix`; each walk
        stops after `limit` matches or `budget` entries examined (see lua/browse.lua). One pipelined
        round trip for all (Script.many)."""
        cursor = (start[0], wire(start[1])) if start else ("", "")  # redis-py sends inf as 'inf'
        args = [order, *cursor, wire(topic), wire(prefix), limit, budget]
        replies = SCRIPTS["browse"].many(self.redis, [([index], args) for index in indexes])
        return [browsed(index, reply) for index, reply in zip(indexes, replies)]


def browsed(index: str, reply: list[Any]) -> Browsed:
    """browse.lua's reply for `index`, decoded."""
    flat, examined, stop_score, stop_member, size, *kind = reply
    matches = [(flat[i], score_of(flat[i + 1])) for i in range(0, len(flat), 2)]
    stop = (score_of(stop_score), stop_member) if stop_member else None
    problem = f"{index} is a {kind[0]}, not a sorted set: it is left as it is for a person to look at" \
        if kind else None
    return Browsed(matches, int(examined), stop, int(size), problem)
