"""The chaos run: SPEC promise 1 ("nothing is lost") under SIGKILLs, SIGSTOP and a Redis restart.

Shared by the suite (tests/system/test_chaos.py, a few thousand tasks) and `scripts/chaos`
(50,000 by default). One run:

1. a private redis-server with AOF (appendfsync everysec), and a daemon with
   several bucket and queue processes, a short lease and task timeout;
2. N tasks added with add_many, due over a short window, each running
   `delayd.examples:record` (RPUSH "topic:id:run" to one list); a sample of the
   tasks due late in the window is soft-deleted at once, and counted as
   "deleted before its due time" only if Redis's clock, read after the deletes,
   is still before the task's due time;
3. while the window runs: SIGKILL a random child every few hundred ms, SIGSTOP a
   queue process for longer than the lease and SIGCONT it, restart Redis once
   (SHUTDOWN, which fsyncs the AOF, then start on the same files), SIGKILL the
   master once and start a new daemon on the same state directory;
4. then, with deadlines only: every task not deleted ran at least once and ends
   `ok`; no deleted task ran and each ends `deleted`; every duplicate is a task
   that was in flight at a disruption, and ran again under the same run number
   unless a run of it had ended in a retry (a timeout or an error); nothing is
   left running.

In flight at a disruption means: leased (in a bucket's `leases` set) at a
snapshot taken right after a SIGKILL of a child, right after the SIGSTOP, right
before and right after the Redis restart, and after the master's children died.
A task that ran more than once without being in one of those snapshots is an
"unexplained duplicate", which fails the run as surely as a lost task does.

    python tests/chaos.py --tasks 50000        (or scripts/chaos)
prints one line: tasks=… lost=0 duplicates=… kills=… redis_restarts=… …
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil
import redis

sys.path.insert(0, str(Path(__file__).parent))

import chaos_handlers  # noqa: E402
from daemon_helper import Daemon  # noqa: E402
from redis_server import RedisServer, wait_for  # noqa: E402

from delayd import Client  # noqa: E402

TOPIC = "chaos"
RAN = "chaos:ran"                 # the list the record handler pushes to


@dataclass
class Settings:
    tasks: int = 5000
    window: float = 10.0          # due times are spread over [lead, lead + window] seconds
    lead: float = 0.5
    delete_fraction: float = 0.05  # of the tasks due in the last 40% of the window
    buckets: int = 4
    queues: int = 2
    concurrency: int = 8
    lease: float = 3.0
    task_timeout: float = 2.0
    kill_every: tuple[float, float] = (0.2, 0.6)   # seconds between two child SIGKILLs
    redis_outage: float = 1.0     # seconds Redis stays down during its restart
    drain_timeout: float = 90.0   # after the chaos, seconds allowed for every task to finish
    seed: int | None = None
    limit_rate: str | None = None         # a limit on the topic (delayd limit): N/s ...
    limit_concurrency: int | None = None  # ... and/or runs in flight


@dataclass
class Result:
    settings: Settings
    tasks: int = 0
    deleted: int = 0              # deleted before their due time (must never run)
    delete_unconfirmed: int = 0   # deleted, but their due time had passed: not checked either way
    lost: list[str] = field(default_factory=list)
    ran_deleted: list[str] = field(default_factory=list)
    wrong_status: dict[str, str | None] = field(default_factory=dict)
    duplicates: int = 0           # extra entries in the run list (all runs of a task beyond one)
    duplicate_tasks: int = 0      # tasks with more than one entry
    same_run_duplicates: int = 0  # entries whose topic:id:run appeared before
    unexplained: list[str] = field(default_factory=list)
    # Tasks that ran under more than one run number though no run of theirs ended in a
    # retry: a re-run after a disruption must keep its number (the idempotency key).
    renumbered: list[str] = field(default_factory=list)
    kills: int = 0                # every SIGKILL: children and the master
    queue_kills: int = 0
    master_kills: int = 0
    stops: int = 0                # SIGSTOP/SIGCONT of a queue process past its lease
    stopped_fenced: int = 0       # runs of the stopped process refused after SIGCONT (lease lost / fenced)
    redis_restarts: int = 0
    leftovers: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)   # tracebacks or child_crashed lines of the daemon
    drained: bool = False
    elapsed: float = 0.0

    @property
    def duplicate_bound(self) -> int:
        """A loose upper bound: every disruption can re-run what one queue process had in flight.

        A queue process holds at most `concurrency` runs, and as many again whose
        handler was abandoned (timeout) but may still finish its RPUSH late: a SIGKILL
        of a queue, the SIGSTOP, and the master kill and the Redis restart (which hit
        every queue at once) can each duplicate that much. Bucket kills duplicate nothing.
        """
        s = self.settings
        disruptions = self.queue_kills + self.stops + (self.master_kills + self.redis_restarts) * s.queues
        return disruptions * 2 * s.concurrency

    @property
    def failures(self) -> list[str]:
        problems = []
        if not self.drained:
            problems.append("the daemon did not finish every task before the deadline")
        if self.lost:
            problems.append(f"{len(self.lost)} task(s) lost, e.g. {self.lost[:10]}")
        if self.ran_deleted:
            problems.append(f"{len(self.ran_deleted)} task(s) deleted before their due time ran, "
                            f"e.g. {self.ran_deleted[:10]}")
        if self.wrong_status:
            sample = dict(list(self.wrong_status.items())[:10])
            problems.append(f"{len(self.wrong_status)} task(s) not in their final status, e.g. {sample}")
        if self.unexplained:
            problems.append(f"{len(self.unexplained)} task(s) ran twice without being in flight at a "
                            f"disruption, e.g. {self.unexplained[:10]}")
        if self.renumbered:
            problems.append(f"{len(self.renumbered)} task(s) ran again under a new run number without a retry, "
                            f"e.g. {self.renumbered[:10]}")
        if self.duplicates > self.duplicate_bound:
            problems.append(f"{self.duplicates} duplicates, more than the bound {self.duplicate_bound}")
        if self.leftovers:
            problems.append(f"processes left behind: {self.leftovers}")
        if self.crashes:
            problems.append(f"the daemon crashed or printed a traceback: {self.crashes[:5]}")
        return problems

    def summary(self) -> str:
        return (f"tasks={self.tasks} lost={len(self.lost)} duplicates={self.duplicates} kills={self.kills} "
                f"redis_restarts={self.redis_restarts} deleted={self.deleted} ran_deleted={len(self.ran_deleted)} "
                f"wrong_status={len(self.wrong_status)} duplicate_tasks={self.duplicate_tasks} "
                f"same_run_duplicates={self.same_run_duplicates} unexplained_duplicates={len(self.unexplained)} "
                f"renumbered={len(self.renumbered)} "
                f"duplicate_bound={self.duplicate_bound} queue_kills={self.queue_kills} "
                f"master_kills={self.master_kills} stops={self.stops} stopped_fenced={self.stopped_fenced} "
                f"leftovers={len(self.leftovers)} "
                f"crashes={len(self.crashes)} "
                f"elapsed_s={self.elapsed:.1f}"
                + (f" limit_rate={self.settings.limit_rate} limit_concurrency={self.settings.limit_concurrency}"
                   if self.settings.limit_rate or self.settings.limit_concurrency else ""))


def our_processes(state_dir: Path) -> list[psutil.Process]:
    """Live `delayd:` processes of this run: they hold a file of our state dir open.

    (Their environment cannot tell: setproctitle reuses the memory that
    /proc/PID/environ shows. Every master holds the pidfile lock and the log file
    open, and every child inherits the log file.)
    """
    found = []
    prefix = str(state_dir) + os.sep
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if not " ".join(proc.info["cmdline"] or []).startswith("delayd:"):
                continue
            if any(f.path.startswith(prefix) for f in proc.open_files()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def leased_now(client: Client) -> set[str]:
    """Every task leased right now (in flight at this instant); nothing while Redis is down."""
    found: set[str] = set()
    try:
        pipe = client.redis.pipeline(transaction=False)
        for keys in client.store.keys:
            pipe.zrange(keys.leases, 0, -1)
        for members in pipe.execute():
            found.update(members)
    except redis.exceptions.RedisError:
        pass
    return found


def copy_output(stream, path: Path) -> None:
    """Drain a daemon's stdout/stderr into `path` from a thread (a full pipe would block it)."""
    def copy() -> None:
        with open(path, "w") as sink:
            try:
                for line in stream:
                    sink.write(line)
                    sink.flush()
            except (ValueError, OSError):
                pass  # closed by Daemon.stop()
    threading.Thread(target=copy, daemon=True).start()


