"""Host health, as `delayd hosts` shows it: every URL host (scheme://host:port) delivered to in the
last day, disabled, or with tasks waiting for it, with its deliveries and failures over the last hour, its
circuit breaker, since when it has been failing, its last error and how many of its URL tasks are still to
be delivered.

Queue processes report what they saw at most once a second (lua/hosts.lua), so the figures are those
of every daemon sharing the store, a second or so behind. The tasks waiting are counted by the scripts as
they move (`host|<origin>` in each bucket's counts, docs/redis-layout.md "Hosts"). Reading is one
ZREVRANGEBYSCORE of the index of hosts, then one HGETALL per host listed and per bucket's counts, in one
round trip.

Disabling a host (`delayd hosts disable`, HostSwitch) sets its due URL tasks aside as a paused topic's
are (claim.lua), and enabling it brings them back in due order (Store.enable_steps). A HOST is an
origin `scheme://host[:port]` (default ports made explicit), or a bare `host[:port]` meaning both its
http and https origins (on ports 80 and 443 unless a port is given).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import redis

from delayd.client.errors import DelaydError
from delayd.model.origin import origins
from delayd.store.keys import host_key, hosts_off_key, hosts_seen_key
from delayd.store.stats import HOST, host_counts, scanned_steps
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store

ON_CLUSTER = ("hosts cannot be disabled on Redis Cluster: claims read the disabled hosts from another slot "
              "than their bucket's (docs/redis-layout.md, \"Hosts\")")

DAY_MS = 86_400_000
MINUTE_MS = 60_000
HOUR_MINUTES = 60
DEFAULT_LIMIT = 1000


class HostHealth(NamedTuple):
    host: str                     # scheme://host:port
    seen_at: float | None         # Unix seconds of the last report of a delivery to it; None: none in the last day
    deliveries: int               # requests sent over the last hour
    failures: int                 # of which did not succeed (error, timeout, non-2xx, `fail`)
    breaker: str                  # "open" (nothing is sent until the probe) or "closed"
    open_until: float | None      # the probe time while open
    failing_since: float | None   # the first failure after its last success; None: its last request succeeded
    last_error: str | None
    error_at: float | None
    ok_at: float | None           # its last success
    disabled_at: float | None = None  # when it was disabled (delayd hosts disable); None: enabled
    tasks_waiting: int = 0        # its URL tasks still to be delivered (delayed, ready, running, set aside)

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    @property
    def delivered(self) -> bool:
        """Whether a delivery to it was reported in the last day (a host disabled before any was not)."""
        return self.failing_since is not None or self.ok_at is not None


def _int(text: Any) -> int:
    return int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else 0


def _seconds(text: Any) -> float | None:
    return _int(text) / 1000 if _int(text) else None


def health(host: str, seen_ms: float, record: dict[str, str], now_ms: int, disabled_ms: Any = None,
           waiting: int = 0) -> HostHealth:
    """One host's health from its hash (lua/hosts.lua: a ring of minutes, errors, breaker)."""
    current = now_ms // MINUTE_MS
    deliveries = failures = 0
    for slot in range(HOUR_MINUTES):
        minute, _, counts = str(record.get(f"m{slot}", "")).partition(",")
        sent, _, failed = counts.partition(",")
        if current - HOUR_MINUTES < _int(minute) <= current:
            deliveries, failures = deliveries + _int(sent), failures + _int(failed)
    open_until = _int(record.get("open_until"))
    breaker = "open" if open_until > now_ms else "closed"
    return HostHealth(host, seen_ms / 1000 if seen_ms else None, deliveries, failures, breaker,
                      open_until / 1000 if open_until > now_ms else None, _seconds(record.get("failing_since")),
                      record.get("error") or None, _seconds(record.get("error_at")), _seconds(record.get("ok_at")),
                      _seconds(disabled_ms), waiting)


def hosts_steps(store: Store, limit: int = DEFAULT_LIMIT) -> Steps[list[HostHealth]]:
    """The hosts seen in the last day (at most `limit`, the most recently seen), the disabled ones, and
    those with tasks waiting (the most waiting first, as many as fit in `limit`): failing ones first (the
    longest failing first), then by failures over the last hour, then by tasks waiting."""
    prefix = store.prefix
    seconds, micros = yield command("TIME")
    now_ms = seconds * 1000 + micros // 1000
    try:
        seen = yield command("ZREVRANGEBYSCORE", hosts_seen_key(prefix), "+inf", now_ms - DAY_MS, "WITHSCORES",
                             "LIMIT", 0, limit, withscores=True)
    except redis.exceptions.ResponseError:  # not a zset: the next report sets it aside
        return []
    off, *replies = yield Batch([command("HGETALL", hosts_off_key(prefix)),
                                 *(command("HGETALL", host_key(prefix, host)) for host, _ in seen)])
    off = off if isinstance(off, dict) else {}
    counts = yield from scanned_steps([keys.counts for keys in store.keys], match=HOST + "|*")
    waiting = host_counts(reply for reply in counts if isinstance(reply, dict))
    found = [health(host, score, reply if isinstance(reply, dict) else {}, now_ms, off.get(host), waiting.get(host, 0))
             for (host, score), reply in zip(seen, replies)]
    listed = {host for host, _ in seen}
    found += [health(host, 0, {}, now_ms, at, waiting.get(host, 0)) for host, at in off.items() if host not in listed]
    listed |= set(off)
    unlisted = sorted((host for host in waiting if host not in listed), key=lambda host: (-waiting[host], host))
    found += [health(host, 0, {}, now_ms, None, waiting[host]) for host in unlisted[:max(0, limit - len(found))]]
    return sorted(found, key=lambda h: (h.failing_since is None, h.failing_since or 0, -h.failures, -h.tasks_waiting))


class HostSwitch:
    """Disable and enable URL hosts, for BaseClient (which gives them `store_steps`)."""

    def store_steps(self) -> Steps[Store]:
        raise NotImplementedError

    def disable_host_steps(self, host: Any) -> Steps[list[str]]:
        """Send nothing more to HOST's origins until enable_host: their due URL tasks are kept, set aside
        (not run, not counted as runs); runs in flight finish. Kept in Redis for every daemon. Returns
        the origins that were not disabled yet. TaskError for a bad HOST, DelaydError on Redis Cluster."""
        named = origins(host)
        store = yield from self.store_steps()
        if not store.hosts_off:
            raise DelaydError(ON_CLUSTER)
        return (yield from switched_steps(store, "disable", named))

    def enable_host_steps(self, host: Any) -> Steps[int]:
        """Deliver to HOST's origins again: the tasks set aside for them run, in due order (those of a
        paused topic on its resume). Returns how many tasks went back to wait for their turn."""
        named = origins(host)
        store = yield from self.store_steps()
        yield from switched_steps(store, "enable", named)
        return (yield from store.enable_steps())


def switched_steps(store: Store, action: str, named: list[str]) -> Steps[list[str]]:
    """Disable or enable each origin of `named` (one host_switch.lua call each, so that the answer says
    which changed; every daemon's master logs the change, delayd.daemon.registrar)."""
    changed = []
    for origin in named:
        if (yield from store.switch_hosts_steps(action, [origin])):
            changed.append(origin)
    return changed
