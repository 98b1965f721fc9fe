"""The queue process's handler threads (delayd.workers.queue.pool): batched handoff, and its promises —
a slow handler never holds back the runs handed over with it, an abandoned run frees
its place, results come back in batches."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from redis_server import wait_for

from delayd.workers.queue.pool import Pool


@dataclass(eq=False)
class FakeRun:
    task: str
    started: float = 0.0
    taken: bool = False
    returned: bool = False
    abandoned: bool = False


class Harness:
    """A pool whose handlers block until their task's gate opens (tasks not gated return at once),
    with the main thread's part played by `pump` (results, and the stall timer)."""

    def __init__(self, size: int, gated: set[str], barrier: threading.Barrier | None = None):
        self.gates = {task: threading.Event() for task in gated}
        self.barrier = barrier  # tasks named "b…" wait for each other there
        self.started: set[str] = set()
        self.notified: queue.SimpleQueue = queue.SimpleQueue()
        self.results: dict[str, str] = {}
        self.pool = Pool(size, self.execute, lambda: self.notified.put(True))

    def execute(self, run: FakeRun) -> str:
        task = run.task
        self.started.add(task)
        if task in self.gates:
            self.gates[task].wait(30)
        if task.startswith("b") and self.barrier:
            self.barrier.wait(10)  # BrokenBarrierError unless all of them run at the same time
        if task.startswith("io"):
            time.sleep(0.005)  # a handler that waits on I/O
        return f"done {task}"

    def pump(self, stall_timer: bool = True) -> bool:
        """One turn of the main thread: wake threads for stalled runs, collect results."""
        stalled = self.pool.stalled_at()
        if stall_timer and stalled is not None and stalled <= time.monotonic():
            self.pool.wake_stalled(time.monotonic())
        for run, result in self.pool.take_results():
            self.results[run.task] = result
        return True


def test_runs_behind_a_slow_handler_get_threads_of_their_own():
    # A put wakes one thread; the first two runs block, so the others start only because
    # the stall timer gives each a thread.
    tasks = [f"t{i}" for i in range(8)]
    h = Harness(size=len(tasks), gated={"t0", "t1"})
    h.pool.put([FakeRun(t) for t in tasks], time.monotonic())
    wait_for(lambda: h.pump() and set(h.results) == set(tasks) - {"t0", "t1"}, 10,
             message="every run not gated finished while t0 and t1 hang")
    for gate in h.gates.values():
        gate.set()
    wait_for(lambda: h.pump() and set(h.results) == set(tasks), 10, message="the gated runs finished")
    h.pool.stop()


def test_results_come_back_with_one_notice_per_batch():
    h = Harness(size=4, gated={"slow"})
    h.pool.put([FakeRun("slow")], time.monotonic())
    wait_for(lambda: "slow" in h.started, 10, message="slow started")
    h.pool.put([FakeRun(f"q{i}") for i in range(20)], time.monotonic())
    wait_for(lambda: h.pump() and len(h.results) == 20, 10, message="the quick runs finished")
    notices = 0
    while not h.notified.empty():
        notices += h.notified.get()
    assert notices < 20, "results are announced per batch, not per run"
    h.gates["slow"].set()
    h.pool.stop()


def test_an_abandoned_run_frees_its_place_and_its_thread_retires():
    h = Harness(size=1, gated={"hung"})
    hung = FakeRun("hung")
    h.pool.put([hung], time.monotonic())
    wait_for(lambda: hung.taken, 10, message="hung started")
    assert h.pool.abandon(hung) and h.pool.hung == 1
    h.pool.put([FakeRun("next")], time.monotonic())
    wait_for(lambda: h.pump() and "next" in h.results, 10, message="a replacement thread ran the next run")
    h.gates["hung"].set()
    wait_for(lambda: h.pool.hung == 0, 10, message="the abandoned thread retired")
    h.pump()
    assert "hung" not in h.results, "an abandoned run's late result is dropped"
    assert not h.pool.abandon(FakeRun("x", returned=True)), "a run that returned cannot be abandoned"
    h.pool.stop()


def test_a_run_abandoned_before_it_started_never_runs():
    h = Harness(size=1, gated={"first"})
    first, second = FakeRun("first"), FakeRun("second")
    h.pool.put([first, second], time.monotonic())   # one thread: second waits behind first
    wait_for(lambda: first.taken, 10, message="first started")
    assert h.pool.abandon(second) and h.pool.hung == 0, "no thread is stuck in a run not started"
    h.gates["first"].set()
    wait_for(lambda: h.pump() and "first" in h.results, 10, message="first finished")
    assert "second" not in h.started
    h.pool.stop()


def test_io_bound_handlers_of_one_batch_run_side_by_side():
    """A put wakes one thread while handlers are short (they run one after the other on it);
    once handlers take longer than FAN_OUT on average, a put wakes a thread per run. Here
    four runs of one put must all be in their handlers at once to get past a barrier (no
    stall timer is pumped: one thread would leave the other three waiting)."""
    h = Harness(size=4, gated=set(), barrier=threading.Barrier(4))
    h.pool.put([FakeRun(f"io{i}") for i in range(8)], time.monotonic())  # 5 ms each: the average
    wait_for(lambda: h.pump() and len(h.results) == 8, 10, message="the I/O runs finished")
    assert h.pool.handler_time > 0.001
    h.pool.put([FakeRun(f"b{i}") for i in range(4)], time.monotonic())
    wait_for(lambda: h.pump(stall_timer=False) and len(h.results) == 12, 20,
             message="the four runs met at the barrier")
    assert not h.barrier.broken
    h.pool.stop()


def test_a_run_is_timed_from_the_moment_a_thread_takes_it():
    """`started` is set when a thread takes the run, not when it was put (a run claimed
    ahead may wait for a thread): the queue's task timeout counts from it."""
    h = Harness(size=1, gated={"first"})
    first, second = FakeRun("first"), FakeRun("second")
    put_at = time.monotonic()
    h.pool.put([first, second], put_at)
    wait_for(lambda: first.taken, 10, message="first started")
    opened = time.monotonic()
    h.gates["first"].set()
    wait_for(lambda: h.pump() and "second" in h.results, 10, message="second ran")
    assert put_at <= first.started <= opened <= second.started
    h.pool.stop()
