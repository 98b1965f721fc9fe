"""Outcomes: what a run's end does to its task (the retry and schedule policy, `verdict`), the
finish entries sent per bucket with the next round trip, and the last ones sent at a graceful stop.

A handler past the task timeout is abandoned: its slot is freed at once and the run is
recorded as a timeout; its thread is replaced, and left to finish (or not) on its own. A URL
run's timeout counts from the moment its request is sent (it may first wait for its host:
delayd.targets.url.hosts).
"""
from __future__ import annotations

import functools
import heapq
import logging
import math
import random
import time
from typing import Any, Callable, NamedTuple

from delayd import tracing
from delayd.log import event
from delayd.model import attempts
from delayd.model.task import RETRY_JITTER, Task
from delayd.store.connection import REDIS_ERRORS
from delayd.store.replies import SCHEDULE_ENDS, Finish
from delayd.store.steps import ScriptCall
from delayd.targets.handlers import Outcome
from delayd.workers.queue.state import QueueState, Run, timeout_at

log = logging.getLogger("delayd.queue")
# Seconds at the end of a graceful stop kept for sending the outcomes in hand (at most
# a third of graceful_timeout), so that they are sent before the master's SIGKILL.
FINAL_FLUSH = 3.0
HUNG_PER_SLOT = 4  # abandoned handlers still running, per concurrency slot, before the process gives up


class Verdict(NamedTuple):
    kind: str        # ok, retry, failed, defer
    gap_ms: int      # a retry of `intervals`: from the due time to the next run
    error: str
    next_due: Any    # a recurring task's next due time (ms), SCHEDULE_ENDS after its last run, or ''
    wait: float      # seconds from the run's end before the next run (backoff, Retry-After)


def verdict(task: Task, outcome: Outcome, callback_error: str, retry_max_delay: float) -> Verdict:
    """What a run's outcome does to its task: run again (when, by its schedule, backoff or
    intervals), or end ok or failed."""
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
        delay = task.retry_delay(retry_max_delay, random.random() * RETRY_JITTER)
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
    return Verdict(kind, gap_ms, error, next_due, wait)


class Outcomes(QueueState):
    def settle(self, run: Run, outcome: Outcome, callback_error: str = "") -> None:
        """Turn a run's outcome into a finish entry (sent with the next batch)."""
        del self.in_hand[run.task.key]
        task = run.task
        kind, gap_ms, error, next_due, wait = verdict(task, outcome, callback_error, self.config.retry_max_delay)
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
        if run.span is not None:
            tracing.end_run(run.span, kind, error)
        self.finished.setdefault(run.bucket, []).append((run, Finish(
            task.key, task.claim, kind, gap_ms, error, next_due, wait_ms, attempt)))

    def watch(self, run: Run, at: float) -> None:
        """Look at `run`'s deadline at `at` (monotonic), no later than the deadline itself. A settled
        run's entry stays until its time (next_check): past twice the runs in hand, the heap is rebuilt
        with the live entries alone (a run has one), so it holds neither memory nor old runs for long."""
        checks = self.checks
        if len(checks) > 2 * len(self.in_hand) + 64:
            checks[:] = [entry for entry in checks if self.in_hand.get(entry[2].task.key) is entry[2]]
            heapq.heapify(checks)
        heapq.heappush(checks, (at, next(self.check_order), run))

    def next_check(self) -> float:
        """When abandon_overdue next has a run to look at (math.inf: none); runs settled meanwhile are
        dropped here, so a turn costs a few heap operations, not a pass over every run in hand."""
        checks = self.checks
        while checks and self.in_hand.get(checks[0][2].task.key) is not checks[0][2]:
            heapq.heappop(checks)
        return checks[0][0] if checks else math.inf

    def abandon_overdue(self) -> None:
        now = time.monotonic()
        while self.next_check() <= now:
            run = heapq.heappop(self.checks)[2]
            if run.deadline > now:  # its deadline moved on (a URL request sent later, a run that waited)
                self.watch(run, now + run.limit if run.deadline == math.inf else run.deadline)
            elif run.url:  # settled when the engine says it ended (its result, if it came first)
                run.deadline = math.inf
                self.engine.cancel(run)
            elif (deadline := timeout_at(run, now)) > now:
                run.deadline = deadline  # claimed ahead: it waited for a thread
                self.watch(run, deadline)
            elif self.pool.abandon(run):
                self.settle(run, self.abandoned(run))
        if self.pool.hung > HUNG_PER_SLOT * self.config.concurrency and not self.stopping:
            event(log, "too_many_hung_handlers", logging.ERROR, hung=self.pool.hung)
            self.handle(("stop", None))  # exit so the master starts a fresh process

    @staticmethod
    def abandoned(run: Run) -> Outcome:
        return Outcome("retry", f"timeout: still running after {run.limit:g} s, abandoned")

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

    def finish_calls(self) -> list[tuple[ScriptCall, Callable[[Any], None]]]:
        return [(self.store.finish_call(bucket, [entry for _, entry in entries], self.config.retention_ms,
                                        self.config.attempts_kept),
                 functools.partial(self.finish_sent, bucket, len(entries)))
                for bucket, entries in self.finished.items()]

    def finish_sent(self, bucket: int, sent: int, reply: Any) -> None:
        """The first `sent` entries of `bucket` are finished. Entries put there since the call was made (a
        claim answered in the same round trip sets a record aside, or defers a cron task's first run) stay
        for the next round trip: dropping them left such a task leased, to run again at its lease's end."""
        entries = self.finished.pop(bucket)
        if len(entries) > sent:
            self.finished[bucket] = entries[sent:]
        for (run, entry), ok in zip(entries[:sent], self.store.flags(reply)):
            if not ok:
                event(log, "result_fenced", logging.WARNING, task=run.task.key, run=run.task.runs,
                      outcome=entry.outcome, reason="lease lapsed, task replaced or deleted")

    def flush_finished(self) -> None:
        self.send(self.finish_calls())
