"""Limits per topic in Redis (docs/redis-layout.md, "Limits"): setting or clearing one (limit.lua,
which also tells the buckets holding the topic's tasks), and reading them all with what they hold.
The claim, promote, renew and finish scripts apply them; on Redis Cluster they are not available
(the limit state is in one slot and each of those scripts works in its bucket's)."""
from __future__ import annotations

from typing import Any

import redis

from delayd.model.limit import Limit, decode
from delayd.store.keys import wire
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import Batch, ScriptCall, Steps, command
from delayd.store.transitions import Store

HELD = "throttled"  # the state count of held tasks (`throttled|<topic>` in each bucket's counts)


def write_steps(store: Store, topic: str, value: str) -> Steps[bool]:
    """Set `topic`'s limit to `value` ('N PERIOD_MS K'; '' clears it). True if it had one."""
    call = ScriptCall(SCRIPTS["limit"], store.limit_keys([topic], wakes=True), [wire(topic), value, store.limits])
    return bool((yield call))


def read_steps(store: Store) -> Steps[list[Limit]]:
    """Every limit set, by topic, with the tasks each holds back and its runs in flight (two round
    trips: the limits, then their counts). A limits hash that is not a hash reads as none."""
    lp = store.limits
    if not lp:
        return []
    try:
        stored = yield command("HGETALL", lp + "conf")
    except redis.exceptions.ResponseError:  # WRONGTYPE: the next limit written sets it aside
        return []
    topics = sorted(stored)
    if not topics:
        return []
    fields = [f"{HELD}|{topic}" for topic in topics]
    replies = yield Batch([command("ZCARD", wire(f"{lp}run:{topic}")) for topic in topics]
                          + [command("HMGET", keys.counts, *map(wire, fields)) for keys in store.keys])
    running, held = replies[:len(topics)], replies[len(topics):]
    limits = []
    for i, topic in enumerate(topics):
        count = sum(_int(reply[i]) for reply in held if isinstance(reply, list))
        limit = decode(topic, stored[topic], count, _int(running[i]))
        if limit is not None:
            limits.append(limit)
    return limits


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
