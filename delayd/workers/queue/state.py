"""What a queue process holds: its runs (Run: a claimed task, from its claim until its outcome
is settled) and the state that its loop, claims and outcomes share (QueueState).

The pool (pool.py) sets when a thread took a run and whether its handler returned; the main
thread (loop.py) its deadline; the URL engine its delivery.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from delayd.config import Config
from delayd.model.task import Task
from delayd.store.replies import Finish
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.targets.handlers import Outcome
from delayd.targets.url.engine import Engine
from delayd.workers.process import Heartbeat, RedisHealth
from delayd.workers.queue.pool import Pool
from delayd.workers.queue.shares import Shares


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
    span: Any = field(default=None, repr=False)  # the run's span (delayd.tracing), None with tracing off


def timeout_at(run: Run, now: float) -> float:
    """When a call/push run will have had its task timeout in a handler: the timeout counts
    from the moment a thread takes the run (one claimed ahead may wait for a thread first),
    so a run is never given up before its handler had `limit` seconds."""
    return (run.started if run.taken else now) + run.limit


class QueueState:
    """What claims.py and outcomes.py use of a queue process (set in QueueWorker.__init__)."""
    config: Config
    heartbeat: Heartbeat
    store: Store
    health: RedisHealth
    pool: Pool
    engine: Engine
    in_hand: dict[str, Run]                        # task key -> its run, from the claim until settled
    checks: list[tuple[float, int, Run]]           # a heap: when to look at a run's deadline (outcomes.py)
    check_order: Iterator[int]                     # (ties in `checks`)
    finished: dict[int, list[tuple[Run, Finish]]]  # per bucket: the finish entries not sent yet
    candidates: dict[bool, set[int]]  # buckets that may have ready tasks, per kind (False: call/push, True: URL)
    shares: Shares                    # each claim's quotas per priority (claims.py)
    next_bucket: Iterator[int]        # the buckets in turn
    renew_every: float                # seconds between lease renewals
    next_renew: float
    stopping: bool
    round_trip: float                 # moving average of a turn's Redis round trip (s)
    # the loop's methods (loop.py) that claims and outcomes call
    completed: Callable[[Run, tuple[Outcome, str] | None], None]    # a URL run ended
    watch: Callable[[Run, float], None]                             # look at a run's deadline then (outcomes.py)
    handle: Callable[[tuple[str, Any]], None]                       # an event, as if it came
    send: Callable[[list[tuple[ScriptCall, Callable[[Any], None]]]], None]  # script calls, one round trip