def retried_in(logs: list[Path]) -> set[str]:
    """Tasks of which a run ended in a retry, from daemon logs (each such run is logged at INFO)."""
    found = set()
    for path in logs:
        with open(path, errors="replace") as lines:
            for line in lines:
                if " event=run " in line and " outcome=retry " in line:
                    found.add(line.split(" task=", 1)[1].split(" ", 1)[0])
    return found


def crashes_in(paths: list[Path]) -> list[str]:
    """Lines of daemon logs/output that say a child crashed or print a traceback."""
    found = []
    for path in paths:
        with open(path, errors="replace") as lines:
            for line in lines:
                if "child_crashed" in line or "Traceback" in line:
                    found.append(f"{path.name}: {line.strip()[:300]}")
    return found


class Chaos:
    def __init__(self, settings: Settings, workdir: Path, say=None):
        self.s = settings
        self.workdir = Path(workdir)
        self.say = say or (lambda message: None)
        self.rng = random.Random(settings.seed)
        self.result = Result(settings)
        self.server = RedisServer(str(self.workdir / "redis"), aof=True)
        self.state_dir = self.workdir / "state"
        self.daemon: Daemon | None = None
        self.daemons = 0
        self.in_flight: set[str] = set()
        self.stopped_pids: list[int] = []
        self.slow: list[str] = []        # members of the slow tasks added for the SIGSTOP
        self.victim_runs: dict[str, str] = {}  # slow runs the stopped process began: member -> claim
        self.pause = threading.Event()   # never set: Event.wait(t) is the chaos driver's pause
        self.client: Client | None = None

    # -- helpers ---------------------------------------------------------------------
    def new_daemon(self) -> Daemon:
        self.daemons += 1
        s = self.s
        self.daemon = Daemon(self.server.url, self.state_dir, buckets=s.buckets, queues=s.queues,
                             DELAYD_LEASE=str(s.lease), DELAYD_TASK_TIMEOUT=str(s.task_timeout),
                             DELAYD_CONCURRENCY=str(s.concurrency), DELAYD_LOG_LEVEL="INFO",
                             DELAYD_ALLOWED_MODULES="delayd.examples,chaos_handlers",
                             DELAYD_LOG_FILE=str(self.state_dir / f"delayd-{self.daemons}.log"))
        self.daemon.start(wait=False)  # self.daemon is set first: shutdown() stops it even if start fails
        out = self.state_dir / f"daemon-{self.daemons}.out"
        copy_output(self.daemon.proc.stdout, out)
        expected = s.buckets + s.queues
        wait_for(lambda: len(self.daemon.children()) == expected and self.daemon.ready(), 30,
                 message="daemon children up")
        return self.daemon

    def snapshot(self) -> None:
        """Remember every task leased right now (in flight)."""
        self.in_flight.update(leased_now(self.client))

    def live_children(self, exclude: set[int | None]) -> list[psutil.Process]:
        return [c for c in self.daemon.children() if c.pid not in exclude]

    # -- the run ---------------------------------------------------------------------
    def run(self) -> Result:
        started = time.monotonic()
        try:
            self.server.start()
            self.client = Client.from_url(self.server.url)
            if self.s.limit_rate or self.s.limit_concurrency:
                self.client.set_limit(TOPIC, rate=self.s.limit_rate, concurrency=self.s.limit_concurrency)
            self.daemon = self.new_daemon()
            deleted, unconfirmed = self.add_tasks()
            self.say(f"added {self.s.tasks} tasks, deleted {len(deleted)} before their due time")
            self.disrupt()
            self.say(f"chaos over: {self.result.kills} kills; waiting for the daemon to finish every task")
            self.result.drained = self.drain(deleted)
            self.check(deleted, unconfirmed)
        finally:
            self.shutdown()
            self.result.elapsed = time.monotonic() - started
        return self.result

    def add_tasks(self) -> tuple[set[str], set[str]]:
        s = self.s
        params = {"list": RAN, "redis": self.server.url}
        offsets = {i: s.lead + s.window * self.rng.random() for i in range(s.tasks)}
        written = self.client.add_many({"topic": TOPIC, "id": i, "call": "delayd.examples:record",
                                        "params": params, "delay": offsets[i]} for i in range(s.tasks))
        assert written == s.tasks, f"add_many wrote {written} of {s.tasks}"
        self.result.tasks = s.tasks
        late = [i for i, offset in offsets.items() if offset > s.lead + 0.6 * s.window]
        sample = self.rng.sample(late, int(len(late) * s.delete_fraction))
        removed = [i for i in sample if self.client.delete(TOPIC, i)]
        seconds, micros = self.client.redis.time()
        after = seconds + micros / 1e6
        deleted, unconfirmed = set(), set()
        pipe = self.client.redis.pipeline(transaction=False)
        for i in removed:
            member = f"{TOPIC}:{i}"
            pipe.hget(self.client.store.keys_for(member).task(member), "due")
        for i, due in zip(removed, pipe.execute()):
            (deleted if int(due) / 1000 > after else unconfirmed).add(f"{TOPIC}:{i}")
        self.result.deleted, self.result.delete_unconfirmed = len(deleted), len(unconfirmed)
        return deleted, unconfirmed

    def disrupt(self) -> None:
        s = self.s
        start = time.monotonic()
        end = start + s.lead + s.window + 0.5
        span = end - start
        plan = [(start + 0.25 * span, "stop"), (start + 0.45 * span, "redis"), (start + 0.65 * span, "master")]
        stopped: psutil.Process | None = None
        resume_at = 0.0
        resumed: int | None = None   # pid of the resumed process until it reports its runs fenced
        resumed_until = 0.0
        next_kill = start + self.rng.uniform(*s.kill_every)
        while True:
            now = time.monotonic()
            # Resume once a run of the stopped process has been taken from it (its lease
            # lapsed and a bucket process requeued it), so that its late result must be refused.
            if stopped is not None and now >= resume_at and (self.victim_lost_a_run() or now >= resume_at + 15):
                self.resume(stopped)
                resumed, resumed_until = stopped.pid, now + 15.0
                stopped = None
            # The resumed process must live on to report its stale results (and be fenced):
            # after a Redis restart it first reconnects, with backoff. No kill of it, and no
            # master kill (which would take it down), until it has or a deadline passed.
            if resumed is not None and (now >= resumed_until or self.fenced_lines(resumed)):
                resumed = None
            if now >= end and stopped is None and not plan:
                break
            held = stopped is not None or resumed is not None
            if plan and now >= plan[0][0] and not (plan[0][1] == "master" and held):
                _, what = plan.pop(0)
                if what == "stop":
                    stopped = self.stop_a_queue()
                    if stopped is None:  # every queue process is waiting for its restart: soon again
                        plan.insert(0, (time.monotonic() + 0.2, "stop"))
                    resume_at = time.monotonic() + s.lease + 1.5
                elif what == "redis":
                    self.restart_redis()
                else:
                    self.kill_master()
                continue
            if now >= next_kill and now < end:
                self.kill_a_child(exclude={stopped.pid if stopped else None, resumed})
                next_kill = time.monotonic() + self.rng.uniform(*s.kill_every)
            timers = [t for t in (next_kill if now < end else None, resume_at if stopped else None,
                                  plan[0][0] if plan else None, end,
                                  now + 0.1 if resumed is not None or (stopped and now >= resume_at) else None)
                      if t is not None]
            self.pause.wait(max(0.0, min(timers) - time.monotonic()))

    def fenced_lines(self, pid: int) -> int:
        """Lines in which process `pid` reported a run of its own refused (stale claim or lease)."""
        count = 0
        for path in sorted(self.state_dir.glob("delayd-*.log")):
            with open(path, errors="replace") as lines:
                count += sum(1 for line in lines if f" pid={pid} " in line
                             and ("event=result_fenced" in line or "event=lease_lost" in line))
        return count

    def kill_a_child(self, exclude: set[int | None]) -> None:
        victims = self.live_children(exclude)
        if not victims:
            return
        victim = self.rng.choice(victims)
        try:
            is_queue = " ".join(victim.cmdline()).startswith("delayd: queue")
            victim.kill()
        except psutil.NoSuchProcess:
            return
        self.result.kills += 1
        self.result.queue_kills += is_queue
        self.snapshot()

    def stop_a_queue(self) -> psutil.Process | None:
        """SIGSTOP a queue process that holds a run: add slow tasks, stop a process that began one."""
        if not self.daemon.children("queue"):
            return None
        s = self.s
        first = len(self.slow)
        batch = [f"slow-{n}" for n in range(first, first + 2 * s.concurrency * s.queues)]
        self.client.add_many({"topic": TOPIC, "id": i, "call": "chaos_handlers:slow_record", "delay": 0,
                              "params": {"list": RAN, "redis": self.server.url, "seconds": s.task_timeout * 0.75}}
                             for i in batch)
        self.slow += [f"{TOPIC}:{i}" for i in batch]
        self.result.tasks += len(batch)
        wanted = set(self.slow[first:])

        def running_one() -> psutil.Process | None:
            """A live queue process that has begun one of this batch's slow runs."""
            live = {p.pid: p for p in self.daemon.children("queue")}
            for entry in self.client.redis.lrange(chaos_handlers.STARTED, 0, -1):
                pid, _, member = entry.partition(" ")
                if member in wanted and int(pid) in live:
                    return live[int(pid)]
            return None
        try:
            wait_for(lambda: running_one() is not None, 10, interval=0.02, message="a slow task running")
        except AssertionError:
            return None  # the queues were restarting: try again soon
        victim = running_one()
        if victim is None:
            return None
        mine = [entry.partition(" ")[2] for entry in self.client.redis.lrange(chaos_handlers.STARTED, 0, -1)
                if entry.startswith(f"{victim.pid} ")]
        pipe = self.client.redis.pipeline(transaction=False)
        for member in mine:
            pipe.hget(self.client.store.keys_for(member).task(member), "claim")
        self.victim_runs = dict(zip(mine, pipe.execute()))
        try:
            victim.suspend()
        except psutil.NoSuchProcess:
            return None
        self.result.stops += 1
        self.stopped_pids.append(victim.pid)
        self.snapshot()
        self.say(f"SIGSTOP queue pid {victim.pid} for {self.s.lease + 1.5:g} s or more (lease {self.s.lease:g} s): "
                 f"until one of its {len(self.victim_runs)} runs is taken from it")
        return victim

    def victim_lost_a_run(self) -> bool:
        """Has a run the stopped process holds been requeued or claimed again (claim token moved)?"""
        try:
            pipe = self.client.redis.pipeline(transaction=False)
            for member in self.victim_runs:
                pipe.hmget(self.client.store.keys_for(member).task(member), "claim", "status")
            return any(claim != held or status != "running"
                       for held, (claim, status) in zip(self.victim_runs.values(), pipe.execute()))
        except redis.exceptions.RedisError:
            return False

    @staticmethod
    def resume(proc: psutil.Process) -> None:
        try:
            proc.resume()
        except psutil.NoSuchProcess:
            pass

    def restart_redis(self) -> None:
        self.snapshot()
        self.say("restarting Redis (SHUTDOWN with AOF, then start on the same files)")
        self.server.stop()
        self.pause.wait(self.s.redis_outage)
        self.server.start()
        self.result.redis_restarts += 1
        self.snapshot()

    def kill_master(self) -> None:
        self.say("SIGKILL the master, then start a new daemon on the same state directory")
        old = self.daemon
        os.kill(old.proc.pid, signal.SIGKILL)
        old.proc.wait(10)
        if old.proc.stdout:
            old.proc.stdout.close()
        self.result.kills += 1
        self.result.master_kills += 1
        wait_for(lambda: not our_processes(self.state_dir), 15, interval=0.05,
                 message="the dead master's children to die with it")
        self.snapshot()
        self.daemon = self.new_daemon()

    def drain(self, deleted: set[str]) -> bool:
        expected_ok = self.result.tasks - len(deleted) - self.result.delete_unconfirmed
        keys = self.client.store.keys

        def finished() -> bool:
            try:
                pipe = self.client.redis.pipeline(transaction=False)
                for k in keys:
                    pipe.zcard(k.done("ok"))
                    pipe.zcard(k.delayed)
                    pipe.zcard(k.leases)
                counts = pipe.execute()
            except redis.exceptions.RedisError:
                return False
            ok = sum(counts[0::3])
            return ok >= expected_ok and not any(counts[1::3]) and not any(counts[2::3])

        try:
            wait_for(finished, self.s.drain_timeout, interval=0.25, message="every task finished")
        except AssertionError:
            return False
        return True

    def check(self, deleted: set[str], unconfirmed: set[str]) -> None:
        r = self.client.redis
        entries = r.lrange(RAN, 0, -1)
        per_task = Counter(entry.rpartition(":")[0] for entry in entries)
        per_run = Counter(entries)
        every = [f"{TOPIC}:{i}" for i in range(self.s.tasks)] + self.slow
        expected = [k for k in every if k not in deleted and k not in unconfirmed]
        res = self.result
        res.lost = [k for k in expected if k not in per_task]
        res.ran_deleted = sorted(k for k in deleted if k in per_task)
        res.duplicates = sum(n - 1 for n in per_task.values())
        res.duplicate_tasks = sum(1 for n in per_task.values() if n > 1)
        res.same_run_duplicates = sum(n - 1 for n in per_run.values())
        res.unexplained = sorted(k for k, n in per_task.items() if n > 1 and k not in self.in_flight)
        numbers: dict[str, set[str]] = {}
        for entry in entries:
            member, _, run = entry.rpartition(":")
            numbers.setdefault(member, set()).add(run)
        retried = self.retried()
        res.renumbered = sorted(k for k, runs in numbers.items() if len(runs) > 1 and k not in retried)
        statuses: dict[str, str | None] = {}
        for start in range(0, len(every), 1000):
            chunk = every[start:start + 1000]
            pipe = r.pipeline(transaction=False)
            for member in chunk:
                pipe.hget(self.client.store.keys_for(member).task(member), "status")
            statuses.update(zip(chunk, pipe.execute()))
        for member in expected:
            if statuses[member] != "ok":
                res.wrong_status[member] = statuses[member]
        for member in deleted:
            if statuses[member] != "deleted":
                res.wrong_status[member] = statuses[member]

    def retried(self) -> set[str]:
        """Tasks of which a run ended in a retry (the daemon logs each such run at INFO or above)."""
        return retried_in(sorted(self.state_dir.glob("delayd-*.log")))

    def shutdown(self) -> None:
        """Stop the daemon and Redis; record anything of this run still alive."""
        if self.daemon is not None:
            for child in self.daemon.children():  # a child left stopped would never see SIGTERM
                self.resume(child)
            self.daemon.stop()
        try:
            wait_for(lambda: not our_processes(self.state_dir), 15, interval=0.05, message="delayd processes gone")
        except AssertionError:
            pass
        self.result.leftovers = [f"{p.pid} {' '.join(p.cmdline())}" for p in our_processes(self.state_dir)]
        for proc in our_processes(self.state_dir):
            proc.kill()
        if self.client is not None:
            self.client.close()
        self.server.stop()
        self.result.crashes = crashes_in(sorted(self.state_dir.glob("delayd-*.log"))
                                         + sorted(self.state_dir.glob("daemon-*.out")))
        self.result.stopped_fenced = sum(self.fenced_lines(pid) for pid in self.stopped_pids)
        for proc in psutil.process_iter(["cmdline"]):
            try:
                cmd = proc.info["cmdline"] or []
                if "--dir" in cmd and str(self.server.dir) in cmd and proc.status() != psutil.STATUS_ZOMBIE:
                    self.result.leftovers.append(f"{proc.pid} {' '.join(cmd)}")
                    proc.kill()
            except psutil.NoSuchProcess:
                pass


