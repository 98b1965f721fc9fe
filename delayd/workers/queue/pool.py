"""The threads of a queue process that run call and push handlers, and the handoff to them.

Runs and results move in batches and the usual path takes no lock, because waking threads
costs more than a short handler: `put(runs)` wakes one thread for a batch of short handlers,
a thread per run for handlers that wait on I/O (longer than FAN_OUT on average), and an idle
thread for a run stalled behind a slow handler (`wake_stalled`). Results go to one deque
(`take_results`, `notify`). `abandon(run)` (the task timeout) gives up on a run and puts a
new thread in the place of the one stuck in it. Only this module sets a run's `started`,
`taken`, `returned` and `abandoned`; `handler_time` (a moving average) tells the queue how
many runs to claim ahead.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, Callable

STALL = 0.002  # seconds a run may wait for a busy thread before an idle one is woken for it
FAN_OUT = 0.0001  # seconds: handlers longer than this on average (I/O) get a thread each


class Pool:
    def __init__(self, size: int, execute: Callable[[Any], Any], notify: Callable[[], None]):
        self.execute, self.notify = execute, notify
        self.waiting: collections.deque = collections.deque()   # runs not taken yet, oldest first
        self.wakeups: queue.SimpleQueue = queue.SimpleQueue()   # a token (True) wakes one idle thread
        self.watch: collections.deque = collections.deque()     # (when it will have waited STALL, a put's last run)
        self.results: collections.deque = collections.deque()
        self.told = False   # notify() was called since the main thread last took the results
        self.lock = threading.Lock()
        self.live = 0
        self.hung = 0       # abandoned handlers still running
        self.idle = 0       # threads waiting for a token
        self.handler_time: float | None = None  # moving average of a handler's wall time (s)
        for _ in range(size):
            self.add_thread()

    def add_thread(self) -> None:
        with self.lock:
            self.live += 1
        threading.Thread(target=self.loop, daemon=True, name="handler").start()

    def put(self, runs: list[Any], now: float) -> None:
        self.waiting.extend(runs)
        self.watch.append((now + STALL, runs[-1]))
        n = min(len(runs), self.idle) if (self.handler_time or 0) > FAN_OUT else 1
        for _ in range(max(1, n)):
            self.wakeups.put(True)

    def stalled_at(self) -> float | None:
        """When the runs of the oldest put still waiting will have waited STALL (None: none waits)."""
        while self.watch and self.watch[0][1].taken:
            self.watch.popleft()  # every run of that put has a thread
        return self.watch[0][0] if self.watch else None

    def wake_stalled(self, now: float) -> None:
        """Once a put's runs waited STALL: a thread for every run still waiting."""
        if self.stalled_at() is not None and self.watch[0][0] <= now:
            self.watch.clear()
            for _ in range(len(self.waiting)):
                self.wakeups.put(True)

    def take_results(self) -> list[tuple[Any, Any]]:
        self.told = False  # before taking: a result added after this is either taken or told
        results = []
        while self.results:
            results.append(self.results.popleft())
        return results

    def loop(self) -> None:
        while self.wait_for_token():
            while True:
                try:
                    run = self.waiting.popleft()
                except IndexError:
                    break
                with self.lock:
                    if run.abandoned:
                        continue  # given up before it started
                    run.started = time.monotonic()
                    run.taken = True
                result = self.execute(run)
                spent = time.monotonic() - run.started
                self.handler_time = spent if self.handler_time is None else self.handler_time + (
                    spent - self.handler_time) / 8
                with self.lock:
                    if run.abandoned:
                        self.hung -= 1
                        self.live -= 1
                        return  # a replacement thread took this one's place
                    run.returned = True
                self.results.append((run, result))
                if not self.told:
                    self.told = True
                    self.notify()
        with self.lock:
            self.live -= 1

    def wait_for_token(self) -> bool:
        """Sleep until woken; False: the pool stops."""
        with self.lock:
            self.idle += 1
        token = self.wakeups.get()
        with self.lock:
            self.idle -= 1
        return token

    def abandon(self, run: Any) -> bool:
        """Stop waiting for `run` and start a thread in its place; False if its handler just returned."""
        with self.lock:
            if run.returned:
                return False
            run.abandoned = True
            if not run.taken:
                return True  # not started: no thread is stuck in it
            self.hung += 1
        self.add_thread()  # keep `size` threads free for new work
        return True

    def stop(self) -> None:
        """Threads exit once no run waits (those in a handler when it returns)."""
        for _ in range(self.live):
            self.wakeups.put(False)
