"""A bucket process: moves due tasks of one bucket to its ready lists, on time.

It sleeps exactly until the bucket's next due time or lease expiry (a timer in
this process, not a Redis blocking timeout) and is woken early by a message on
the bucket's wake channel when an add, a retry or a claim moves that time
earlier. No sleep is longer than WAIT_CAP, so a lost message or a dead
connection can never stall promotion for long. A wake message that names the
task now due first ('<ms> <member>') has its record declared in the next promote
call, which then moves it without a second call (docs/redis-layout.md, "Declared keys").
"""
from __future__ import annotations

import logging
import queue as queue_mod

from delayd import log as log_mod
from delayd.config import Config
from delayd.log import event
from delayd.store.connection import REDIS_ERRORS
from delayd.workers.process import ChildProcess, Heartbeat

log = logging.getLogger("delayd.bucket")
WAIT_CAP = 5.0          # seconds: the longest sleep, whatever the next due time
# Tasks per promote call. A call of 200 takes ~1.4 ms of Redis time (7 µs per
# task), however large the backlog: far enough from SLOWLOG's 10 ms that the
# few-ms stalls a busy 2-core host gives Redis rarely push one over.
MIN_BATCH, MAX_BATCH = 50, 200


def woken_member(message: str | None) -> str | None:
    """The member a wake message names: '<ms> <member>' (add, finish, retry, run_now), or None for
    '<ms>' alone (claim, resume, limits) and for the listener's (re)subscription."""
    return (message or "").partition(" ")[2] or None


class BucketWorker(ChildProcess):
    def __init__(self, config: Config, bucket: int, heartbeat: Heartbeat):
        super().__init__(config, heartbeat, log)
        self.bucket = bucket
        self.batch = MIN_BATCH
        self.woken: dict[str, None] = {}  # the members wake messages named since the last tick

    def tick(self) -> float:
        """Promote what is due; return how long (s) to sleep before the next tick."""
        while True:
            woken, self.woken = list(self.woken)[-MAX_BATCH:], {}
            done = self.store.promote(self.bucket, self.batch, self.config.retention_ms, woken)
            if done.reaped:
                event(log, "leases_lapsed", logging.WARNING, bucket=self.bucket, tasks=done.reaped)
            if not done.full:
                break
            self.batch = min(MAX_BATCH, self.batch * 2)  # a backlog: bigger batches, no sleep
            self.heartbeat.beat()
        if done.moved < self.batch // 4:
            self.batch = max(MIN_BATCH, self.batch // 2)
        wake_at = min((t for t in (done.next_due, done.next_lease) if t >= 0), default=None)
        if wake_at is None:
            return WAIT_CAP
        # The clock was read before the reply left Redis, so after (wake_at ms - clock) Redis's
        # clock reads at least wake_at: the member due then is promotable, not early. (In µs:
        # from the clock's ms, the sleep would end up to a whole ms late.)
        return min(WAIT_CAP, max(0.0, (wake_at * 1000 - done.clock_us) / 1e6))

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds` or until woken; drain what is waiting. False: stop."""
        try:
            items = [self.events.get(timeout=seconds)]
        except queue_mod.Empty:
            return True
        while True:
            try:
                items.append(self.events.get_nowait())
            except queue_mod.Empty:
                break
        if ("reopen", None) in items:
            log_mod.reopen()
        for kind, data in items:
            member = woken_member(data) if kind == "wake" else None
            if member:
                self.woken[member] = None
        return ("stop", None) not in items

    def run(self) -> None:
        self.start_listening(self.store.keys[self.bucket].wake_channel, "wake")
        event(log, "bucket_started", bucket=self.bucket)
        sleep = 0.0
        while self.wait(sleep):
            self.heartbeat.beat()
            try:
                sleep = self.tick()
                self.health.ok()
            except REDIS_ERRORS as exc:
                sleep = self.health.failed(exc)
        event(log, "bucket_stopped", bucket=self.bucket)


def main(config: Config, bucket: int, heartbeat: Heartbeat) -> None:
    BucketWorker(config, bucket, heartbeat).run()
