"""The key layout of a store: buckets, their hash-tagged keys, channels and the meta hash.

Every key of one bucket shares the hash tag `{N}`, so every script touches one Redis Cluster
slot. See docs/redis-layout.md for the whole layout.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis

from delayd.config import MAX_BUCKETS
from delayd.model.task import is_utf8
from delayd.store.steps import Steps, command
from delayd.store.transport import Transport

PRIORITIES = (3, 2, 1)


def bucket_of(member: str, buckets: int) -> int:
    """The bucket of a task key: a stable hash of `topic:id`, not of the topic alone.

    (surrogateescape: a name read from Redis that is not UTF-8 hashes as its bytes.)"""
    return zlib.crc32(member.encode("utf-8", "surrogateescape")) % buckets


def topic_of(member: str) -> str:
    """The topic of a member as the scripts read it (`topic_of` in lua/_lib.lua): up to its last `:`,
    or the whole member when it has none."""
    return member.rpartition(":")[0] if ":" in member else member


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

    @cached_property
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

    @cached_property
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
    def aside(self) -> str:
        """Set of the topics whose `paused:<topic>` holds URL tasks set aside because their host is
        disabled (claim.lua); enabling a host resumes those topics (Store.enable_steps)."""
        return self.tag + "aside"

    @property
    def limited(self) -> str:
        """Zset topic -> when its limit may next let some of the bucket's held tasks start;
        `limited:<topic>` is the zset of those held tasks (member -> due time)."""
        return self.tag + "limited"

    def held(self, topic: str) -> str | bytes:
        """Zset member -> due time of the topic's tasks its limit holds back (a topic read from
        `limited` may not be UTF-8: sent back as its own bytes)."""
        return wire(f"{self.limited}:{topic}")

    @property
    def corrupt(self) -> str:
        """Hash of the bucket's keys found of the wrong type and set aside (lua/_lib.lua, set_aside):
        `<key>` -> its DUMP, `<key>|why` -> when and why; the last 16 kept."""
        return self.tag + "corrupt"

    @property
    def counts(self) -> str:
        """Hash `<state>|<topic>` -> tasks in that state (kept in step by every script)."""
        return self.tag + "counts"

    @property
    def totals(self) -> str:
        """Hash `<event>|<topic>` -> runs by outcome, starts, lateness buckets, since the start."""
        return self.tag + "totals"

    @cached_property
    def window_prefix(self) -> str:
        return self.tag + "w:"

    def window(self, window: int) -> str:
        """`P{N}:w:<n>`: the same events as totals for the 10-second window n (Unix ms // 10000; expires)."""
        return f"{self.window_prefix}{window}"

    def minute(self, minute: int) -> str:
        """`P{N}:w:m:<minute>`: run events of that minute (Unix ms // 60000), for the dashboard's
        charts (lua/_counts.lua, flush_stats; expires after 65 minutes)."""
        return f"{self.window_prefix}m:{minute}"

    @property
    def wake_channel(self) -> str:
        """Published to when this bucket's next due time or lease expiry moved earlier."""
        return f"{self.prefix}wake:{self.bucket}"


def ready_channel(prefix: str) -> str:
    """Published to (with the bucket number) when a bucket made tasks ready."""
    return f"{prefix}ready"


def limits_prefix(prefix: str) -> str:
    """`P{limits}:`: the limits set (`conf`), and per topic its rate state (`tat:<topic>`), runs in
    flight (`run:<topic>`) and the buckets holding its tasks (`where:<topic>`), in one slot."""
    return f"{prefix}{{limits}}:"


def hosts_seen_key(prefix: str) -> str:
    """Zset origin -> last report (ms) of the URL hosts delivered to in the last day (lua/hosts.lua).
    Every host key shares the tag `{hosts}`: the script that updates them touches one slot."""
    return f"{prefix}{{hosts}}:seen"


def host_key(prefix: str, origin: str) -> str:
    """Hash of one URL host's health (`scheme://host:port`): the last hour by minute, errors, breaker."""
    return f"{prefix}{{hosts}}:h:{origin}"


def hosts_off_key(prefix: str) -> str:
    """Hash origin -> when (ms) of the URL hosts disabled (delayd hosts disable), read by claim.lua."""
    return f"{prefix}{{hosts}}:off"


def hosts_corrupt_key(prefix: str) -> str:
    """The host keys' set-aside hash (as BucketKeys.corrupt, for the `{hosts}` slot)."""
    return f"{prefix}{{hosts}}:corrupt"


def host_events_key(prefix: str) -> str:
    """Hash `disabled`/`enabled` -> how many times a host was (/metrics)."""
    return f"{prefix}{{hosts}}:events"


def meta_key(prefix: str) -> str:
    return f"{prefix}meta"


# The version of the layout in docs/redis-layout.md, kept in the meta hash: any change that a
# delayd of another layout would misread (a key, a field, a format) comes with a new number, so
# that such a delayd refuses the store in one line instead of misreading it or writing into it.
LAYOUT = 1
# The version of the producer protocol in docs/protocol.md (the meta hash's fields a producer
# reads, the producer-facing scripts' KEYS, ARGV and replies, what add.lua refuses), kept in the
# meta hash beside `layout`: a producer written for another version refuses the store in one line.
PROTOCOL = 1


def recorded_buckets(redis_client: Any, prefix: str, default: int) -> int:
    """The bucket count recorded in Redis for `prefix`; records `default` on first use.
    Refuses (StoreError) a store of another layout version."""
    return Transport(redis_client).run(bucket_count(prefix, default))


def bucket_count(prefix: str, default: int) -> Steps[int]:
    """recorded_buckets as steps (see delayd.store.steps): one round trip once the store is in use."""
    key = meta_key(prefix)
    try:
        stored, layout, protocol = yield command("HMGET", key, "buckets", "layout", "protocol")
        _refuse_other_versions(key, layout, protocol, absent_ok=True)  # before writing into another's store
        if stored is None or layout is None or protocol is None:  # first use
            if stored is None:
                yield command("HSETNX", key, "buckets", default)
            if layout is None:
                yield command("HSETNX", key, "layout", LAYOUT)
            yield command("HSETNX", key, "protocol", PROTOCOL)
            stored, layout, protocol = yield command("HMGET", key, "buckets", "layout", "protocol")
    except redis.exceptions.ResponseError:  # WRONGTYPE: not a hash
        raise StoreError(f"{key} in Redis is not a hash; it should hold the bucket count "
                         f"(buckets {default}?)") from None
    _refuse_other_versions(key, layout, protocol, absent_ok=False)
    # (At most MAX_BUCKETS, as the configuration: a huge count would allocate keys for every bucket.)
    count = int(stored) if stored.isascii() and stored.isdigit() and len(stored) <= 5 else 0
    if not 0 < count <= MAX_BUCKETS:
        shown = repr(stored[:40]) + ("..." if len(stored) > 40 else "")
        raise StoreError(f"{key} in Redis holds buckets = {shown}, not a bucket count (1-{MAX_BUCKETS}); "
                         f"set it right (HSET {key} buckets N) before using this store")
    return count


def _refuse_other_versions(key: str, layout: str | None, protocol: str | None, absent_ok: bool) -> None:
    """StoreError when the meta hash names another layout or protocol (a missing one too, unless `absent_ok`)."""
    for field, value, ours in (("layout", layout, LAYOUT), ("protocol", protocol, PROTOCOL)):
        if value != str(ours) and not (absent_ok and value is None):
            shown = repr((value or "")[:40]) + ("..." if len(value or "") > 40 else "")
            raise StoreError(f"{key} in Redis says {field} = {shown}; this delayd reads {field} {ours} (a store "
                             "written by another version of delayd: use that version, or another prefix)")


class StoreError(ValueError):
    """The store's own metadata in Redis is unreadable (one line, for the user)."""
