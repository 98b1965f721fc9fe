"""Every read of a delayd store, written once as steps (delayd.store.steps) for Client and
AsyncClient alike: a task, the task list's and the schedules' pages, a task's whole record,
counts, stats, the last hour, paused topics, topics and live daemons. Records are decoded by
delayd.model.record only (through delayd.client.listing.records_steps)."""
from __future__ import annotations

from typing import Any, NamedTuple

import redis

from delayd.client import browse, hosts, schedules, series
from delayd.client.errors import DelaydError
from delayd.model import record as record_mod
from delayd.model.task import Task, TaskError, check_topic
from delayd.store import registry
from delayd.store import stats as stats_mod
from delayd.store.keys import wire
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store


class Inspected(NamedTuple):
    """A task's record as the dashboard's task page shows it."""

    read: record_mod.Read     # the task, or why its record is corrupt
    kind: str | None          # the key's type when it is not a hash
    quarantined: str | None   # the quarantine reason, if any
    bucket: int
    ttl_s: float | None       # seconds until the record expires (a finished task), None: kept


class Reads:
    """The reads of BaseClient (which gives them `store_steps`, `config` and `prefix`)."""

    config: Any
    prefix: str

    def store_steps(self) -> Steps[Store]:
        raise NotImplementedError

    def get_steps(self, topic: Any, id: Any) -> Steps[Task | None]:
        """The task, or None. Raises TaskError if its record in Redis is corrupt."""
        member = f"{topic}:{id}"
        store = yield from self.store_steps()
        try:
            reply = yield command("HGETALL", store.keys_for(member).task(member))
        except redis.exceptions.ResponseError as exc:  # WRONGTYPE
            reply = exc
        read = record_mod.read(member, reply, self.config.retries)
        if read.error is not None:
            raise TaskError(f"{member}: corrupt record: {read.error}")
        return read.task

    def inspect_steps(self, topic: Any, id: Any) -> Steps[Inspected | None]:
        """Task `topic:id`'s record whole (corrupt or not), its quarantine reason and time to live,
        in one round trip (two for a key that is not a hash); None if there is no record."""
        member = f"{topic}:{id}"
        store = yield from self.store_steps()
        keys = store.keys_for(member)
        key = keys.task(member)
        reply, quarantined, ttl_ms = yield Batch([command("HGETALL", key),
                                                  command("HGET", keys.quarantine, wire(member)),
                                                  command("PTTL", key)])
        read = record_mod.read(member, reply, self.config.retries)
        if read.gone:
            return None
        if isinstance(reply, Exception):  # not a hash: say what it is
            return Inspected(read, (yield command("TYPE", key)), None, keys.bucket, None)
        if isinstance(quarantined, Exception):
            quarantined = None  # the quarantine hash is not a hash: the scripts set it aside on their next write
        ttl_s = ttl_ms / 1000 if isinstance(ttl_ms, int) and ttl_ms > 0 else None
        return Inspected(read, None, quarantined, keys.bucket, ttl_s)

    def browse_steps(self, status: str | None = None, topic: str = "", prefix: str = "", cursor: str | None = None,
                     limit: int = 50, budget: int = browse.BUDGET) -> Steps[browse.Page]:
        """One page of the dashboard's task list (delayd.client.browse): tasks with `status` (None: any)
        of `topic` whose id starts with `prefix`, from `cursor`, with bounded work. BadCursor for a
        cursor this server did not give."""
        store = yield from self.store_steps()
        return (yield from browse.page_steps(store, status, topic, prefix, cursor, limit, budget,
                                             self.config.retries))

    def schedules_steps(self, topic: str = "", prefix: str = "", cursor: str | None = None,
                        limit: int = schedules.PAGE_SIZE) -> Steps[schedules.SchedulePage]:
        """One page of recurring tasks in name order (delayd.client.schedules)."""
        store = yield from self.store_steps()
        return (yield from schedules.page_steps(store, topic, prefix, cursor, limit, self.config.retries))

    def last_hour_steps(self, minutes: int = series.MINUTES) -> Steps[list[series.Minute]]:
        """The run events of each of the last `minutes` minutes, summed over topics (delayd.client.series)."""
        store = yield from self.store_steps()
        return (yield from series.last_hour_steps(store, minutes))

    def hosts_steps(self, limit: int = hosts.DEFAULT_LIMIT) -> Steps[list[hosts.HostHealth]]:
        """The URL hosts delivered to in the last day, disabled or with tasks waiting, and their health
        (delayd.client.hosts)."""
        store = yield from self.store_steps()
        return (yield from hosts.hosts_steps(store, limit))

    def paused_steps(self) -> Steps[list[str]]:
        """The topics paused now (a bucket whose flag hash is not a hash counts as none paused)."""
        store = yield from self.store_steps()
        replies = yield from stats_mod.scanned_steps([keys.paused for keys in store.keys])
        return sorted({topic for reply in replies if isinstance(reply, dict) for topic in reply})

    def topics_steps(self) -> Steps[list[str]]:
        """Topics that hold tasks, from the counters' field names (HSCAN pages of every bucket's, a round
        trip a page): what a topic picker needs, without a whole stats() read."""
        store = yield from self.store_steps()
        replies = yield from stats_mod.scanned_steps([keys.counts for keys in store.keys])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return sorted({topic for fields in replies for state, _, topic in (field.partition("|") for field in fields)
                       if topic and state != stats_mod.HOST})

    def stats_steps(self) -> Steps[dict[str, Any]]:
        """Counts per status (and ready per priority), oldest due lag, runs and tasks/s over
        the last minute, lateness p50/p99: overall, per topic and per bucket (see delayd.store.stats)."""
        store = yield from self.store_steps()
        return (yield from stats_mod.collect_steps(store))

    def count_steps(self, topic: Any = None, status: str | None = None) -> Steps[int]:
        """How many tasks (of a topic, with a status) there are, by the counters the scripts keep
        (delayd.store.stats): each bucket's counts hash (a topic's fields, or HSCAN pages of all); never a
        scan of tasks.
        Finished tasks count until their retention ends; a counts hash that is not a hash, none."""
        return (yield from self.counted_steps(None if topic is None else check_topic(topic), status))

    def counted_steps(self, topic: str | None, status: str | None) -> Steps[int]:
        """count_steps for a topic name as stored (not checked)."""
        store = yield from self.store_steps()
        if topic is None:
            replies = yield from stats_mod.scanned_steps([keys.counts for keys in store.keys])
        else:
            fields = [f"{state}|{topic}" for state in stats_mod.STATES]
            values = yield Batch([command("HMGET", keys.counts, *fields) for keys in store.keys])
            replies = [dict(zip(fields, reply)) if isinstance(reply, list) else reply for reply in values]
        return sum(stats_mod.task_count(reply, status) for reply in replies if isinstance(reply, dict))

    def daemons_steps(self) -> Steps[list[dict[str, Any]]]:
        """The live daemons on this store (each master refreshes its entry every few seconds):
        id, host, pid, version, started, buckets, queues, concurrency, children, seen_ago."""
        try:
            return (yield from registry.live_steps(self.prefix))
        except redis.exceptions.ResponseError as exc:  # WRONGTYPE: the next refresh sets it aside
            raise DelaydError(f"the registry of daemons in Redis is corrupt ({exc}); "
                              "a running daemon rewrites it within seconds") from None
