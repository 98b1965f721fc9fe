"""The last hour of runs, minute by minute, for the dashboard's charts.

Every script that records run events also adds them to a per-minute hash
`P{N}:w:m:<minute>` (lua/_counts.lua, flush_stats) that expires after 65 minutes, so the
series is bounded (minutes x topics x events), survives restarts of any process and
sums every daemon on every host. Reading it (Client.last_hour, AsyncClient.last_hour) is one
HGETALL per bucket and minute, all in one round trip.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from delayd.store import stats as stats_mod
from delayd.store.steps import Batch, Steps, command
from delayd.store.transitions import Store

MINUTE_MS = 60_000   # lua/_counts.lua: MINUTE_MS
MINUTES = 60


class Minute(NamedTuple):
    start: float                 # Unix seconds
    events: dict[str, int]       # started, ok, failed, retry, quarantine, lapsed, le:<ms> ... over every topic

    def lateness(self, q: float) -> float | None:
        """The q-quantile of this minute's lateness (seconds; None without runs)."""
        return stats_mod.quantile(self.events, q)


def last_hour_steps(store: Store, minutes: int = MINUTES) -> Steps[list[Minute]]:
    """The run events of each of the last `minutes` minutes (the current one last), summed over topics."""
    seconds, micros = yield command("TIME")
    current = (seconds * 1000 + micros // 1000) // MINUTE_MS
    wanted = [(b, m) for m in range(current - minutes + 1, current + 1) for b in range(store.buckets)]
    replies: list[Any] = yield Batch([command("HGETALL", store.keys[b].minute(m)) for b, m in wanted])
    by_minute = {m: stats_mod.new_events() for m in range(current - minutes + 1, current + 1)}
    for (_, m), reply in zip(wanted, replies):
        if isinstance(reply, Exception):
            continue  # not a hash: the next script that counts into it sets it aside
        for field, value in reply.items():
            name, _, _topic = field.partition("|")
            # A corrupt counter is not counted (a Redis counter has at most 20 characters: int() of
            # thousands of digits raises).
            if value.lstrip("-").isdigit() and value.isascii() and len(value) <= 20:
                stats_mod.add_event(by_minute[m], name, int(value))
    return [Minute(m * MINUTE_MS / 1000, events) for m, events in by_minute.items()]
