"""Host health as one queue process saw it since its last report: per scheme+host+port, the
requests sent, how many failed, the last outcome and error, and whether the host's circuit is open.

The engine's loop records each delivery (`record`); the queue's main thread takes the tallies
(`take`) at most once a second and folds them into Redis with one hosts.lua call
(delayd.store.transitions.Store.hosts_call), where every daemon's reports meet (`delayd hosts`).
So a delivery costs a dict update here; Redis sees one call per second per busy process, whatever
the delivery rate. A failure is any answer but success (an error, a timeout, a non-2xx or `fail`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from delayd.targets.handlers import clip


@dataclass(slots=True)
class Tally:
    deliveries: int = 0
    failures: int = 0
    last_ok: bool = True
    error: str = ""         # the last failure's error
    open_ms: int = 0        # ms the host's circuit stays open from the report (0: closed)


class Health:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tallies: dict[str, Tally] = {}

    def record(self, host: str, ok: bool, error: str, open_s: float) -> None:
        """One request sent to `host` ended (the loop's thread); `open_s`: its circuit's remaining open time."""
        with self.lock:
            tally = self.tallies.get(host)
            if tally is None:
                tally = self.tallies[host] = Tally()
            tally.deliveries += 1
            tally.last_ok = ok
            if not ok:
                tally.failures += 1
                tally.error = clip(error)
            tally.open_ms = int(open_s * 1000)

    def take(self) -> dict[str, Tally]:
        """The tallies since the last take (the queue's main thread)."""
        with self.lock:
            taken, self.tallies = self.tallies, {}
        return taken
