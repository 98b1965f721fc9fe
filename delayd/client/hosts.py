"""Host health, as `delayd hosts` shows it: every URL host (scheme://host:port) delivered to in the
last day, with its deliveries and failures over the last hour, its circuit breaker, since when it
has been failing and its last error.

Queue processes report what they saw at most once a second (lua/hosts.lua), so the figures are those
of every daemon sharing the store, a second or so behind. Reading is one ZREVRANGEBYSCORE of the
index of hosts and one HGETALL per host listed, in one round trip.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import redis

from delayd.store.keys import host_key, hosts_seen_key
from delayd.store.steps import Batch, Steps, command

DAY_MS = 86_400_000
MINUTE_MS = 60_000
HOUR_MINUTES = 60
DEFAULT_LIMIT = 1000


class HostHealth(NamedTuple):
    host: str                     # scheme://host:port
    seen_at: float                # Unix seconds of the last report of a delivery to it
    deliveries: int               # requests sent over the last hour
    failures: int                 # of which did not succeed (error, timeout, non-2xx, `fail`)
    breaker: str                  # "open" (nothing is sent until the probe) or "closed"
    open_until: float | None      # the probe time while open
    failing_since: float | None   # the first failure after its last success; None: its last request succeeded
    last_error: str | None
    error_at: float | None
    ok_at: float | None           # its last success

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def _int(text: Any) -> int:
    return int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else 0


def _seconds(text: Any) -> float | None:
    return _int(text) / 1000 if _int(text) else None


def health(host: str, seen_ms: float, record: dict[str, str], now_ms: int) -> HostHealth:
    """One host's health from its hash (lua/hosts.lua: a ring of minutes, errors, breaker)."""
    current = now_ms // MINUTE_MS
    deliveries = failures = 0
    for slot in range(HOUR_MINUTES):
        minute, _, counts = str(record.get(f"m{slot}", "")).partition(",")
        sent, _, failed = counts.partition(",")
        if current - HOUR_MINUTES < _int(minute) <= current:
            deliveries, failures = deliveries + _int(sent), failures + _int(failed)
    open_until = _int(record.get("open_until"))
    return HostHealth(host, seen_ms / 1000, deliveries, failures, "open" if open_until > now_ms else "closed",
                      open_until / 1000 if open_until > now_ms else None, _seconds(record.get("failing_since")),
                      record.get("error") or None, _seconds(record.get("error_at")), _seconds(record.get("ok_at")))


def hosts_steps(prefix: str, limit: int = DEFAULT_LIMIT) -> Steps[list[HostHealth]]:
    """The hosts seen in the last day (at most `limit`, the most recently seen): failing ones first (the
    longest failing first), then by failures over the last hour."""
    seconds, micros = yield command("TIME")
    now_ms = seconds * 1000 + micros // 1000
    try:
        seen = yield command("ZREVRANGEBYSCORE", hosts_seen_key(prefix), "+inf", now_ms - DAY_MS, "WITHSCORES",
                             "LIMIT", 0, limit, withscores=True)
    except redis.exceptions.ResponseError:  # not a zset: the next report sets it aside
        return []
    replies = yield Batch([command("HGETALL", host_key(prefix, host)) for host, _ in seen])
    found = [health(host, score, reply if isinstance(reply, dict) else {}, now_ms)
             for (host, score), reply in zip(seen, replies)]
    return sorted(found, key=lambda h: (h.failing_since is None, h.failing_since or 0, -h.failures))
