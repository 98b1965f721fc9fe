"""A queue process's loop: it claims ready tasks and runs them, call and push targets up to
`concurrency` at once in a pool of threads (pool.py), URL targets up to `url_concurrency`
at once on an event loop (delayd.targets.url.engine).

One main thread owns all Redis state changes and batches them: each loop turn sends its
finishes (outcomes.py: one call per bucket, every run that ended since the last turn),
lease renewals and claims (claims.py) in one round trip (delayd.store.transport.Link).

Wake-ups: a listener thread is subscribed to the ready channel, on which bucket
processes announce "bucket N has ready tasks"; the pool's results (one event for a batch
of them) and signals arrive on the same event queue, so the main thread sleeps in one place.
"""
from __future__ import annotations

import gc
import itertools
import logging
import queue as queue_mod
import time
from typing import Any, Callable

from delayd import log as log_mod
from delayd import tracing
from delayd.config import Config
from delayd.log import event
from delayd.store.connection import REDIS_ERRORS
from delayd.store.keys import ready_channel
from delayd.store.replies import Finish
from delayd.store.steps import ScriptCall
from delayd.targets.handlers import Outcome, Runner, TargetUnavailable, import_module, use_import_path
from delayd.targets.url.engine import Engine
from delayd.workers.process import ChildProcess, Heartbeat, StartupFailure
from delayd.workers.queue.claims import Claims
from delayd.workers.queue.outcomes import Outcomes
from delayd.workers.queue.pool import Pool
from delayd.workers.queue.shares import Shares
from delayd.workers.queue.state import Run

log = logging.getLogger("delayd.queue")
WAIT_CAP = 5.0  # seconds: the longest sleep, and how often every bucket is looked at again (sweep)
REPORT_EVERY = 1.0  # seconds: at most one host-health report (hosts.lua) per interval, riding a turn's round trip
# The cyclic garbage collector's thresholds in a queue process (Python's: 700, 10, 10). A URL request allocates
# hundreds of objects that live for its second in flight, freed by their reference counts: at 700 the collector
# ran ~500 young and ~50 middle collections in a 10,000-delivery run, ~1/5 of the process's CPU (the profile:
# `git show 8564d90:BENCHMARKS.md`, "The queue process's CPU per URL delivery"); at 50,000 it runs a few. What the
# process holds once started (modules, the engine) is frozen: never traversed again.
GC_THRESHOLDS = (50_000, 20, 10)


