"""A queue process: claims ready tasks and runs them, call and push targets up to
`concurrency` at once in a pool of threads (delayd.workers.pool), URL targets up to
`url_concurrency` at once on an event loop (delayd.targets.url.engine).

Claiming ahead: a thread whose handler returns would otherwise wait a whole claim round
trip for its next run, and with short handlers (one Redis call: ~1 ms) that wait is as
long as the run. So the process claims, beyond `concurrency`, the runs its threads will
finish during one round trip (concurrency x round trip / average handler time, at most
`concurrency`); they wait in the pool for the next free thread. Long handlers get none
ahead (a claimed run never waits long behind them, and other processes can take it); a
run's task timeout counts from the moment a thread takes it.

One main thread owns all Redis state changes and batches them: each loop turn sends
its finishes (one call per bucket, every run that ended since the last turn), lease
renewals and claims (up to the free slots of each kind: URL tasks wait in ready lists
of their own, so a backlog of one kind never holds back the other) in one round trip
(delayd.store.link). A handler past the task timeout is abandoned: its
slot is freed at once and the run is recorded as a timeout; its thread is
replaced, and left to finish (or not) on its own. A URL run's timeout counts from
the moment its request is sent (it may first wait for its host: delayd.targets.url.hosts).

Wake-ups: a listener thread is subscribed to the ready channel, on which bucket
processes announce "bucket N has ready tasks"; the pool's results (one event for a
batch of them) and signals arrive on the same event queue, so the main thread
sleeps in one place.
"""
from __future__ import annotations

import functools
import itertools
import logging
import math
import queue as queue_mod
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from delayd import log as log_mod
from delayd.config import Config
from delayd.log import event
from delayd.model import attempts, schedule
from delayd.model.task import RETRY_JITTER, Task, TaskError
from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS
from delayd.store.keys import PRIORITIES, ready_channel
from delayd.store.link import Link
from delayd.store.replies import SCHEDULE_ENDS, Claimed, ClaimedTask, Finish
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.targets.handlers import (
    Outcome,
    Runner,
    TargetUnavailable,
    import_module,
    use_import_path,
)
from delayd.targets.url.engine import Engine
from delayd.workers.pool import Pool
from delayd.workers.process import Heartbeat, RedisHealth, StartupFailure, listen

log = logging.getLogger("delayd.queue")
WAIT_CAP = 5.0  # seconds: the longest sleep; also re-checks every bucket after a quiet spell
# Seconds at the end of a graceful stop kept for sending the outcomes in hand (at most
# a third of graceful_timeout), so that they are sent before the master's SIGKILL.
FINAL_FLUSH = 3.0
HUNG_PER_SLOT = 4  # abandoned handlers still running, per concurrency slot, before the process gives up


def priority_cycle(weights: tuple[int, int, int]) -> list[int]:
    """One round of priorities, smoothly interleaved (nginx's smooth weighted round robin).

    (5, 3, 2) gives 10 picks: 5 of priority 3, 3 of priority 2, 2 of priority 1,
    spread out, so priority 1 gets its share in every round and never starves.
    """
    current = [0, 0, 0]
    total = sum(weights)
    picks = []
    for _ in range(total):
        for i, w in enumerate(weights):
            current[i] += w
        best = max(range(3), key=lambda i: current[i])
        current[best] -= total
        picks.append(PRIORITIES[best])
    return picks


def timeout_at(run: "Run", now: float) -> float:
    """When a call/push run will have had its task timeout in a handler: the timeout counts
    from the moment a thread takes the run (one claimed ahead may wait for a thread first),
    so a run is never given up before its handler had `limit` seconds."""
    return (run.started if run.taken else now) + run.limit


@dataclass(eq=False)
class Run:
    task: Task
    bucket: int
    started: float           # monotonic: taken by a thread (set by the pool), or (URL) the request sent
    deadline: float          # check the timeout then (a URL run: infinite until sent)
    limit: float = 0.0       # the task timeout (seconds) that `deadline` adds to `started`
    claimed: float = 0.0     # monotonic time of the claim …
    claimed_ms: int = 0      # … and Redis's clock then (ms): the attempt's start time from both
    url: bool = False        # on the event loop (URL target), not in the thread pool
    delivery: Any = field(default=None, repr=False)  # (URL) the run on the event loop, set by the engine
    taken: bool = False      # a pool thread started its handler
    abandoned: bool = False  # given up at its timeout; its thread retires when the handler returns
    returned: bool = False   # the handler returned in time; its result is on the way
    result: tuple[Outcome, str] | None = field(default=None, repr=False)


