"""Claims: which bucket a queue process asks for ready tasks next, and how many of each priority
(claim.lua pops and starts them in one call); the claimed tasks handed to the pool (call, push) or the
event loop (URL); their lease renewals.
Each method returns script calls, with the function that takes the reply, for the one round
trip of the main thread's turn (QueueWorker.send in loop.py).

Claims take up to the free slots of each kind: URL tasks wait in ready lists of their own,
so a backlog of one kind never holds back the other.

Claiming ahead: a thread whose handler returns would otherwise wait a whole claim round
trip for its next run, and with short handlers (one Redis call) that wait is as long as
the run. So the process claims, beyond `concurrency`, the runs its threads will finish
during one round trip (concurrency x round trip / average handler time, at most
`concurrency`); they wait in the pool for the next free thread. Long handlers get none
ahead (a claimed run never waits long behind them, and other processes can take it); a
run's task timeout counts from the moment a thread takes it.
"""
from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any, Callable

from delayd import tracing
from delayd.log import event
from delayd.model import schedule
from delayd.model.task import Task, TaskError
from delayd.store.replies import Claimed, ClaimedTask, Finish
from delayd.store.steps import ScriptCall
from delayd.workers.queue.state import QueueState, Run

log = logging.getLogger("delayd.queue")


class Claims(QueueState):
    def free_slots(self, url: bool) -> int:
        """Tasks of a kind to take now: URL tasks as the engine has room (Engine.room); call
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

    def timeout_of(self, task: Task) -> float:
        if task.url and task.timeout:
            return min(task.timeout + 1.0, self.config.task_timeout)
        return self.config.task_timeout

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
        """A claim of each kind that has free slots, from its next candidate bucket; a bucket that
        fills every slot asked for is asked again (it may have more), the others are not again
        before they announce ready tasks."""
        calls = []
        for url in () if self.stopping else (False, True):
            candidates = self.candidates[url]
            while (free := self.free_slots(url)) > 0 and candidates and tried[url] < self.config.buckets:
                bucket = next(self.next_bucket)
                tried[url] += 1
                if bucket in candidates:
                    n = min(free, 200)
                    calls.append((self.store.claim_call(bucket, self.shares.quotas((bucket, url), n), n,
                                                        self.config.lease_ms, self.config.retention_ms, url),
                                  functools.partial(self.claim_sent, bucket, url, n, tried)))
                    break
        return calls

    def claim_sent(self, bucket: int, url: bool, n: int, tried: dict[bool, int], reply: Any) -> None:
        """A claim's tasks handed over; a bucket that filled every slot asked for may have more, the others
        wait for a message."""
        claimed = self.store.claimed(reply)
        self.dispatch(bucket, claimed)
        if claimed.popped < n:
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
            run.span = tracing.start_run(task, claimed.now)
            self.in_hand[task.key] = run
            self.watch(run, at + limit)  # (a URL run's deadline counts from its request: later)
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
