"""Per-host isolation on the event loop: a cap on requests in flight and a circuit breaker.

A host is scheme://host:port (`request.origin`). At most `cap` requests to one host are
in flight; further tasks for it wait here, in arrival order, without holding a slot that
another host could use. After `failures` consecutive connection errors or timeouts the
circuit opens: for `cooldown` seconds no request is sent to the host and `acquire`
answers at once with the seconds until the probe. Then one request probes the host
(the others wait for its result): an answer of any kind closes the circuit, another
failure opens it again. Everything here runs on the loop's thread.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class _Host:
    in_flight: int = 0
    failures: int = 0          # consecutive connection errors and timeouts
    open_until: float = 0.0    # monotonic time of the probe while the circuit is open, else 0
    probing: bool = False
    waiters: deque = field(default_factory=deque)


class Hosts:
    def __init__(self, cap: int, failures: int, cooldown: float, clock: Callable[[], float] = time.monotonic):
        self.cap, self.failures, self.cooldown, self.clock = cap, failures, cooldown, clock
        self.hosts: dict[str, _Host] = {}
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
        h = self.hosts.setdefault(host, _Host())
        if h.open_until and self.clock() < h.open_until:
            return h.open_until - self.clock()
        if not h.waiters and self._free(h):
            self._take(h)
            return None
        waiter = asyncio.get_running_loop().create_future()
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
            if waiter in h.waiters:
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
        if not (h.in_flight or h.waiters or h.failures or h.open_until):
            del self.hosts[host]  # memory stays bounded by the hosts in use

    def _open(self, h: _Host) -> None:
        h.probing = False
        h.open_until = self.clock() + self.cooldown
        while h.waiters:  # everyone waiting is deferred to the probe time
            waiter = h.waiters.popleft()
            if not waiter.done():
                waiter.set_result(self.cooldown)
