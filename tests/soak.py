"""The soak: one daemon at its defaults for N minutes under a shop-like load and faults on a timer,
its memory, files and lateness sampled every period, and every task accounted for at the end.

Shared by the suite (tests/system/test_soak.py, a short run) and `scripts/soak` (30 minutes by
default; `--minutes N`). One run:

1. a private redis-server with AOF (the store), a second one for the ledger (each run of a call
   task is recorded there, so the ledger does not weigh on the memory measured), four merchants
   (local HTTP servers), the daemon (4 buckets, 2 queues, every option at its default but the
   allowlist) and `delayd web`;
2. load: two Python producer processes (add, add_many, deletes of paid orders) and an HTTP
   producer through `delayd web` (single tasks, arrays, DELETEs), a mix of call tasks that succeed,
   fail, retry or raise, URL tasks to merchants that answer slowly, fail, time out, go down and
   come back, a limited topic, a topic paused and resumed, and a few recurring tasks;
3. faults on a timer, between the first and the last compared window: SIGKILL of `delayd: queue 1`
   (full runs only: its runs come back after the default lease, 60 s) and `delayd: bucket 1`, a
   Redis restart (SHUTDOWN with AOF, start on the same files), a merchant down and back, a merchant
   host disabled and enabled (`delayd hosts`), a topic paused and resumed; and `delayd reload`
   once during warm-up;
4. every period a sample (soak_report.Sample), printed as a table line; at the end the load
   stops, the due tasks drain, and the checks run: every task accounted for (lost 0, unexplained
   duplicates 0, each ended as planned), RSS, open files, Redis memory per task, lateness p99.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

sys.path.insert(0, str(Path(__file__).parent))

import soak_load  # noqa: E402
import soak_report  # noqa: E402
from chaos import copy_output, crashes_in, in_workdir, leased_now, our_processes, verdict  # noqa: E402
from daemon_helper import Daemon, delayd  # noqa: E402
from redis_server import RedisServer, free_port, wait_for  # noqa: E402
from soak_handlers import LATE  # noqa: E402
from soak_load import Expect, Merchants  # noqa: E402
from url_helper import _Handler, _serving  # noqa: E402
from web_helper import TOKEN, Web  # noqa: E402

from delayd import Client  # noqa: E402
from delayd.model.task import STATUSES  # noqa: E402

RECURRING = 5                # recurring tasks (every 3 s)
QUEUE_KILL_QUIET = 75.0      # seconds from a queue kill to the last window: the default lease (60 s), and more


@dataclass
class Settings:
    minutes: float = 30.0
    sample_every: float = 60.0     # seconds between two samples (table lines)
    producer_every: float = 0.25   # seconds between two steps of a Python producer
    web_every: float = 0.5         # ... of the HTTP producer
    queue_kills: bool = True       # SIGKILL a queue process, when the run is long enough (fault_plan)
    drain_timeout: float = 180.0
    leak_bytes: int = 0            # each timed run keeps this many bytes (proves the RSS check fails)
    bounds: soak_report.Bounds = field(default_factory=soak_report.Bounds)
    plot: bool = True


@dataclass
class Result:
    samples: list[soak_report.Sample] = field(default_factory=list)
    tasks: int = 0
    deleted: int = 0
    ended: Counter = field(default_factory=Counter)       # ok / failed / deleted / pending
    lost: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    duplicates: int = 0
    unexplained: list[str] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    late_first: list[float] = field(default_factory=list)
    late_last: list[float] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def failures(self) -> list[str]:
        """The breaches of a bound, then every kind of task or daemon problem found, with examples."""
        found = [(self.lost, "task(s) lost"), (self.wrong, "task(s) did not end as planned"),
                 (self.unexplained, "task(s) ran twice without being in flight at a fault"),
                 (self.crashes, "line(s) of the daemon's saying a child crashed or printing a traceback")]
        return list(self.breaches) + [f"{len(items)} {what}, e.g. {items[:5]}" for items, what in found if items]

    def summary(self) -> str:
        p99 = soak_report.percentile
        return (f"tasks={self.tasks} lost={len(self.lost)} unexplained_duplicates={len(self.unexplained)} "
                f"duplicates={self.duplicates} wrong={len(self.wrong)} "
                f"ended={dict(sorted(self.ended.items()))} "
                f"faults={dict(sorted(self.faults.items()))} "
                f"late_p99_first={p99(self.late_first, 99):.2f}ms late_p99_last={p99(self.late_last, 99):.2f}ms "
                f"breaches={len(self.breaches)} elapsed_s={self.elapsed:.0f}")


class Merchant:
    """A merchant's HTTP server (url_helper's), on a fixed port so that it can go down and come back."""

    def __init__(self, port: int):
        self.port, self.servers, self.stack = port, [], None
        self.base = f"http://127.0.0.1:{port}"
        self.up()

    def up(self) -> None:
        self.stack = contextlib.ExitStack()
        self.servers.append(self.stack.enter_context(_serving(_Handler, port=self.port)))

    def down(self) -> None:
        """Stop listening and close every connection: requests are refused until up()."""
        self.stack.close()
        self.stack = None

    def requests(self) -> list[dict]:
        return [request for server in self.servers for request in list(server.requests)]

    def close(self) -> None:
        if self.stack:
            self.down()


def fault_plan(s: Settings, w: soak_report.Windows) -> list[tuple[float, str]]:
    """(seconds since the load began, fault): a reload in warm-up, then rounds of faults between the
    first and the last window, ending early enough for their effects to be over before the last."""
    plan = [(w.warmup / 2, "reload")]
    start = w.first[1]
    # A killed queue's runs come back after the lease (60 s by default): its kill needs that long
    # before the last window, and room for a round of faults before (else the round goes without).
    queue_kills = s.queue_kills and w.last[0] - QUEUE_KILL_QUIET - start >= 20
    stop = w.last[0] - (QUEUE_KILL_QUIET if queue_kills else 15.0)
    span = stop - start
    if span <= 0:
        return plan
    cycle = min(600.0, span)
    steps = [(0.0, "pause_topic"), (0.05, "queue_kill"), (0.15, "bucket_kill"), (0.3, "resume_topic"),
             (0.35, "merchant_down"), (0.45, "hosts_disable"), (0.55, "merchant_up"), (0.6, "redis_restart"),
             (0.75, "hosts_enable")]
    at = start
    while at + cycle <= stop + 1e-6:
        plan += [(at + f * cycle, what) for f, what in steps if queue_kills or what != "queue_kill"]
        at += cycle
    return sorted(plan)


class Soak:
    def __init__(self, settings: Settings, workdir: Path, say=print):
        self.s, self.workdir, self.say = settings, Path(workdir), say
        self.duration = settings.minutes * 60
        self.windows = soak_report.Windows.of(self.duration)
        self.result = Result()
        # The store at Redis's defaults but AOF (the suite's servers tick at hz 100: their idle CPU
        # would weigh on Redis CPU per run, and delayd's timers must not need it)
        self.store = RedisServer(str(self.workdir / "redis"), aof=True, extra=["--hz", "10"])
        self.ledger = RedisServer(str(self.workdir / "ledger"))
        self.state_dir = self.workdir / "state"
        self.in_flight: set[str] = set()
        self.deleted: set[str] = set()         # orders deleted while pending (paid)
        self.timer = threading.Event()   # never set: its wait(t) is the driver's timer
        self.daemon = self.web = self.client = self.ledger_client = None
        self.merchants: dict[str, Merchant] = {}
        self.producers: list[tuple[multiprocessing.Process, object]] = []
        self.http_producer: soak_load.HttpProducer | None = None
        self.stop_producers = None

    # -- set-up and tear-down ----------------------------------------------------------
    def start(self) -> None:
        self.store.start()
        self.ledger.start()
        self.client = Client.from_url(self.store.url)
        with self.store.client() as r:
            self.baseline = int(r.info("memory")["used_memory"])
        self.ledger_client = self.ledger.client()
        self.client.set_limit(soak_load.LIMITED, rate="5/s", concurrency=2)
        self.merchants = {name: Merchant(free_port()) for name in ("steady", "comeback", "disabled", "timeouts")}
        self.urls = Merchants(**{name: m.base for name, m in self.merchants.items()})
        self.daemon = Daemon(self.store.url, self.state_dir, buckets=4, queues=2,
                             DELAYD_ALLOWED_MODULES="delayd.examples,soak_handlers")
        self.daemon.start()
        copy_output(self.daemon.proc.stdout, self.state_dir / "daemon.out")
        self.web = Web(self.store.url, DELAYD_WEB_TOKEN=TOKEN).start()
        for n in range(RECURRING):
            self.client.add("digest:mail", n, call=soak_load.PLANNED, every=3,
                            params={"list": soak_load.RAN, "redis": self.ledger.url, "plan": "ok"})
        context = multiprocessing.get_context("spawn")
        self.stop_producers = context.Event()
        for name in ("py1", "py2"):
            done = context.Value("q", 0)
            proc = context.Process(target=soak_load.produce, daemon=True,
                                   args=(name, self.store.url, self.urls, self.ledger.url, self.s.producer_every,
                                         done, self.stop_producers, self.s.leak_bytes))
            proc.start()
            self.producers.append((proc, done))
        self.http_producer = soak_load.HttpProducer(self.web.base, TOKEN, self.urls, self.ledger.url,
                                                    self.s.web_every, self.pending, self.s.leak_bytes)
        self.http_producer.start()

    def shutdown(self) -> None:
        if self.stop_producers is not None:
            self.stop_producers.set()
        if self.http_producer is not None:
            self.http_producer.stop.set()
        for proc, _ in self.producers:
            proc.join(15)
            if proc.is_alive():
                proc.kill()
        if self.web is not None:
            self.web.stop()
        if self.daemon is not None:
            self.daemon.stop()
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not our_processes(self.state_dir), 15, interval=0.05, message="delayd processes gone")
        for merchant in self.merchants.values():
            merchant.close()
        for client in (self.client, self.ledger_client):
            if client is not None:
                client.close()
        self.store.stop()
        self.ledger.stop()
        self.result.crashes = crashes_in(sorted(self.state_dir.glob("delayd*.log"))
                                         + [self.state_dir / "daemon.out"])

    # -- the run -----------------------------------------------------------------------
    def run(self) -> Result:
        began = time.monotonic()
        try:
            self.start()
            self.epoch = time.time()
            self.drive()
            self.say("load stopped; waiting for the due tasks to finish")
            self.stop_load()
            self.account(deadline=time.monotonic() + self.s.drain_timeout)
            self.check()
        finally:
            self.shutdown()
            self.result.elapsed = time.monotonic() - began
        return self.result

    def drive(self) -> None:
        """Sample every period and fire the faults of the plan until the run's end (timers, no polling)."""
        start = time.monotonic()
        faults = fault_plan(self.s, self.windows)
        self.say(f"windows: warm-up {self.windows.warmup:.0f} s, compared {self.windows.first} and "
                 f"{self.windows.last} s; faults: {[f'{t:.0f}s {what}' for t, what in faults]}")
        self.say(soak_report.HEADER)
        next_sample, notes = start + self.s.sample_every, []
        self.counters = self.read_counters()
        while True:
            now = time.monotonic()
            if faults and now >= start + faults[0][0]:
                what = faults.pop(0)[1]
                getattr(self, what)()
                self.result.faults[what] += 1
                notes.append(what)
                continue
            if now >= next_sample:
                sample = self.sample(now - start, notes)
                self.result.samples.append(sample)
                self.say(soak_report.table_line(sample))
                notes, next_sample = [], next_sample + self.s.sample_every
                if now - start >= self.duration - 1e-3:
                    return
                continue
            timers = [next_sample] + ([start + faults[0][0]] if faults else [])
            self.timer.wait(max(0.0, min(timers) - time.monotonic()))

    # -- sampling ----------------------------------------------------------------------
    def processes(self) -> list[soak_report.Proc]:
        found = []
        ports = {m.port for m in self.merchants.values()} | {self.ledger.port}   # the harness's, not delayd's
        for proc in [self.daemon.master, *self.daemon.children(), psutil.Process(self.web.proc.pid)]:
            try:
                with proc.oneshot():
                    title = " ".join(proc.cmdline()).strip() if proc.pid != self.web.proc.pid else "delayd web"
                    pooled = sum(1 for c in proc.net_connections("tcp") if c.raddr and c.raddr.port in ports)
                    found.append(soak_report.Proc(proc.pid, title[:40], proc.memory_info().rss,
                                                  proc.num_fds() - pooled, pooled))
            except psutil.NoSuchProcess:
                pass
        return found

    def read_counters(self) -> tuple[float, int, int]:
        """(Redis CPU seconds, ledger length, merchants' requests); CPU 0 while Redis is down."""
        try:
            cpu = self.store.client().info("cpu")
            seconds = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        except redis.exceptions.RedisError:
            seconds = 0.0
        requests = sum(len(m.requests()) for m in self.merchants.values())
        return seconds, self.ledger_client.llen(soak_load.RAN), requests

    def sample(self, t: float, notes: list[str]) -> soak_report.Sample:
        cpu, ran, requests = self.read_counters()
        before = self.counters
        self.counters = cpu, ran, requests
        spent = cpu - before[0] if cpu >= before[0] else cpu   # a restarted Redis counts from 0
        late = [tuple(map(float, entry.split())) for entry in self.ledger_client.lpop(LATE, 1_000_000) or []]
        with self.store.client() as r:
            used = int(r.info("memory")["used_memory"])
        counts = {status: self.client.count(status=status) for status in STATUSES}
        return soak_report.Sample(t, self.processes(), used, counts, late, (ran - before[1]) + (requests - before[2]),
                                  spent, list(notes), self.baseline, os.getloadavg()[0])

    # -- faults ------------------------------------------------------------------------
    def snapshot(self) -> None:
        self.in_flight |= leased_now(self.client)

    def kill(self, title: str) -> None:
        victim = self.daemon.child(title)
        victim.kill()
        self.snapshot()
        wait_for(lambda: any(" ".join(c.cmdline()).strip() == title for c in self.daemon.children()), 30, 0.05,
                 message=f"{title} restarted")

    def queue_kill(self) -> None:
        self.kill("delayd: queue 1")

    def bucket_kill(self) -> None:
        self.kill("delayd: bucket 1")

    def reload(self) -> None:
        self.snapshot()
        delayd("reload", env=self.daemon.env, timeout=120)
        self.snapshot()

    def redis_restart(self) -> None:
        self.snapshot()
        self.store.stop()
        self.timer.wait(1.0)
        self.store._start()   # the same port and files: clients reconnect
        self.snapshot()

    def pause_topic(self) -> None:
        self.client.pause(soak_load.PAUSED)

    def resume_topic(self) -> None:
        self.client.resume(soak_load.PAUSED)

    def merchant_down(self) -> None:
        self.merchants["comeback"].down()

    def merchant_up(self) -> None:
        self.merchants["comeback"].up()

    def hosts_disable(self) -> None:
        delayd("hosts", "disable", self.urls.disabled, "--redis", self.store.url)

    def hosts_enable(self) -> None:
        delayd("hosts", "enable", self.urls.disabled, "--redis", self.store.url)

    # -- the end -----------------------------------------------------------------------
    def pending(self, member: str) -> bool:
        """Is `member` delayed now (an order not yet due may still be paid)?"""
        record = self.client.store.keys_for(member).task(member)
        try:
            return self.client.redis.hget(record, "status") == "delayed"
        except redis.exceptions.RedisError:
            return False

    def stop_load(self) -> None:
        """Stop the producers; know every task they added (from the steps they finished) and deleted."""
        self.stop_producers.set()
        self.http_producer.stop.set()
        self.http_producer.join(30)
        for proc, _ in self.producers:
            proc.join(30)
        self.expected: dict[str, Expect] = {f"digest:mail:{n}": Expect(None) for n in range(RECURRING)}
        steps = {"web": self.http_producer.steps, **{f"py{i + 1}": done.value for i, (_, done) in
                                                      enumerate(self.producers)}}
        for name, count in steps.items():
            for n in range(count):
                for item in soak_load.step(name, n, self.urls, self.ledger.url):
                    self.expected[f"{item['topic']}:{item['id']}"] = soak_load.expect(item)
        paid = self.ledger_client.lrange(soak_load.PAID, 0, -1)
        self.deleted = set(paid) | set(self.http_producer.deleted)
        self.result.tasks, self.result.deleted = len(self.expected), len(self.deleted)

    def records(self) -> dict[str, tuple[str | None, int, float]]:
        """member -> (status, runs, due_at) of every task expected; (None, 0, 0) for no record."""
        out = {}
        members = list(self.expected)
        for first in range(0, len(members), 1000):
            chunk = members[first:first + 1000]
            pipe = self.client.redis.pipeline(transaction=False)
            for member in chunk:
                pipe.hmget(self.client.store.keys_for(member).task(member), "status", "runs", "due")
            for member, (status, runs, due) in zip(chunk, pipe.execute()):
                out[member] = (status, int(runs or 0), int(due or 0) / 1000)
        return out

    def account(self, deadline: float) -> None:
        """Wait (until `deadline`) for nothing to be overdue, then account for every task."""
        def settled() -> bool:
            self.tally()
            return not self.result.lost and not self.result.wrong
        with contextlib.suppress(AssertionError):
            wait_for(settled, max(0.0, deadline - time.monotonic()), interval=2.0, message="every due task ended")

    def tally(self) -> None:
        """Every task: deleted (and never ran), ended as planned with the runs planned, or still
        pending and not overdue; a run number seen twice is a duplicate, explained only by a fault
        that caught the task in flight."""
        res = self.result
        ran = Counter(self.ledger_client.lrange(soak_load.RAN, 0, -1))
        ran.update(r["headers"].get("idempotency-key", "") for m in self.merchants.values() for r in m.requests())
        runs_of: dict[str, set[int]] = {}
        for entry, times in ran.items():
            member, _, run = entry.rpartition(":")
            runs_of.setdefault(member, set()).add(int(run or 0))
        dup = Counter()
        for entry, times in ran.items():
            if times > 1:
                dup[entry.rpartition(":")[0]] += times - 1
        res.duplicates = sum(dup.values())
        res.unexplained = sorted(m for m in dup if m not in self.in_flight)
        now = time.time()
        res.lost, res.wrong, res.ended = [], [], Counter()
        for member, (status, runs, due) in self.records().items():
            expect, seen = self.expected[member], runs_of.get(member, set())
            if member in self.deleted:
                if status != "deleted" or seen:
                    res.wrong.append(f"{member}: deleted while pending, but {status} with runs {sorted(seen)}")
                res.ended["deleted"] += 1
            elif status is None:
                res.lost.append(f"{member}: no record")
            elif status in ("delayed", "running"):
                if due < now - 30 and expect.final is not None:
                    res.lost.append(f"{member}: {status}, due {now - due:.0f} s ago")
                elif expect.final is None and not set(range(1, runs)) <= seen:
                    res.lost.append(f"{member}: recurring, {runs} runs counted, ran {sorted(seen)}")
                res.ended["pending"] += 1
            elif status != expect.final:
                res.wrong.append(f"{member}: {status}, planned {expect.final}")
            elif expect.runs is not None and seen != set(range(1, expect.runs + 1)):
                res.lost.append(f"{member}: {status} after runs {sorted(seen)}, planned {expect.runs}")
            elif not seen:
                res.lost.append(f"{member}: {status}, but its merchant never saw it")
            else:
                res.ended[status] += 1

    def check(self) -> None:
        res, w, b = self.result, self.windows, self.s.bounds
        late = [pair for sample in res.samples for pair in sample.late]
        res.late_first, res.late_last = soak_report.lateness_windows(late, w, self.epoch)
        res.breaches = (soak_report.rss_breaches(res.samples, w, b) + soak_report.fd_breaches(res.samples, w, b)
                        + soak_report.memory_breaches(res.samples, w, b)
                        + soak_report.lateness_breaches(res.late_first, res.late_last, b,
                                                        soak_report.load_note(res.samples, w)))
        out = self.workdir / "figures"
        out.mkdir(exist_ok=True)
        res.files = list(soak_report.write_csv(res.samples, out))
        if self.s.plot:
            res.files.append(soak_report.plot(res.samples, out / "soak.png"))


