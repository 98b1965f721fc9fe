"""Per-host isolation on the event loop: a cap on requests in flight and a circuit breaker.

A host is scheme://host:port (`delayd.model.origin`). At most `cap` requests to one host are
in flight; further tasks for it wait here, in arrival order, without holding a slot that
another host could use. After `failures` consecutive connection errors or timeouts the
circuit opens: for `cooldown` seconds no request is sent to the host and `acquire`
answers at once with the seconds until the probe. Then one request probes the host
(the others wait for its result): an answer of any kind closes the circuit, another
failure opens it again.

A host with nothing in flight or waiting is kept only for its failures: it is forgotten
(its count back to 0, its circuit closed) once it has had nothing in flight for a
cooldown (counted from the probe time if its circuit is open). At most `keep`
such idle hosts are kept, the least recently used forgotten first, so the table's size
is bounded (hosts in use, fewer than 2 x url_concurrency, plus `keep`) however many
hosts are seen. Everything here runs on the loop's thread.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

KEEP_IDLE = 10_000  # idle hosts kept for their breaker state at most


@dataclass(slots=True)
class _Host:
    in_flight: int = 0
    failures: int = 0          # consecutive connection errors and timeouts
    open_until: float = 0.0    # monotonic time of the probe while the circuit is open, else 0
    probing: bool = False
    waiters: deque | None = None  # (made when a task first waits)
    forget_at: float = 0.0     # while idle (in Hosts.idle): monotonic time it is forgotten, else 0


class Hosts:
    def __init__(self, cap: int, failures: int, cooldown: float, clock: Callable[[], float] = time.monotonic,
                 keep: int = KEEP_IDLE):
        self.cap, self.failures, self.cooldown, self.clock, self.keep = cap, failures, cooldown, clock, keep
        self.hosts: dict[str, _Host] = {}
        self.idle: OrderedDict[str, _Host] = OrderedDict()  # hosts with forget_at set, least recent first
        self.held = 0  # tasks waiting here for a slot (read by the queue's main thread)

    def _free(self, h: _Host) -> bool:
        if h.open_until:  # half-open once the cooldown is over: one probe at a time
            return not h.probing and h.in_flight == 0 and self.clock() >= h.open_until
        return h.in_flight < self.cap

    def _take(self, h: _Host) -> None:
        h.in_flight += 1
        if h.open_until:
            h.probing = True

    async def acquire(self, host: str) -> float | None:
        """Take a slot on `host` (None), or the seconds until its probe when its circuit is open."""
        h = self.hosts.get(host)
        if h is None:
            h = self.hosts[host] = _Host()
        elif h.forget_at:  # idle, kept for its failures
            if self.clock() >= h.forget_at:
                h.failures, h.open_until = 0, 0.0
            elif h.open_until and self.clock() < h.open_until:
                self.idle.move_to_end(host)
                return h.open_until - self.clock()
            del self.idle[host]
            h.forget_at = 0.0
        elif h.open_until and self.clock() < h.open_until:
            return h.open_until - self.clock()
        if not h.waiters and self._free(h):
            self._take(h)
            return None
        waiter = asyncio.get_running_loop().create_future()
        if h.waiters is None:
            h.waiters = deque()
        h.waiters.append(waiter)
        self.held += 1
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result() is None:
                self.release(host, None)  # handed a slot just as it was cancelled
            raise
        finally:
            self.held -= 1
            if h.waiters and waiter in h.waiters:
                h.waiters.remove(waiter)

    def release(self, host: str, reachable: bool | None) -> None:
        """Give back a slot: `reachable` True (the host answered), False (connection error or
        timeout), None (no verdict: the run was cancelled or failed before sending)."""
        h = self.hosts[host]
        h.in_flight -= 1
        if reachable:
            h.failures, h.open_until, h.probing = 0, 0.0, False
        elif reachable is False:
            h.failures += 1
            if h.probing or h.failures >= self.failures:
                self._open(h)
        elif h.probing:
            h.probing = False  # the next task probes instead
        while h.waiters and self._free(h):
            waiter = h.waiters.popleft()
            if not waiter.done():
                self._take(h)
                waiter.set_result(None)
        if not (h.in_flight or h.waiters):
            if h.failures or h.open_until:
                self._idle(host, h)
            else:
                del self.hosts[host]

    def open_for(self, host: str) -> float:
        """Seconds until `host`'s probe while its circuit is open, else 0."""
        h = self.hosts.get(host)
        return max(0.0, h.open_until - self.clock()) if h is not None and h.open_until else 0.0

    def _idle(self, host: str, h: _Host) -> None:
        """Keep `host`, unused now, for its failures until it is forgotten; forget the least
        recently used idle hosts past `keep`, and those whose time came."""
        now = self.clock()
        h.forget_at, h.waiters = max(now, h.open_until) + self.cooldown, None
        self.idle[host] = h
        while self.idle:
            oldest, entry = next(iter(self.idle.items()))
            if len(self.idle) <= self.keep and now < entry.forget_at:
                break
            del self.idle[oldest], self.hosts[oldest]

    def _open(self, h: _Host) -> None:
        h.probing = False
        h.open_until = self.clock() + self.cooldown
        while h.waiters:  # everyone waiting is deferred to the probe time
            waiter = h.waiters.popleft()
            if not waiter.done():
                waiter.set_result(self.cooldown)
