"""The Client: add, read, list, delete and retry tasks; read counts.

    from delayd import Client
    c = Client.from_url("redis://:secret@127.0.0.1:6379/0")
    c.add("order:cancel", 42, call="shop.tasks:cancel_order", delay=1800)
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import re
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import redis
from redis.cluster import RedisCluster

from . import config as config_mod
from . import connection, embedded, held, registry, schedule
from . import durable as durable_mod
from . import stats as stats_mod
from .store import SCRIPTS, BucketKeys, Store, StoreError, bucket_of, recorded_buckets
from .task import FINISHED, Task, TaskError, check_topic, module_allowed

TASK_FIELDS = frozenset({"call", "url", "push", "method", "body", "params", "intervals", "persistent",
                         "priority", "callback", "timeout", "every", "cron", "tz"})  # add()'s keywords but delay/at
NEXT_CRON = "next"  # build()'s mode for a cron task whose first due time needs Redis's clock
ADD_BATCH = 200  # tasks per add.lua call (~10 µs of Redis time each): one call stays a few ms


class DelaydError(Exception):
    """Base of delayd's own errors (messages are one line, never with a password)."""


class DurabilityError(DelaydError):
    """durable=True cannot be honoured by this Redis (nothing written), or the wait timed out (written)."""


class RedisUnavailable(DelaydError):
    """Redis cannot be reached or refused us."""


@contextlib.contextmanager
def _translated(client: "Client") -> Iterator[None]:
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {connection.where(client.url)}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise RedisUnavailable(f"Redis at {connection.where(client.url)} refused the credentials") from None
        # OOM (maxmemory), BUSY, MASTERDOWN, a script error…: one line, no traceback.
        raise RedisUnavailable(f"Redis at {connection.where(client.url)} refused the command: "
                               f"{refusal(exc)}") from None
    except redis.exceptions.RedisClusterException as exc:
        raise RedisUnavailable(f"Redis Cluster at {connection.where(client.url)}: {exc}") from None


def refusal(exc: Exception) -> str:
    """Redis's own reason (`OOM command not allowed …`), also out of a script error's wrapping."""
    text = " ".join(str(exc).split())
    inner = re.search(r"-([A-Z]{3,} .*)$", text)  # "Error running script …: @user_script: 12: -OOM …"
    return inner.group(1) if inner else text


def redis_errors(method):
    """Turn redis-py connection errors into RedisUnavailable naming host and port."""
    if inspect.isgeneratorfunction(method):
        # A generator's body runs while it is iterated, not when it is called.
        @functools.wraps(method)
        def gen_wrapper(self: "Client", *args: Any, **kwargs: Any) -> Any:
            with _translated(self):
                yield from method(self, *args, **kwargs)
        return gen_wrapper

    @functools.wraps(method)
    def wrapper(self: "Client", *args: Any, **kwargs: Any) -> Any:
        with _translated(self):
            return method(self, *args, **kwargs)
    return wrapper


def to_ms(at: Any) -> int:
    """An absolute time (Unix seconds, a datetime, or an ISO 8601 string) in ms."""
    if isinstance(at, bool):
        raise TaskError("at must be Unix seconds or an ISO 8601 time")
    if isinstance(at, datetime):
        return int(at.timestamp() * 1000)
    if isinstance(at, (int, float)):
        if not 0 <= at < 1e11:
            raise TaskError(f"at must be Unix seconds, got {at!r}")
        return int(at * 1000)
    if isinstance(at, str):
        try:
            return to_ms(float(at))
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            raise TaskError(f"at must be Unix seconds or an ISO 8601 time, got {at!r}") from None
        if moment.tzinfo is None:
            moment = moment.astimezone()  # a naive time is local time
        return to_ms(moment)
    raise TaskError(f"at must be Unix seconds or an ISO 8601 time, got {at!r}")