class QueueWorker(ChildProcess, Claims, Outcomes):
    def __init__(self, config: Config, index: int, heartbeat: Heartbeat):
        self.index = index
        use_import_path(config.import_path)
        for module in config.preload:  # an import error fails `delayd start`, not the first run
            try:
                import_module(module)
            except TargetUnavailable as exc:
                raise StartupFailure(f"preload: {exc}") from None
        super().__init__(config, heartbeat, log)
        if problem := tracing.setup(config.spans_path):  # OTEL_TRACES_EXPORTER: each run a span (delayd.tracing)
            event(log, "tracing_unavailable", logging.WARNING, reason=problem)
        self.runner = Runner(config, self.store.transport)
        self.engine = Engine(config, self.runner)  # also runs async def targets for the pool's threads
        self.link = self.store.transport.link()
        self.pool = Pool(config.concurrency, self.execute, lambda: self.events.put(("results", None)))
        self.in_hand: dict[str, Run] = {}
        self.checks: list[tuple[float, int, Run]] = []  # (when to look at a run's deadline, order, run): a heap
        self.check_order = itertools.count()
        self.finished: dict[int, list[tuple[Run, Finish]]] = {}
        self.candidates = {False: set(range(config.buckets)), True: set(range(config.buckets))}
        self.shares = Shares(tuple(config.priority_weights))
        self.next_bucket = itertools.cycle(range(config.buckets))
        self.renew_every = config.lease / 3
        self.next_renew = time.monotonic() + self.renew_every
        self.stopping = False
        self.stop_deadline = 0.0
        self.retry_at = 0.0  # after a Redis error, no Redis calls before this time
        self.round_trip = 0.0  # moving average of a turn's Redis round trip (s)
        self.next_sweep = time.monotonic() + WAIT_CAP  # when to look at every bucket again (sweep)
        self.next_report = 0.0  # monotonic time the next host-health report may go
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)

    # -- threads -------------------------------------------------------------------
    def execute(self, run: Run) -> tuple[Outcome, str]:
        """In a pool thread: run the target, then the callback of a success (in the run's span, if traced)."""
        with tracing.as_current(run.span):
            outcome = self.runner.run(run.task)
            callback_error = self.runner.run_callback(run.task) if outcome.kind == "ok" else ""
        return outcome, callback_error

    def completed(self, run: Run, result: tuple[Outcome, str] | None) -> None:
        """On the event loop: a URL run ended; None: it was cancelled (past its deadline)."""
        run.result = result
        self.events.put(("done", run))

    # -- main thread ---------------------------------------------------------------
    def run(self) -> None:
        self.start_listening(ready_channel(self.config.prefix), "ready")
        event(log, "queue_started", queue=self.index, concurrency=self.config.concurrency)
        while not (self.stopping and not self.in_hand and not self.finished):
            self.heartbeat.beat()
            self.handle(self.next_event())
            while True:  # everything that is already waiting, in the same turn
                try:
                    self.handle(self.events.get_nowait())
                except queue_mod.Empty:
                    break
            self.sweep()
            self.abandon_overdue()
            self.pool.wake_stalled(time.monotonic())
            if time.monotonic() >= self.retry_at:
                self.sync()
            if self.stopping and time.monotonic() > self.stop_deadline:
                event(log, "stop_timeout", logging.WARNING, in_hand=len(self.in_hand), unsent=self.unsent())
                self.send_last_outcomes()
                break
        self.pool.stop()
        self.engine.close()
        tracing.shutdown()
        event(log, "queue_stopped", queue=self.index)

    def sweep(self) -> None:
        """Every WAIT_CAP s, whatever else happens, look at every bucket again: a lost ready message (pub/sub
        is fire-and-forget) must not leave a bucket's ready tasks waiting while messages of other buckets
        and results keep the loop busy (issue 41: it looked only after WAIT_CAP s without any event)."""
        now = time.monotonic()
        if now >= self.next_sweep:
            self.next_sweep = now + WAIT_CAP
            for buckets in self.candidates.values():
                buckets.update(range(self.config.buckets))

    def next_event(self) -> Any:
        now = time.monotonic()
        timeout = max(0.0, self.next_sweep - now)
        if any(self.candidates[url] and self.free_slots(url) for url in (False, True)) and not self.stopping:
            timeout = min(timeout, max(0.0, self.retry_at - now))
        if self.in_hand:
            timeout = min(timeout, max(0.0, self.next_check() - now), max(0.0, self.next_renew - now))
        if self.finished:
            timeout = min(timeout, max(0.0, self.retry_at - now))
        if self.stopping:
            timeout = min(timeout, max(0.0, self.stop_deadline - now))
        stalled = self.pool.stalled_at()
        if stalled is not None:
            timeout = min(timeout, max(0.0, stalled - now))
        try:
            return self.events.get(timeout=timeout)
        except queue_mod.Empty:  # a timer of this loop's (the sweep's among them)
            return ("timer", None)

    def handle(self, item: tuple[str, Any]) -> None:
        kind, value = item
        if kind == "ready":  # "N": bucket N has call/push tasks ready, "uN": URL tasks
            text = str(value or "")
            url = text.startswith("u")
            bucket = int(text[url:]) if text[url:].isdigit() else None
            for buckets in ((self.candidates[url],) if bucket is not None else self.candidates.values()):
                if bucket is None or bucket >= self.config.buckets:
                    buckets.update(range(self.config.buckets))
                else:
                    buckets.add(bucket)
        elif kind == "done":  # a URL run
            self.returned(value, value.result or (self.abandoned(value), ""))  # None: it was cancelled
        elif kind == "results":  # the pool's
            for run, result in self.pool.take_results():
                self.returned(run, result)
        elif kind == "stop" and not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.config.graceful_timeout - self.final_flush()
            event(log, "queue_stopping", queue=self.index, in_hand=len(self.in_hand))
        elif kind == "reopen":
            log_mod.reopen()

    def returned(self, run: Run, result: tuple[Outcome, str]) -> None:
        if self.in_hand.get(run.task.key) is run:
            outcome, callback_error = result
            self.settle(run, outcome, callback_error)

    def sync(self) -> None:
        """All Redis work of one turn in one round trip (delayd.store.transport.Link): finishes, lease
        renewals and claims (claims.py). More rounds follow only while a bucket fills every free slot."""
        try:
            calls = self.finish_calls() + self.host_report()
            if self.in_hand and time.monotonic() >= self.next_renew:
                calls += self.renew_calls()
            tried = {False: 0, True: 0}
            calls += self.claim_calls(tried)
            while calls:
                self.send(calls)
                calls = self.claim_calls(tried)
            self.health.ok()
        except REDIS_ERRORS as exc:
            self.retry_at = time.monotonic() + self.health.failed(exc)

    def host_report(self) -> list[tuple[ScriptCall, Callable[[Any], None]]]:
        """The URL deliveries' per-host tallies since the last report, as one hosts.lua call, at most
        once per REPORT_EVERY (a quiet spell's tick sends what is left)."""
        if time.monotonic() < self.next_report:
            return []
        tallies = self.engine.health.take()
        if not tallies:
            return []
        self.next_report = time.monotonic() + REPORT_EVERY
        return [(self.store.hosts_call(tallies, int(self.config.url_disable_after * 1000)), lambda reply: None)]

    def send(self, calls: list[tuple[ScriptCall, Callable[[Any], None]]]) -> None:
        """Run script calls in one round trip, each reply handed to its call's function.
        Raises the first error, once every other reply read was handled: a call after the one that
        failed ran in Redis too (a claim that started tasks), so its reply must not be dropped
        (issue 41: its tasks stayed leased and unrun until the lease lapsed)."""
        replies: list[Any] = []
        began = time.monotonic()
        try:
            self.link.run([call for call, _ in calls], replies)
            self.round_trip += (time.monotonic() - began - self.round_trip) / 8
        finally:
            for (_, then), reply in zip(calls, replies):
                if not isinstance(reply, Exception):
                    then(reply)


def main(config: Config, index: int, heartbeat: Heartbeat) -> None:
    QueueWorker(config, index, heartbeat).run()
