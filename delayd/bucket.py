"""A bucket process: moves due tasks of one bucket to its ready lists, on time.

It sleeps exactly until the bucket's next due time or lease expiry (a timer in
this process, not a Redis blocking timeout) and is woken early by a message on
the bucket's wake channel when an add, a retry or a claim moves that time
earlier. No wait is longer than WAIT_CAP, so a lost message or a dead connection
can never stall promotion for long.
"""
from __future__ import annotations

import logging
import signal
import time

from . import connection
from .config import Config
from .log import event
from .store import Store
from .worker import REDIS_ERRORS, Heartbeat, RedisHealth

log = logging.getLogger("delayd.bucket")
WAIT_CAP = 5.0          # seconds: the longest sleep, whatever the next due time
MIN_BATCH, MAX_BATCH = 100, 1000


class Stop(Exception):
    """Raised by the signal handler to leave any wait at once."""


class BucketWorker:
    def __init__(self, config: Config, bucket: int, heartbeat: Heartbeat):
        self.config = config
        self.bucket = bucket
        self.heartbeat = heartbeat
        self.redis = connection.connect(config.redis_url)
        self.store = Store(self.redis, config.prefix, config.buckets)
        self.health = RedisHealth(log, config.redis_url)
        self.batch = MIN_BATCH
        self.pubsub = None

    def subscribe(self) -> None:
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(self.store.keys[self.bucket].wake_channel)

    def tick(self) -> float:
        """Promote what is due; return how long (s) to sleep before the next tick."""
        while True:
            moved, reaped, next_due, next_lease, now, full = self.store.promote(
                self.bucket, self.batch, self.config.retention_ms)
            if reaped:
                event(log, "leases_lapsed", logging.WARNING, bucket=self.bucket, tasks=reaped)
            if not full:
                break
            self.batch = min(MAX_BATCH, self.batch * 2)  # a backlog: bigger batches, no sleep
            self.heartbeat.beat()
        if moved < self.batch // 4:
            self.batch = max(MIN_BATCH, self.batch // 2)
        wake_at = min((t for t in (next_due, next_lease) if t >= 0), default=None)
        if wake_at is None:
            return WAIT_CAP
        # +1 ms: a member due at T ms is promoted once Redis's clock reads T.
        return min(WAIT_CAP, max(0.0, (wake_at - now + 1) / 1000.0))

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, or until a wake-up message arrives (then drain them all)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.pubsub.get_message(timeout=left) is not None:
                while self.pubsub.get_message(timeout=0) is not None:
                    pass
                return

    def run(self) -> None:
        def stop(signum, frame):
            raise Stop()
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        event(log, "bucket_started", bucket=self.bucket)
        try:
            while True:
                self.heartbeat.beat()
                try:
                    if self.pubsub is None:
                        self.subscribe()
                    sleep = self.tick()
                    self.health.ok()
                    self.wait(sleep)
                except REDIS_ERRORS as exc:
                    self.pubsub = None  # resubscribe on a fresh connection
                    pause = self.health.failed(exc)
                    self.heartbeat.beat()
                    time.sleep(pause)
        except Stop:
            event(log, "bucket_stopped", bucket=self.bucket)


def main(config: Config, bucket: int, heartbeat: Heartbeat) -> None:
    BucketWorker(config, bucket, heartbeat).run()