class Client:
    """Access to one delayd store (a Redis URL and a key prefix)."""

    durable_timeout = durable_mod.DEFAULT_TIMEOUT  # seconds a durable add waits for WAIT / WAITAOF

    def __init__(self, url: str | None = None, prefix: str | None = None, *,
                 config: config_mod.Config | None = None, allowed_modules: Iterable[str] | None = None):
        cfg = config or config_mod.load()
        self.config = cfg
        self.url = url or cfg.redis_url or embedded.url(cfg.state_dir)
        self.prefix = prefix or cfg.prefix
        if allowed_modules is None and "allowed_modules" in cfg.explicit:
            allowed_modules = cfg.allowed_modules
        self.allowed_modules = tuple(allowed_modules) if allowed_modules is not None else None
        self.redis = connection.connect(self.url)
        self._held = held.held(self.redis)  # for single adds: see delayd/held.py
        self._store: Store | None = None

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None, **kwargs: Any) -> "Client":
        return cls(url, prefix, **kwargs)

    def __repr__(self) -> str:
        return f"Client({connection.redact(self.url)!r}, prefix={self.prefix!r})"

    def close(self) -> None:
        self.redis.close()

    @property
    @redis_errors
    def store(self) -> Store:
        """The store, with the bucket count recorded in Redis (set on first use)."""
        if self._store is None:
            try:
                buckets = recorded_buckets(self.redis, self.prefix, self.config.buckets)
            except StoreError as exc:
                raise DelaydError(str(exc)) from None
            self._store = Store(self.redis, self.prefix, buckets)
        return self._store

    # -- writing ---------------------------------------------------------------------
    def build(self, topic: Any, id: Any, *, delay: float | None = None, at: Any = None,
              **fields: Any) -> tuple[Task, str, int]:
        """Validate one add's arguments: (task, 'delay'|'at', ms). Raises TaskError."""
        unknown = fields.keys() - TASK_FIELDS
        if unknown:
            raise TaskError(f"unknown task field(s): {', '.join(sorted(unknown))}")
        task = Task.new(topic, id, params_limit=self.config.params_limit, **fields)
        if self.allowed_modules is not None:
            for target in (task.call, task.callback):
                if target and not module_allowed(target, self.allowed_modules):
                    raise TaskError(f"{target} is not in the allowed modules "
                                    f"({', '.join(self.allowed_modules) or 'none'}); add its module to "
                                    "allowed_modules or DELAYD_ALLOWED_MODULES")
        if delay is not None and at is not None:
            raise TaskError("give delay or at, not both")
        if at is not None:
            return task, "at", to_ms(at)
        if delay is None and task.cron is not None:
            return task, NEXT_CRON, 0  # the calendar's next time after Redis's now: see add_built
        if delay is None:
            delay = task.every if task.every is not None else task.intervals[0]
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 10 * 365 * 86400:
            raise TaskError(f"delay must be a number of seconds >= 0, got {delay!r}")
        return task, "delay", int(delay * 1000)

    @redis_errors
    def add(self, topic: Any, id: Any, *, nx: bool = False, durable: bool = False, **fields: Any) -> bool:
        """Add (or replace) a task. With nx=True, return False and change nothing if it exists.

        durable=True returns only once the write is on a replica or on disk (see delayd.durable);
        DurabilityError when this Redis cannot confirm that (then nothing is written).
        """
        item = self._first_due([self.build(topic, id, **fields)])[0]
        store = self.store
        if durable:
            wait = self._durable_command()
            return bool(self._add_calls([(store.keys_for(item[0].key), [item])], nx, wait))
        return bool(store.add(store.keys_for(item[0].key), [item], nx, client=self._held)[0])

    @redis_errors
    def add_many(self, items: Iterable[dict[str, Any]], nx: bool = False, durable: bool = False) -> int:
        """Add many tasks (dicts of add()'s keyword arguments) in one round trip per batch.

        Every item is validated before anything is written; returns how many were written.
        durable=True: as for add(), each batch is confirmed on a replica or on disk.
        """
        built: list[tuple[Task, str, int]] = []
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise TaskError(f"item {n}: expected a dict of add() arguments")
            item = dict(item)
            try:
                built.append(self.build(item.pop("topic", None), item.pop("id", None), **item))
            except TaskError as exc:
                raise TaskError(f"item {n}: {exc}") from None
        return self.add_built(built, nx, durable)

    @redis_errors
    def add_built(self, built: list[tuple[Task, str, int]], nx: bool = False, durable: bool = False) -> int:
        """Write tasks already validated by build() (what add_many does after validating)."""
        store = self.store
        built = self._first_due(built)
        wait = self._durable_command() if durable else None
        by_bucket: dict[int, list[tuple[Task, str, int]]] = {}
        for entry in built:
            by_bucket.setdefault(bucket_of(entry[0].key, store.buckets), []).append(entry)
        calls = [(store.keys[b], entries[i:i + ADD_BATCH])
                 for b, entries in by_bucket.items() for i in range(0, len(entries), ADD_BATCH)]
        return self._add_calls(calls, nx, wait)

    def _first_due(self, built: list[tuple[Task, str, int]]) -> list[tuple[Task, str, int]]:
        """Give cron tasks without delay/at their first due time: the calendar's next time
        after Redis's clock (one TIME call for the whole batch), never the host's."""
        if not any(mode == NEXT_CRON for _, mode, _ in built):
            return built
        seconds, micros = self.redis.time()
        now_ms = seconds * 1000 + micros // 1000
        out = []
        for task, mode, value in built:
            if mode == NEXT_CRON:
                due = schedule.next_cron(task.cron, task.tz, now_ms)
                if due is None:
                    raise TaskError(f"{task.key}: cron expression {task.cron!r} has no next time")
                mode, value = "at", due
            out.append((task, mode, value))
        return out

    def _durable_command(self) -> tuple[Any, ...]:
        """How this Redis confirms a write now (WAIT, WAITAOF or nothing needed); DurabilityError if it cannot."""
        if isinstance(self.redis, RedisCluster):
            raise DurabilityError("durable=True is not supported on Redis Cluster; nothing was written")
        info = self.redis.info()
        try:
            appendfsync = self.redis.config_get("appendfsync").get("appendfsync")
        except redis.exceptions.ResponseError:  # CONFIG renamed or refused (managed Redis)
            appendfsync = None
        try:
            return durable_mod.command(info, appendfsync, int(self.durable_timeout * 1000))
        except durable_mod.Unconfirmable as exc:
            raise DurabilityError(f"Redis at {connection.where(self.url)}: {exc}; nothing was written") from None

    def _add_calls(self, calls: list[tuple[BucketKeys, list[tuple[Task, str, int]]]], nx: bool,
                       wait: tuple[Any, ...] | None = None) -> int:
        if isinstance(self.redis, RedisCluster):
            # redis-py's cluster pipeline refuses EVALSHA: one script call per bucket batch.
            return sum(sum(self.store.add(keys, entries, nx)) for keys, entries in calls)
        with held.checked_out(self.redis) as conn:
            # Packed lazily: Redis runs one batch while the next is packed (Script.stream).
            results = SCRIPTS["add"].stream(conn, (self.store.add_call(keys, entries, nx) for keys, entries in calls))
            if wait:  # on the same connection: WAIT/WAITAOF count that connection's writes
                conn.send_command(*wait)
                reply = conn.read_response()
        written = sum(sum(r) for r in results)
        if wait and not durable_mod.confirmed(wait, reply):
            raise DurabilityError(f"{written} task(s) written but not confirmed by {wait[0]} within "
                                  f"{self.durable_timeout:g} s: they may be lost if Redis fails now")
        return written

    @redis_errors
    def delete(self, topic: Any, id: Any, hard: bool = False) -> bool:
        """Mark a task deleted (it never runs again); hard=True removes every trace."""
        return self.store.delete(f"{topic}:{id}", hard, self.config.retention_ms)

    @redis_errors
    def retry(self, topic: Any, id: Any) -> bool:
        """Put a failed task back to run now. Raises TaskError if it is not failed."""
        result = self.store.retry(f"{topic}:{id}")
        if result == -1:
            raise TaskError(f"{topic}:{id} is not failed; only failed tasks can be retried")
        return result == 1

    @redis_errors
    def run_now(self, topic: Any, id: Any) -> bool:
        """Make a delayed task due now (a recurring one then continues on its schedule).

        Returns False if there is no such task; raises TaskError, changing nothing, if it is
        running or finished. A task of a paused topic becomes due now and starts first on resume."""
        answer = self.store.run_now(f"{topic}:{id}")
        if answer.code == -1:
            raise TaskError(f"{topic}:{id} is {answer.status}, not delayed: only a waiting task can be run now "
                            + ("(it is running now)" if answer.status == "running" else
                               "(use retry for a failed task, or add it again)"))
        return answer.code != 0

    @redis_errors
    def pause(self, topic: Any) -> int:
        """Start no task of `topic` until resume() (runs in flight finish); kept in Redis, so it
        holds for every daemon and across restarts. Returns how many ready tasks were set aside."""
        return self.store.pause(check_topic(topic))

    @redis_errors
    def resume(self, topic: Any) -> int:
        """Start the tasks of `topic` again; its due tasks start in due order. Returns how many waited."""
        return self.store.resume(check_topic(topic))

    @redis_errors
    def paused(self) -> list[str]:
        """The topics paused now."""
        return sorted(set().union(*(self.redis.hkeys(keys.paused) for keys in self.store.keys)))

    # -- reading ---------------------------------------------------------------------
    @redis_errors
    def get(self, topic: Any, id: Any) -> Task | None:
        """The task, or None. Raises TaskError if its record in Redis is corrupt."""
        member = f"{topic}:{id}"
        try:
            record = self.redis.hgetall(self.store.keys_for(member).task(member))
        except redis.exceptions.ResponseError:  # WRONGTYPE
            raise TaskError(f"{member}: corrupt record: its key is not a hash") from None
        if not record:
            return None
        try:
            return Task.from_record(member, record)
        except TaskError as exc:
            raise TaskError(f"{member}: corrupt record: {exc}") from None

    def _members(self, keys: BucketKeys, status: str | None) -> Iterator[str]:
        """Members of one bucket with a status (None: all), from the bucket's own indexes."""
        sources: list[tuple[str, str]] = []
        if status in (None, "delayed"):
            sources += [("list", key) for key in keys.ready] + [("zset", keys.delayed)]
            sources += [("zset", keys.parked(topic)) for topic in self.redis.hkeys(keys.paused)]
        if status in (None, "running"):
            sources.append(("zset", keys.leases))
        sources += [("zset", keys.done(s)) for s in FINISHED if status in (None, s)]
        seen: set[str] = set()
        for kind, key in sources:
            for start in itertools.count(0, 500):
                try:
                    if kind == "list":
                        page = self.redis.lrange(key, start, start + 499)
                    else:
                        page = self.redis.zrange(key, start, start + 499)
                except redis.exceptions.ResponseError:  # WRONGTYPE: the scripts set it aside
                    break
                for member in page:
                    if member not in seen:
                        seen.add(member)
                        yield member
                if len(page) < 500:
                    break

    @redis_errors
    def iter_tasks(self, topic: str | None = None, status: str | None = None,
                   progress: Callable[[int, int, int], None] | None = None) -> Iterator[Task]:
        """Every task (of a topic, with a status), bucket by bucket.

        A corrupt record is listed too, as `Task.unreadable`: no target, and a last_error
        that says what is wrong (quarantined ones: the quarantine reason).

        `progress(bucket, buckets, records_read)` is called before each batch of reads."""
        read = 0
        for keys in self.store.keys:
            members = (m for m in self._members(keys, status) if topic is None or m.rpartition(":")[0] == topic)
            while batch := list(itertools.islice(members, 200)):
                if progress:
                    progress(keys.bucket, self.store.buckets, read)
                read += len(batch)
                pipe = self.redis.pipeline(transaction=False)
                for member in batch:
                    pipe.hgetall(keys.task(member))
                for member, record in zip(batch, pipe.execute(raise_on_error=False)):
                    if isinstance(record, redis.exceptions.ResponseError):  # WRONGTYPE
                        task = Task.unreadable(member, {}, "its key is not a hash")
                    elif isinstance(record, Exception):
                        raise record
                    elif not record:
                        continue  # expired or removed since the index was read
                    else:
                        try:
                            task = Task.from_record(member, record)
                        except TaskError as exc:  # shown, with the reason, rather than hidden
                            task = Task.unreadable(member, record, str(exc))
                    if status is None or task.status == status:
                        yield task

    def list(self, topic: str | None = None, status: str | None = None, limit: int = 100,
             offset: int = 0, progress: Callable[[int, int, int], None] | None = None) -> list[Task]:
        """A page of tasks, filtered by topic and status."""
        return list(itertools.islice(self.iter_tasks(topic, status, progress), offset, offset + limit))

    @redis_errors
    def stats(self) -> dict[str, Any]:
        """Counts per status (and ready per priority), oldest due lag, runs and tasks/s over
        the last minute, lateness p50/p99: overall, per topic and per bucket (see delayd.stats)."""
        return stats_mod.collect(self.redis, self.store)

    @redis_errors
    def daemons(self) -> list[dict[str, Any]]:
        """The live daemons on this store (each master refreshes its entry every few seconds):
        id, host, pid, version, started, buckets, queues, concurrency, children, seen_ago."""
        try:
            return registry.live(self.redis, self.prefix)
        except redis.exceptions.ResponseError as exc:  # WRONGTYPE: the next refresh sets it aside
            raise DelaydError(f"the registry of daemons in Redis is corrupt ({exc}); "
                              "a running daemon rewrites it within seconds") from None