def run(settings: Settings, workdir: Path, say=print) -> Result:
    return Soak(settings, workdir, say).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="delayd's soak: hours of mixed load and faults, nothing lost, "
                                                 "memory, files and lateness flat")
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the load (default 30)")
    parser.add_argument("--sample-every", type=float, default=None,
                        help="seconds between two samples (default 60, or a compared window's length if shorter)")
    parser.add_argument("--out", type=Path, default=Path("soak-out"),
                        help="directory for samples.csv, processes.csv and soak.png (default soak-out)")
    parser.add_argument("--leak-bytes", type=int, default=0,
                        help="make each timed run keep this many bytes in its queue process (to see the check fail)")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG (no matplotlib needed)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, AOF)")
    args = parser.parse_args(argv)
    if args.minutes < 2:
        parser.error("--minutes: at least 2 (warm-up and two windows to compare)")
    window = soak_report.Windows.of(args.minutes * 60).length
    args.sample_every = min(60.0, window) if args.sample_every is None else args.sample_every
    if not 0 < args.sample_every <= window:
        parser.error(f"--sample-every: more than 0 and at most {window:g} s (a compared window's length)")
    for name in [v for v in os.environ if v.startswith("DELAYD_")]:
        del os.environ[name]  # the daemon and clients of this run get only what the run sets
    settings = Settings(minutes=args.minutes, sample_every=args.sample_every, leak_bytes=args.leak_bytes,
                        plot=not args.no_plot)

    def soak_in(workdir: Path) -> Result:
        result = run(settings, workdir, lambda line: print(line, flush=True))
        args.out.mkdir(parents=True, exist_ok=True)
        for path in result.files:
            shutil.copy(path, args.out / path.name)
        print(f"[soak] figures in {args.out}/", file=sys.stderr)
        return result
    return verdict(in_workdir("soak", args.keep, soak_in))


if __name__ == "__main__":
    sys.exit(main())