class QueueWorker:
    def __init__(self, config: Config, index: int, heartbeat: Heartbeat):
        self.config = config
        self.index = index
        self.heartbeat = heartbeat
        use_import_path(config.import_path)
        for module in config.preload:  # an import error fails `delayd start`, not the first run
            try:
                import_module(module)
            except TargetUnavailable as exc:
                raise StartupFailure(f"preload: {exc}") from None
        self.redis = connection.connect(config.redis_url)
        self.store = Store(self.redis, config.prefix, config.buckets)
        self.runner = Runner(config, self.redis)
        self.engine = Engine(config, self.runner)  # also runs async def targets for the pool's threads
        self.health = RedisHealth(log, config.redis_url)
        self.events: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.link = Link(self.redis)
        self.pool = Pool(config.concurrency, self.execute, lambda: self.events.put(("results", None)))
        self.in_hand: dict[str, Run] = {}
        self.finished: dict[int, list[tuple[Run, Finish]]] = {}
        # Buckets that may have ready tasks, per kind (False: call/push, True: URL)
        self.candidates: dict[bool, set[int]] = {False: set(range(config.buckets)), True: set(range(config.buckets))}
        self.cycle = itertools.cycle(priority_cycle(tuple(config.priority_weights)))
        self.next_bucket = itertools.cycle(range(config.buckets))
        self.renew_every = config.lease / 3
        self.next_renew = time.monotonic() + self.renew_every
        self.stopping = False
        self.stop_deadline = 0.0
        self.retry_at = 0.0  # after a Redis error, no Redis calls before this time
        self.round_trip = 0.0  # moving average of a turn's Redis round trip (s)

    # -- threads -------------------------------------------------------------------
    def execute(self, task: Task) -> tuple[Outcome, str]:
        """In a pool thread: run the target, then the callback of a success."""
        outcome = self.runner.run(task)
        callback_error = self.runner.run_callback(task) if outcome.kind == "ok" else ""
        return outcome, callback_error

    def completed(self, run: Run, result: tuple[Outcome, str] | None) -> None:
        """On the event loop: a URL run ended; None: it was cancelled (past its deadline)."""
        run.result = result
        self.events.put(("done", run))

    # -- main thread ---------------------------------------------------------------
    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda s, f: self.events.put(("stop", None)))
        signal.signal(signal.SIGINT, lambda s, f: self.events.put(("stop", None)))
        signal.signal(signal.SIGUSR1, lambda s, f: self.events.put(("reopen", None)))
        threading.Thread(target=listen, args=(self.redis, ready_channel(self.config.prefix), self.events, "ready"),
                         daemon=True, name="listener").start()
        event(log, "queue_started", queue=self.index, concurrency=self.config.concurrency)
        while not (self.stopping and not self.in_hand and not self.finished):
            self.heartbeat.beat()
            self.handle(self.next_event())
            while True:  # everything that is already waiting, in the same turn
                try:
                    self.handle(self.events.get_nowait())
                except queue_mod.Empty:
                    break
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
        event(log, "queue_stopped", queue=self.index)

    def next_event(self) -> Any:
        now = time.monotonic()
        timeout = WAIT_CAP
        if any(self.candidates[url] and self.free_slots(url) for url in (False, True)) and not self.stopping:
            timeout = max(0.0, self.retry_at - now)
        if self.in_hand:
            timeout = min(timeout, max(0.0, min(r.deadline for r in self.in_hand.values()) - now),
                          max(0.0, self.next_renew - now))
        if self.finished:
            timeout = min(timeout, max(0.0, self.retry_at - now))
        if self.stopping:
            timeout = min(timeout, max(0.0, self.stop_deadline - now))
        stalled = self.pool.stalled_at()
        if stalled is not None:
            timeout = min(timeout, max(0.0, stalled - now))
        try:
            return self.events.get(timeout=timeout)
        except queue_mod.Empty:  # a quiet spell ("tick": look at every bucket), or a timer of this loop's
            return ("tick", None) if timeout == WAIT_CAP else ("timer", None)

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
        elif kind == "tick":
            for buckets in self.candidates.values():
                buckets.update(range(self.config.buckets))

    def returned(self, run: Run, result: tuple[Outcome, str]) -> None:
        if self.in_hand.get(run.task.key) is run:
            outcome, callback_error = result
            self.settle(run, outcome, callback_error)

    def free_slots(self, url: bool) -> int:
        """Tasks of a kind to claim now: URL tasks as the engine has room (Engine.room); call
        and push tasks up to `concurrency` and the runs claimed ahead (URL runs that ended but
        are not settled yet count as call runs until they are)."""
        if url:
            return self.engine.room()
        return self.config.concurrency + self.ahead() - (len(self.in_hand) - self.engine.in_hand)

    def ahead(self) -> int:
        """Runs to claim beyond `concurrency`: those the threads finish during one round trip."""
        spent = self.pool.handler_time
        if not spent:
            return 0  # nothing known yet
        return min(self.config.concurrency, int(self.config.concurrency * self.round_trip / spent))

    def settle(self, run: Run, outcome: Outcome, callback_error: str = "") -> None:
        """Turn a run's outcome into a finish entry (sent with the next batch)."""
        del self.in_hand[run.task.key]
        task = run.task
        kind, gap_ms, error, next_due, wait = outcome.kind, 0, outcome.error, "", outcome.wait
        if kind == "ok":
            error = callback_error
        if kind == "defer":
            pass  # not run: back to wait for the circuit's probe (finish.lua gives the run back)
        elif task.recurring and task.persistent and kind in ("ok", "retry"):
            # From the claim's `now` (Redis's clock): the next due time of the calendar.
            found = task.next_due_ms(round((task.due_at or task.last_run_at) * 1000),
                                     round(task.last_run_at * 1000))
            if found is not None:
                next_due = found
            elif kind == "retry":
                kind, error = "failed", f"the schedule has no next time; last error: {error}"
        elif kind == "retry" and task.backoff:
            # The retry's delay counts from the run's end: finish.lua puts it at now + wait (gap 0).
            delay = task.retry_delay(self.config.retry_max_delay, random.random() * RETRY_JITTER)
            if delay is None:
                kind, error = "failed", f"no retries left (retries={task.retry_limit}); last error: {error}"
            else:
                wait = max(wait, delay)
        elif kind == "retry":
            gap = task.next_gap()
            if gap is None:
                kind, error = "failed", f"no runs left in intervals; last error: {error}"
            else:
                gap_ms = int(gap * 1000)
        if task.recurring and next_due == "" and kind in ("ok", "failed"):
            next_due = SCHEDULE_ENDS  # its last run: it leaves the index of recurring tasks
        elapsed_ms = round((time.monotonic() - run.started) * 1000, 1)
        event(log, "run", task=task.key, run=task.runs, outcome=kind, ms=elapsed_ms,
              error=error.splitlines()[0][:300] if error else None,
              # A line per successful run only at DEBUG: at thousands of runs/s it would
              # cost a third of the process's time and gigabytes of log a day.
              level=logging.DEBUG if kind in ("ok", "defer") else
              logging.INFO if kind == "retry" and outcome.asked else logging.WARNING)
        attempt = "" if kind == "defer" or not self.config.attempts_kept else attempts.encode(
            task.runs, run.claimed_ms + round((run.started - run.claimed) * 1000), elapsed_ms, kind, outcome.status,
            error or outcome.answer)
        wait_ms = math.ceil(wait * 1000) if wait else 0  # (up, never earlier)
        self.finished.setdefault(run.bucket, []).append((run, Finish(
            task.key, task.claim, kind, gap_ms, error, next_due, wait_ms, attempt)))

    def abandon_overdue(self) -> None:
        now = time.monotonic()
        for run in [r for r in self.in_hand.values() if r.deadline <= now]:
            if run.url:  # settled when the engine says it ended (its result, if it came first)
                run.deadline = math.inf
                self.engine.cancel(run)
            elif (deadline := timeout_at(run, now)) > now:
                run.deadline = deadline  # claimed ahead: it waited for a thread
            elif self.pool.abandon(run):
                self.settle(run, self.abandoned(run))
        if self.pool.hung > HUNG_PER_SLOT * self.config.concurrency and not self.stopping:
            event(log, "too_many_hung_handlers", logging.ERROR, hung=self.pool.hung)
            self.handle(("stop", None))  # exit so the master starts a fresh process

    @staticmethod
    def abandoned(run: Run) -> Outcome:
        return Outcome("retry", f"timeout: still running after {run.limit:g} s, abandoned")

    def timeout_of(self, task: Task) -> float:
        if task.url and task.timeout:
            return min(task.timeout + 1.0, self.config.task_timeout)
        return self.config.task_timeout

    def final_flush(self) -> float:
        return min(FINAL_FLUSH, self.config.graceful_timeout / 3)

    def unsent(self) -> int:
        return sum(len(entries) for entries in self.finished.values())

    def send_last_outcomes(self) -> None:
        """At the stop deadline: send the outcomes in hand, retrying for up to final_flush() seconds.

        (Runs whose handlers are still going are left to their leases: they run again.)
        """
        give_up = time.monotonic() + self.final_flush()
        while self.finished:
            self.heartbeat.beat()
            try:
                self.flush_finished()
                self.health.ok()
                return
            except REDIS_ERRORS as exc:
                pause = self.health.failed(exc)
            left = give_up - time.monotonic()
            if left <= 0:
                event(log, "outcomes_unsent", logging.ERROR, runs=self.unsent(),
                      reason="Redis refused them until the stop deadline; these runs will run again")
                return
            time.sleep(min(pause, left, 0.5))

    def sync(self) -> None:
        """All Redis work of one turn: finishes, lease renewals, claims, in one round trip
        (delayd.store.link); more claims follow only while a bucket fills every free slot."""
        try:
            calls = self.finish_calls()
            if self.in_hand and time.monotonic() >= self.next_renew:
                calls += self.renew_calls()
            tried = {False: 0, True: 0}
            while True:
                if not self.stopping:
                    calls += self.claim_calls(tried)
                if not calls:
                    break
                self.send(calls)
                calls = []
            self.health.ok()
        except REDIS_ERRORS as exc:
            self.retry_at = time.monotonic() + self.health.failed(exc)

    def send(self, calls: list[tuple[ScriptCall, Callable[[Any], None]]]) -> None:
        """Run script calls in one round trip, each reply handed to its call's function.
        Raises the first error, once the replies before it were handled."""
        replies: list[Any] = []
        began = time.monotonic()
        try:
            self.link.run([call for call, _ in calls], replies)
            self.round_trip += (time.monotonic() - began - self.round_trip) / 8
        finally:
            for (_, then), reply in zip(calls, replies):
                if isinstance(reply, Exception):
                    break
                then(reply)

    def finish_calls(self) -> list[tuple[ScriptCall, Callable[[Any], None]]]:
        return [(self.store.finish_call(bucket, [entry for _, entry in entries], self.config.retention_ms,
                                        self.config.attempts_kept), functools.partial(self.finish_sent, bucket))
                for bucket, entries in self.finished.items()]

    def finish_sent(self, bucket: int, reply: Any) -> None:
        for (run, entry), ok in zip(self.finished.pop(bucket), self.store.flags(reply)):
            if not ok:
                event(log, "result_fenced", logging.WARNING, task=run.task.key, run=run.task.runs,
                      outcome=entry.outcome, reason="lease lapsed, task replaced or deleted")

    def flush_finished(self) -> None:
        self.send(self.finish_calls())

    def renew_calls(self) -> list[tuple[ScriptCall, Callable[[Any], None]]]:
        by_bucket: dict[int, list[Run]] = {}
        for run in self.in_hand.values():
            by_bucket.setdefault(run.bucket, []).append(run)
        self.next_renew = time.monotonic() + self.renew_every
        return [(self.store.renew_call(bucket, [(r.task.key, r.task.claim) for r in runs], self.config.lease_ms),
                 functools.partial(self.renew_sent, runs)) for bucket, runs in by_bucket.items()]

    def renew_sent(self, runs: list[Run], reply: Any) -> None:
        for run, ok in zip(runs, self.store.flags(reply)):
            if not ok:
                event(log, "lease_lost", logging.WARNING, task=run.task.key, run=run.task.runs)

    def claim_calls(self, tried: dict[bool, int]) -> list[tuple[ScriptCall, Callable[[Any], None]]]:
        """A claim of each kind that has free slots, from its next candidate bucket; a bucket
        that fills every slot asked for is asked again (it may have more), the others are
        not again before they announce ready tasks."""
        calls = []
        for url in (False, True):
            candidates = self.candidates[url]
            while (free := self.free_slots(url)) > 0 and candidates and tried[url] < self.config.buckets:
                bucket = next(self.next_bucket)
                tried[url] += 1
                if bucket in candidates:
                    n = min(free, 200)
                    quotas = [0, 0, 0]
                    for priority in itertools.islice(self.cycle, n):
                        quotas[PRIORITIES.index(priority)] += 1
                    calls.append((self.store.claim_call(bucket, tuple(quotas), n, self.config.lease_ms,
                                                        self.config.retention_ms, url),
                                  functools.partial(self.claim_sent, bucket, url, n, tried)))
                    break
        return calls

    def claim_sent(self, bucket: int, url: bool, n: int, tried: dict[bool, int], reply: Any) -> None:
        claimed = self.store.claimed(reply)
        self.dispatch(bucket, claimed)
        if len(claimed.tasks) < n:
            self.candidates[url].discard(bucket)
        else:
            tried[url] -= 1  # this bucket may have more: stay on it

    def dispatch(self, bucket: int, claimed: Claimed) -> None:
        """Hand the claimed tasks to the pool or the event loop; a record that does not parse
        is quarantined."""
        at = time.monotonic()
        urls: list[Run] = []
        handed: list[Run] = []
        for row in claimed.tasks:
            try:
                task = row.task(claimed.now, self.config.retries)
            except TaskError as exc:
                topic, _, id = row.member.rpartition(":")
                self.finished.setdefault(bucket, []).append(
                    (Run(Task(topic=topic, id=id, claim=row.claim), bucket, 0, 0),
                     Finish(row.member, row.claim, "quarantine", 0, str(exc))))
                event(log, "quarantined", logging.ERROR, task=row.member, run=row.runs, reason=str(exc))
                continue
            if row.first and task.cron is not None and self.resolved_first(bucket, row, task, claimed.now):
                continue
            limit = self.timeout_of(task)
            url = bool(task.url)
            run = Run(task, bucket, at, math.inf if url else at + limit, limit, at, claimed.now, url)
            self.in_hand[task.key] = run
            if url:
                urls.append(run)
            else:
                handed.append(run)
        if handed:
            self.pool.put(handed, at)
        if urls:
            self.engine.start(urls, self.completed)  # one wake-up of the event loop per claim

    def resolved_first(self, bucket: int, row: ClaimedTask, task: Task, now_ms: int) -> bool:
        """A cron task added without a first due time (docs/protocol.md: add.lua's mode next*, for
        producers without a cron implementation) gets the calendar's next time after it was added,
        by the one implementation (delayd.model.schedule), as the Python client gives it at add:
        not run now but deferred to that time (True), unless that time has come (False: it runs)."""
        added = now_ms if task.created_at is None else round(task.created_at * 1000)
        due = schedule.next_cron(task.cron, task.tz, added)
        if due is not None and due <= now_ms:
            return False
        outcome = ("defer", "", due) if due is not None else (
            "quarantine", f"cron expression {task.cron!r} has no next time", "")
        self.finished.setdefault(bucket, []).append(
            (Run(task, bucket, 0, 0), Finish(row.member, row.claim, outcome[0], 0, outcome[1], outcome[2], 0, "")))
        event(log, "first_due", logging.DEBUG, task=row.member, due=due)
        return True


def main(config: Config, index: int, heartbeat: Heartbeat) -> None:
    QueueWorker(config, index, heartbeat).run()
