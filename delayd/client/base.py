"""What Client and AsyncClient share: configuration, validation, the key layout and every
transition written once as steps (delayd.store.steps; the reads are delayd.client.reads), which
each flavour runs on its own connection (redis-py or redis.asyncio)."""
from __future__ import annotations

import contextlib
import gc
import logging
import time
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import redis

from delayd import config as config_mod
from delayd import tracing
from delayd.client import browse, replay
from delayd.client.errors import (
    DelaydError,
    DurabilityError,
    Overtaken,
    interrupted,
    refusal,
)
from delayd.client.hosts import HostSwitch
from delayd.client.limits import LimitSteps
from delayd.client.reads import Reads
from delayd.model import schedule
from delayd.model.checks import DECIMAL_RE, checker, remember
from delayd.model.deletion import Deleted
from delayd.model.fields import ARGUMENTS, BY_NAME
from delayd.model.origin import origins
from delayd.model.task import Task, TaskError, check_topic, module_allowed
from delayd.store import connection
from delayd.store import durable as durable_mod
from delayd.store.connection import REDIS_ERRORS
from delayd.store.keys import BucketKeys, StoreError, bucket_count, bucket_of
from delayd.store.steps import EachCall, Steps, Stream, command
from delayd.store.transitions import Store

TASK_FIELDS = frozenset(f.name for f in ARGUMENTS)  # add()'s keywords but topic, id and the options (delay, at, ...)
_SECONDS = {name: checker(BY_NAME[name]) for name in ("delay", "debounce", "max_wait")}  # (seconds >= 0)
NEXT_CRON = "next"  # build()'s mode for a cron task whose first due time needs Redis's clock
DEBOUNCE = "debounce"  # build()'s mode for a debounced add: its due time depends on the stored task
RETRY_BATCH = 200  # failed tasks put back per retry_failed step
ADD_BATCH = 200  # tasks per add.lua call: one call holds Redis for a few ms at most

log = logging.getLogger("delayd.client")