def run(settings: Settings, workdir: Path, say=None) -> Result:
    return Chaos(settings, workdir, say).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="delayd's chaos run: prove that nothing is lost")
    parser.add_argument("--tasks", type=int, default=50_000, help="tasks to add (default 50000)")
    parser.add_argument("--window", type=float, default=None,
                        help="seconds over which due times are spread (default: tasks / 1000, at least 10)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the random choices")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, AOF)")
    parser.add_argument("--limit-rate", metavar="N/s", help="limit the topic's rate (delayd limit --rate)")
    parser.add_argument("--limit-concurrency", type=int, metavar="K", help="limit its runs in flight")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = parser.parse_args(argv)
    for name in [v for v in os.environ if v.startswith("DELAYD_")]:
        del os.environ[name]  # the daemon and client of this run get only what the run sets
    window = args.window if args.window is not None else max(10.0, args.tasks / 1000)
    settings = Settings(tasks=args.tasks, window=window, seed=args.seed,
                        drain_timeout=max(90.0, args.tasks / 200), limit_rate=args.limit_rate,
                        limit_concurrency=args.limit_concurrency)
    say = (lambda m: None) if args.quiet else (lambda m: print(f"[chaos] {m}", file=sys.stderr, flush=True))
    return verdict(in_workdir("chaos", args.keep, lambda workdir: run(settings, workdir, say)))


def in_workdir(name: str, keep: bool, work: Callable[[Path], Any]) -> Any:
    """work(a fresh temporary directory); the directory is removed after, unless `keep` (then named)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"delayd-{name}-"))
    try:
        return work(workdir)
    finally:
        if keep:
            print(f"[{name}] work directory kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def verdict(result: Any) -> int:
    """Print a run's summary line and its failures (stderr); the exit code: 1 on any failure."""
    print(result.summary(), flush=True)
    for problem in result.failures:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
