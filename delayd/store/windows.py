"""The run-event windows a script call declares in its KEYS (issue 30: every key a script touches is
passed in KEYS, as Dragonfly and some Cluster proxies require).

Scripts count run events into the 10-second window `P{N}:w:<n>` and the minute `P{N}:w:m:<m>` of
Redis's clock (lua/_counts.lua, flush_stats); stats.lua reads the last windows. The caller names those
keys before the call from its estimate of Redis's clock: the local clock plus the offset learnt from
the last reply that carried Redis's clock (promote, claim, stats), or from one TIME. It declares the
window of `estimate - width / 2` and the next one, so the script's own window is among them while the
estimate is within half a window (5 s; 30 s for minutes); further off (a first call on a host whose
clock is skewed), the script counts into the nearer one, and its reply corrects the estimate.
"""
from __future__ import annotations

import time

from delayd.store.keys import BucketKeys

WINDOW_MS = 10_000  # as lua/_counts.lua
MINUTE_MS = 60_000


class RedisClock:
    """An estimate of Redis's clock: the local clock plus the offset seen in the last reply."""

    def __init__(self) -> None:
        self.offset_ms: float | None = None  # None: nothing seen yet (the local clock is taken as is)

    def observe(self, redis_ms: float) -> None:
        """Redis's clock (ms) as a reply just carried it."""
        self.offset_ms = redis_ms - time.time() * 1000

    def now_ms(self) -> float:
        return time.time() * 1000 + (self.offset_ms or 0.0)


def _first(now_ms: float, width: int) -> int:
    """The first of the two windows of `width` declared around `now_ms`."""
    return int((now_ms - width // 2) // width)


def run_windows(keys: BucketKeys, clock: RedisClock) -> list[str]:
    """The windows a script that counts run events declares (flush_stats): n, n + 1, minute m, m + 1."""
    now = clock.now_ms()
    window, minute = _first(now, WINDOW_MS), _first(now, MINUTE_MS)
    return [keys.window(window), keys.window(window + 1), keys.minute(minute), keys.minute(minute + 1)]


def recent_windows(keys: BucketKeys, clock: RedisClock, count: int) -> list[str]:
    """The windows stats.lua may read: the last `count` by the estimate, and the next one."""
    last = _first(clock.now_ms(), WINDOW_MS)
    return [keys.window(n) for n in range(last - count + 1, last + 2)]