Built = tuple[Task, str, Any]  # build()'s answer: (task, 'delay'|'at'|NEXT_CRON, ms) or (task, DEBOUNCE, 'WAIT:MOST')


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while many tasks are validated and kept: with
    tens of thousands of tasks alive, its collections (which free nothing here) took a large share
    of add_many's time. Reference counting frees the rest as usual; the collector is switched back
    on after, unless the application had it off (Mercurial's `util.nogc` idiom)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def to_ms(at: Any) -> int:
    """An absolute time (Unix seconds, a datetime, or an ISO 8601 string) in ms."""
    if type(at) is float or type(at) is int or isinstance(at, (int, float)) and not isinstance(at, bool):
        if not 0 <= at < 1e11:
            raise TaskError(f"at must be Unix seconds, got {at!r}")
        return int(at * 1000)
    if isinstance(at, bool):
        raise TaskError("at must be Unix seconds or an ISO 8601 time")
    if isinstance(at, datetime):
        return int(at.timestamp() * 1000)
    if isinstance(at, str):
        if DECIMAL_RE.fullmatch(at):  # (float() takes '٣' and '1_0' too)
            return to_ms(float(at))
        try:
            moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            raise TaskError(f"at must be Unix seconds or an ISO 8601 time, got {at!r}") from None
        if moment.tzinfo is None:
            moment = moment.astimezone()  # a naive time is local time
        return to_ms(moment)
    raise TaskError(f"at must be Unix seconds or an ISO 8601 time, got {at!r}")


_warned: set[str] = set()
# (target, allowed modules) pairs found allowed: a web app's adds repeat a few targets, each checked once. Bounded.
_ALLOWED: set[tuple[str, tuple[str, ...]]] = set()


def warn_once(warnings: Iterable[str]) -> None:
    """Log each configuration warning (an unknown DELAYD_* variable: a typo like DELAYD_REDIS_UR would
    silently mean the embedded Redis) once per process, as the daemon logs them at start."""
    for warning in warnings:
        if warning not in _warned:
            _warned.add(warning)
            log.warning("delayd: %s", warning)


class ItemError(TaskError):
    """An item of add_many refused: the message names it (`item 3: ...`), `index` is its position."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"item {index}: {reason}")
        self.index = index


class RetriedFailed(NamedTuple):
    """What one retry_failed step did: see BaseClient.retry_failed_steps."""

    retried: int            # failed tasks put back to run now
    failed_left: int        # failed tasks of the topic still there (by the counters)
    cursor: str | None      # where the next step starts; None: the sweep is over


class BaseClient(Reads, LimitSteps, HostSwitch):
    """Access to one delayd store (a Redis URL and a key prefix), without I/O of its own."""

    redact = staticmethod(connection.redact)  # a URL with its password masked (for the dashboard's pages)

    durable_timeout = durable_mod.DEFAULT_TIMEOUT  # seconds a durable add waits for WAIT / WAITAOF

    def __init__(self, url: str | None = None, prefix: str | None = None, *,
                 config: config_mod.Config | None = None, allowed_modules: Iterable[str] | None = None):
        cfg = config or config_mod.load()
        if config is None:
            warn_once(cfg.warnings)
        self.config = cfg
        self.url = url or cfg.redis_url or connection.embedded_url(cfg.state_dir)
        self.embedded = not (url or cfg.redis_url)  # the daemon's own Redis: up only while the daemon is
        self.prefix = prefix or cfg.prefix
        if allowed_modules is None and "allowed_modules" in cfg.explicit:
            allowed_modules = cfg.allowed_modules
        self.allowed_modules = tuple(allowed_modules) if allowed_modules is not None else None
        # The signing keys' names, when this client knows them (configured): an unknown one is refused at add.
        self.key_names = {name for name, _ in cfg.url_signing_keys} if "url_signing_keys" in cfg.explicit else None
        self.redis = self.connect(self.url)
        self._store: Store | None = None
        self._durable_plan: tuple[float, tuple[Any, Any]] | None = None  # (until, (INFO, appendfsync)): durable_steps

    def connect(self, url: str) -> Any:
        """The Redis client for `url`; sets self.transport (delayd.store.transport) for it."""
        raise NotImplementedError

    @property
    def on_cluster(self) -> bool:
        return self.transport.cluster

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None, **kwargs: Any) -> Any:
        return cls(url, prefix, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({connection.redact(self.url)!r}, prefix={self.prefix!r})"

    # -- validation (pure) -------------------------------------------------------------
    def build(self, /, topic: Any = None, id: Any = None, *, delay: float | None = None, at: Any = None,
              debounce: float | None = None, max_wait: float | None = None, **fields: Any) -> Built:
        """Validate one add's arguments: (task, mode, value), see Built. Raises TaskError."""
        if not TASK_FIELDS.issuperset(fields):
            raise TaskError(f"unknown task field(s): {', '.join(sorted(fields.keys() - TASK_FIELDS))}")
        if "traceparent" not in fields and (context := tracing.current()) is not None:
            fields["traceparent"], fields["tracestate"] = context  # the caller's current span
        task = Task.new(topic, id, params_limit=self.config.params_limit, **fields)
        if self.allowed_modules is not None:
            for target in (task.call, task.callback):
                if target and (type(target) is not str or (target, self.allowed_modules) not in _ALLOWED):
                    if not module_allowed(target, self.allowed_modules):
                        raise TaskError(f"{target} is not in the allowed modules "
                                        f"({', '.join(self.allowed_modules) or 'none'}); add its module to "
                                        "allowed_modules or DELAYD_ALLOWED_MODULES")
                    if type(target) is str:  # (a str subclass could compare equal to another)
                        remember(_ALLOWED, (target, self.allowed_modules))
        if task.signing_key is not None and self.key_names is not None and task.signing_key not in self.key_names:
            raise TaskError(f"signing_key {task.signing_key!r} is not one of url_signing_keys "
                            f"({', '.join(sorted(self.key_names)) or 'none'})")
        if delay is not None and at is not None:
            raise TaskError("give delay or at, not both")
        if debounce is not None or max_wait is not None:
            return task, DEBOUNCE, debounced(task, debounce, max_wait, delay, at)
        if at is not None:
            return task, "at", to_ms(at)
        if delay is None and task.cron is not None:
            return task, NEXT_CRON, 0  # the calendar's next time after Redis's now: see first_due
        if delay is None:
            delay = task.every if task.every is not None else task.intervals[0]
        return task, "delay", int(_SECONDS["delay"](delay) * 1000)

    def build_many(self, items: Iterable[dict[str, Any]]) -> list[Built]:
        """Validate add_many's items (each named by its index in an error), before anything is written."""
        built: list[Built] = []
        build, append = self.build, built.append
        with gc_paused():
            for n, item in enumerate(items):
                if not isinstance(item, dict):
                    raise ItemError(n, "expected a dict of add() arguments")
                try:
                    append(build(**item))  # (a missing topic or id is None: refused as such)
                except TaskError as exc:
                    raise ItemError(n, str(exc)) from None
        return built

    @staticmethod
    def refuse_nx(built: list[Built], nx: bool) -> None:
        """TaskError for nx with a debounced add (a debounce replaces the task it finds)."""
        if nx and any(mode == DEBOUNCE for _, mode, _ in built):
            raise TaskError("give debounce or nx, not both")

    @staticmethod
    def batches(store: Store, built: list[Built]) -> list[tuple[BucketKeys, list[Built]]]:
        """The add.lua calls writing `built`: per bucket, ADD_BATCH tasks per call."""
        by_bucket: dict[int, list[Built]] = {}
        for entry in built:
            by_bucket.setdefault(bucket_of(entry[0].key, store.buckets), []).append(entry)
        return [(store.keys[b], entries[i:i + ADD_BATCH])
                for b, entries in by_bucket.items() for i in range(0, len(entries), ADD_BATCH)]

    def unconfirmed(self, wait: tuple[Any, ...], reply: Any, written: int) -> None:
        """Raise DurabilityError if `reply` to `wait` does not confirm the write."""
        replies = reply.replies if isinstance(reply, EachCall) else [reply]  # Cluster: one per call
        failed = [r for r in replies if isinstance(r, Exception) or not durable_mod.confirmed(wait, r)]
        if wait and failed:
            reply = failed[0]
            answer = f" ({refusal(reply)})" if isinstance(reply, Exception) else ""
            raise DurabilityError(f"{written} task(s) written but not confirmed by {wait[0]} within "
                                  f"{self.durable_timeout:g} s{answer}: they may be lost if Redis fails now",
                                  written=written)

    def write_steps(self, calls: list[tuple[BucketKeys, list[Built]]], nx: bool,
                    wait: tuple[Any, ...] = ()) -> Steps[int]:
        """The add.lua calls of validated tasks, streamed on one connection, then `wait` (durable:
        WAIT/WAITAOF count that connection's writes). Returns how many were written;
        AddInterrupted if a call fails midway."""
        store = self._store
        results: list[Any] = []
        try:
            streamed = yield Stream((store.add_call(keys, entries, nx) for keys, entries in calls),
                                    replies=results, then=wait)
            written = sum(results)
            self.unconfirmed(wait, streamed.then, written)
            return written
        except BaseException as exc:
            self._durable_plan = None  # asked again next time: a failure may mean Redis changed
            if isinstance(exc, REDIS_ERRORS):
                raise interrupted(self, exc, results, sum(len(entries) for _, entries in calls)) from None
            raise

    # -- steps (run by each flavour on its connection) ---------------------------------
    def store_steps(self) -> Steps[Store]:
        """The store, with the bucket count recorded in Redis (set on first use)."""
        if self._store is None:
            try:
                buckets = yield from bucket_count(self.prefix, self.config.buckets)
            except StoreError as exc:
                raise DelaydError(str(exc)) from None
            self._store = Store(self.redis, self.prefix, buckets)
        return self._store

    def prepared_steps(self, built: list[Built]) -> Steps[tuple[Store, list[Built]]]:
        """The store, and `built` with cron tasks without delay/at given their first due time:
        the calendar's next time after Redis's clock (one TIME call for the whole batch)."""
        store = yield from self.store_steps()
        if not any(mode == NEXT_CRON for _, mode, _ in built):
            return store, built
        seconds, micros = yield command("TIME")
        now_ms = seconds * 1000 + micros // 1000
        out = []
        for task, mode, value in built:
            if mode == NEXT_CRON:
                due = schedule.next_cron(task.cron, task.tz, now_ms)
                if due is None:
                    raise TaskError(f"{task.key}: cron expression {task.cron!r} has no next time")
                mode, value = "at", due
            out.append((task, mode, value))
        return store, out

    def durable_steps(self) -> Steps[tuple[Any, ...]]:
        """How this Redis confirms a write now (WAIT, WAITAOF or nothing needed); DurabilityError if it cannot.

        A WAIT or WAITAOF plan is kept for durable_mod.PLAN_TTL seconds (and forgotten after any
        failed write): its own reply says whether the write was confirmed, so a stale plan can
        fail an add (DurabilityError, written but not confirmed) but never claim what is not true.
        `appendfsync always` (nothing to wait for) is asked for at every add."""
        kept = self._durable_plan
        if kept is not None and time.monotonic() < kept[0]:
            info, appendfsync = kept[1]
        else:
            info = yield command("INFO")
            try:
                appendfsync = (yield command("CONFIG GET", "appendfsync")).get("appendfsync")
            except redis.exceptions.ResponseError:  # CONFIG renamed or refused (managed Redis)
                appendfsync = None
            kept = (time.monotonic() + durable_mod.PLAN_TTL, (info, appendfsync))
        self._durable_plan = None
        try:
            wait = durable_mod.command(info, appendfsync, int(self.durable_timeout * 1000))
        except durable_mod.Unconfirmable as exc:
            raise DurabilityError(f"Redis at {connection.where(self.url)}: {exc}; nothing was written") from None
        if wait:  # (a plan whose reply confirms the write: safe to keep)
            self._durable_plan = kept
        return wait

    def delete_steps(self, topic: Any, id: Any, hard: bool = False) -> Steps[Deleted]:
        """Mark a task deleted (it never runs again); hard=True removes every trace.

        True: deleted in time, no run of it starts after this returned. False: there was no such task.
        `delayd.CLAIMED` (false as a bool): deleted, but too late for a run already claimed, whose handler
        may be starting or running; its result changes nothing. `if client.delete(...)` means "cancelled
        in time"."""
        store = yield from self.store_steps()
        return (yield from store.delete_steps(f"{topic}:{id}", hard, self.config.retention_ms))

    def retry_steps(self, topic: Any, id: Any) -> Steps[bool]:
        """Put a failed task back to run now. Raises TaskError if it is not failed."""
        store = yield from self.store_steps()
        result = yield from store.retry_steps(f"{topic}:{id}")
        if result == -1:
            raise TaskError(f"{topic}:{id} is not failed; only failed tasks can be retried")
        return result == 1

    def retry_failed_steps(self, topic: str, cursor: str | None = None,
                           batch: int = RETRY_BATCH) -> Steps[RetriedFailed]:
        """Put back up to `batch` failed tasks of `topic` (a name as stored), newest failure first; the
        caller repeats with the returned `cursor` until it is None. A task that fails again meanwhile
        is newer than the cursor, so one sweep retries each failure once however fast tasks fail. The
        ids come from the failed index (no record is read) and are retried in one round trip.
        BadCursor (delayd.client.browse) for a cursor this server did not give."""
        store = yield from self.store_steps()
        found = yield from browse.find_steps(store, "failed", topic, cursor=cursor, limit=batch)
        members = [member for member, _, _ in found.hits]
        # (0: gone meanwhile; -1: no longer failed, retried or deleted meanwhile)
        codes = (yield from store.retry_many_steps(members)) if members else []
        left = yield from self.counted_steps(topic, "failed")
        return RetriedFailed(codes.count(1), left, found.cursor)

    def run_now_steps(self, topic: Any, id: Any) -> Steps[bool]:
        """Make a delayed task due now (a recurring one then continues on its schedule).

        Returns False if there is no such task; raises TaskError, changing nothing, if it is
        running or finished. A task of a paused topic becomes due now and starts first on resume."""
        store = yield from self.store_steps()
        answer = yield from store.run_now_steps(f"{topic}:{id}")
        if answer.code == -1:
            raise TaskError(f"{topic}:{id} is {answer.status}, not delayed: only a waiting task can be run now "
                            + ("(it is running now)" if answer.status == "running" else
                               "(use retry for a failed task, or add it again)"))
        return answer.code != 0

    def replay_steps(self, host: Any, since: Any, status: str = "failed", dry_run: bool = False,
                     progress: Callable[[replay.Replayed], None] | None = None) -> Steps[replay.Replayed]:
        """Send again the URL tasks of HOST (delayd.model.origin) that finished `status` ('failed', 'ok'
        or 'all') since `since` (Unix seconds, a datetime or an ISO 8601 time), each as a new run of the
        same task (same webhook-id), streaming through them a page at a time (delayd.client.replay);
        `dry_run` counts them only. TaskError for a bad argument."""
        named = origins(host)
        since_ms = to_ms(since)
        if status not in ("failed", "ok", "all"):
            raise TaskError(f"status must be failed, ok or all, got {status!r}")
        store = yield from self.store_steps()
        statuses = ("ok", "failed") if status == "all" else (status,)
        return (yield from replay.replay_steps(store, named, since_ms, statuses, dry_run, progress))

    def pause_steps(self, topic: Any) -> Steps[int]:
        """Start no task of `topic` until resume() (runs in flight finish); kept in Redis, so it
        holds for every daemon and across restarts. Returns how many ready tasks were set aside.
        Raises Overtaken if a resume that began after this pause has undone it."""
        topic = check_topic(topic)
        store = yield from self.store_steps()
        paused = yield from store.pause_steps(topic)
        if paused.overtaken:
            raise Overtaken(f"the pause of {topic} was overtaken by a resume issued meanwhile: "
                            "the topic is not paused")
        return paused.parked

    def resume_steps(self, topic: Any) -> Steps[int]:
        """Start the tasks of `topic` again; its due tasks start in due order. Returns how many waited.
        Raises Overtaken if a pause issued meanwhile holds the topic (the pause wins)."""
        topic = check_topic(topic)
        store = yield from self.store_steps()
        resumed = yield from store.resume_steps(topic)
        if resumed.overtaken:
            raise Overtaken(f"the resume of {topic} was overtaken by a pause issued meanwhile: the topic "
                            f"stays paused ({resumed.moved} due task{'s' if resumed.moved != 1 else ''} "
                            "had gone back; they wait for the next resume)")
        return resumed.moved


def debounced(task: Task, debounce: Any, max_wait: Any, delay: Any, at: Any) -> str:
    """add.lua's value of a debounced add, 'WAIT:MOST' in ms (MOST empty: no max_wait); TaskError
    for what debounce cannot be given with."""
    if debounce is None:
        raise TaskError("max_wait is the most a debounce may put a task off: give debounce too")
    if delay is not None or at is not None:
        raise TaskError("give debounce or delay/at, not both")
    if task.recurring:
        raise TaskError("debounce is for a task without every or cron")
    for name, value in (("debounce", debounce), ("max_wait", max_wait)):
        if value is not None:
            _SECONDS[name](value)
    if max_wait is not None and max_wait < debounce:
        raise TaskError(f"max_wait ({max_wait:g} s) must be at least debounce ({debounce:g} s)")
    return f"{int(debounce * 1000)}:{'' if max_wait is None else int(max_wait * 1000)}"
