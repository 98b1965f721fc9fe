"""The soak's figures: one sample a period (processes, Redis memory and CPU, lateness, counts), the
table line printed for it, the CSV and plot written from them, and the end checks on them."""
from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024


@dataclass(frozen=True)
class Bounds:
    """What the end checks allow (the README's Soak paragraph states them)."""
    rss_mib_per_hour: float = 8.0   # RSS growth of a process after warm-up ...
    rss_floor_mib: float = 3.0      # ... but never less than this over the span measured (allocator steps)
    fd_slack: int = 4               # open files (pooled merchant connections apart): last window's most
                                    # minus the first's
    memory_slack: float = 0.10      # Redis bytes per stored task: last window over first, at most +10 %
    lateness_slack_ms: float = 1.0  # lateness p99: last window minus first window
    min_late_samples: int = 50      # runs whose lateness each window needs for the comparison


@dataclass(frozen=True)
class Proc:
    pid: int
    title: str
    rss: int
    fds: int       # open files, not counting ...
    pooled: int    # ... its connections to the harness: the merchants (kept alive, at most url_host_concurrency
                   # a host) and the ledger (the handlers' pool, at most one per handler thread)


@dataclass
class Sample:
    t: float                          # seconds since the load began
    procs: list[Proc]
    used_memory: int
    counts: dict[str, int]            # tasks by status (finished ones within retention)
    late: list[tuple[float, float]]   # (due_at, lateness ms) of the runs recorded this period
    runs: int                         # runs this period (call tasks' ledger + merchants' requests)
    redis_cpu: float                  # Redis CPU seconds this period (INFO cpu)
    notes: list[str] = field(default_factory=list)   # faults of this period
    baseline: int = 0                 # used_memory of the store before the first task (Redis's own)
    load: float = 0.0                 # the machine's 1-minute load average (others' work shows in lateness)

    @property
    def pending(self) -> int:
        return self.counts.get("delayed", 0) + self.counts.get("running", 0)

    @property
    def stored(self) -> int:
        return sum(self.counts.values())

    @property
    def bytes_per_task(self) -> float:
        """Redis memory above its own (the baseline) per task it holds."""
        return (self.used_memory - self.baseline) / max(1, self.stored)

    @property
    def bytes_per_pending(self) -> float:
        return (self.used_memory - self.baseline) / max(1, self.pending)

    @property
    def cpu_us_per_run(self) -> float:
        return self.redis_cpu * 1e6 / max(1, self.runs)

    def lateness(self, q: float) -> float:
        return percentile([ms for _, ms in self.late], q)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100, nearest rank); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


HEADER = (f"{'min':>6} {'rss MiB':>24} {'fds+pool':>9} {'redis MiB':>9} {'B/task':>7} {'B/pend':>7} "
          f"{'late p50':>8} {'p99 ms':>7} {'µs/run':>6} {'runs':>6}  delayed/running/ok/failed/deleted")


def table_line(s: Sample) -> str:
    """One line of the running table: RSS min-max of delayd's processes, fds, Redis, lateness, counts."""
    rss = [p.rss / MIB for p in s.procs] or [0.0]
    fds = [p.fds for p in s.procs] or [0]
    pooled = max([p.pooled for p in s.procs] or [0])
    counts = "/".join(str(s.counts.get(k, 0)) for k in ("delayed", "running", "ok", "failed", "deleted"))
    line = (f"{s.t / 60:6.1f} {f'{min(rss):.1f}-{max(rss):.1f} ({len(rss)} procs)':>24} "
            f"{f'{min(fds)}-{max(fds)}+{pooled}':>9} {s.used_memory / MIB:9.1f} {s.bytes_per_task:7.0f} "
            f"{s.bytes_per_pending:7.0f} {s.lateness(50):8.2f} {s.lateness(99):7.2f} {s.cpu_us_per_run:6.0f} "
            f"{s.runs:6d}  {counts}")
    return line + (f"  [{', '.join(s.notes)}]" if s.notes else "")


def write_csv(samples: list[Sample], directory: Path) -> tuple[Path, Path]:
    """samples.csv (one row a period) and processes.csv (one row per process and period)."""
    main, procs = directory / "samples.csv", directory / "processes.csv"
    with open(main, "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["t_s", "used_memory", "stored", "pending", "bytes_per_task", "bytes_per_pending",
                    "late_p50_ms", "late_p99_ms", "late_n", "runs", "redis_cpu_us_per_run",
                    "delayed", "running", "ok", "failed", "deleted", "load_avg_1m", "faults"])
        for s in samples:
            w.writerow([f"{s.t:.1f}", s.used_memory, s.stored, s.pending, f"{s.bytes_per_task:.1f}",
                        f"{s.bytes_per_pending:.1f}", f"{s.lateness(50):.3f}", f"{s.lateness(99):.3f}", len(s.late),
                        s.runs, f"{s.cpu_us_per_run:.1f}",
                        *(s.counts.get(k, 0) for k in ("delayed", "running", "ok", "failed", "deleted")),
                        f"{s.load:.2f}", ";".join(s.notes)])
    with open(procs, "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["t_s", "pid", "title", "rss", "fds", "pooled_connections"])
        for s in samples:
            for p in s.procs:
                w.writerow([f"{s.t:.1f}", p.pid, p.title, p.rss, p.fds, p.pooled])
    return main, procs


def plot(samples: list[Sample], path: Path) -> Path:
    """A PNG of RSS per process, Redis bytes per stored task, and lateness p50/p99 over time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (rss, mem, late) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    series: dict[tuple[int, str], tuple[list[float], list[float]]] = {}
    for s in samples:
        for p in s.procs:
            xs, ys = series.setdefault((p.pid, p.title), ([], []))
            xs.append(s.t / 60)
            ys.append(p.rss / MIB)
    for (pid, title), (xs, ys) in sorted(series.items(), key=lambda item: item[0][1]):
        rss.plot(xs, ys, marker=".", label=f"{title} ({pid})")
    rss.set_ylabel("RSS (MiB)")
    rss.legend(fontsize="x-small", ncol=3)
    minutes = [s.t / 60 for s in samples]
    mem.plot(minutes, [s.bytes_per_task for s in samples], marker=".", label="per stored task")
    mem.plot(minutes, [s.bytes_per_pending for s in samples], marker=".", label="per pending task")
    mem.set_ylabel("Redis used_memory\nabove its own (bytes)")
    mem.legend(fontsize="x-small")
    late.plot(minutes, [s.lateness(50) for s in samples], marker=".", label="p50")
    late.plot(minutes, [s.lateness(99) for s in samples], marker=".", label="p99")
    late.set_ylabel("lateness (ms)")
    late.set_yscale("log")
    late.set_xlabel("minutes")
    late.legend(fontsize="x-small")
    for s in samples:
        for axis in (rss, mem, late):
            if s.notes:
                axis.axvline(s.t / 60, color="grey", alpha=0.2)
    fig.suptitle("delayd soak: RSS, Redis memory per task, lateness (grey: a period with faults)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Windows:
    """Where the checks look (seconds since the load began): after `warmup`, the first and the last
    `length` seconds of the run are compared; faults fall between them."""
    warmup: float
    length: float
    end: float

    @classmethod
    def of(cls, duration: float) -> "Windows":
        """A sixth of the run for warm-up (30 s to 10 min), windows of ten minutes, or a third of what
        is left after warm-up on a shorter run."""
        warmup = min(600.0, max(30.0, duration / 6))
        return cls(warmup, min(600.0, (duration - warmup) / 3), duration)

    @property
    def first(self) -> tuple[float, float]:
        return self.warmup, self.warmup + self.length

    @property
    def last(self) -> tuple[float, float]:
        return self.end - self.length, self.end


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


def rss_breaches(samples: list[Sample], w: Windows, b: Bounds) -> list[str]:
    """Each process sampled at least 3 times over a window's length after warm-up: its RSS trend
    (least squares) over that span must stay under the bound."""
    by_pid: dict[int, list[tuple[float, int, str]]] = {}
    for s in samples:
        if s.t >= w.warmup:
            for p in s.procs:
                by_pid.setdefault(p.pid, []).append((s.t, p.rss, p.title))
    out = []
    for pid, points in by_pid.items():
        span = points[-1][0] - points[0][0]
        if len(points) < 3 or span < w.length:
            continue
        growth = slope([(t, rss) for t, rss, _ in points]) * span / MIB
        allowed = max(b.rss_mib_per_hour * span / 3600, b.rss_floor_mib)
        if growth > allowed:
            out.append(f"RSS of {points[0][2]} (pid {pid}) grew {growth:.1f} MiB in {span / 60:.1f} min after "
                       f"warm-up ({growth * 3600 / span:.1f} MiB/h), more than {allowed:.1f} MiB")
    return out


def within(samples: list[Sample], window: tuple[float, float]) -> list[Sample]:
    return [s for s in samples if window[0] <= s.t <= window[1]]


def fd_breaches(samples: list[Sample], w: Windows, b: Bounds) -> list[str]:
    """Each process sampled in both windows: its most open files in the last within fd_slack of the first."""
    def most(window: tuple[float, float]) -> dict[int, tuple[int, str]]:
        found: dict[int, tuple[int, str]] = {}
        for s in within(samples, window):
            for p in s.procs:
                found[p.pid] = (max(p.fds, found.get(p.pid, (0, ""))[0]), p.title)
        return found
    first, last = most(w.first), most(w.last)
    return [f"open files of {title} (pid {pid}; pooled harness connections apart) went from {first[pid][0]} to "
            f"{fds}, more than +{b.fd_slack}"
            for pid, (fds, title) in last.items() if pid in first and fds > first[pid][0] + b.fd_slack]


def memory_breaches(samples: list[Sample], w: Windows, b: Bounds) -> list[str]:
    first, last = within(samples, w.first), within(samples, w.last)
    if not first or not last:
        return [f"no sample in the first or last window ({w.first}, {w.last}): nothing to compare"]
    before = statistics.fmean(s.bytes_per_task for s in first)
    after = statistics.fmean(s.bytes_per_task for s in last)
    if after > before * (1 + b.memory_slack):
        return [f"Redis memory per stored task went from {before:.0f} to {after:.0f} bytes "
                f"(+{(after / before - 1) * 100:.0f} %, bound +{b.memory_slack * 100:.0f} %)"]
    return []


def lateness_windows(late: list[tuple[float, float]], w: Windows, start: float) -> tuple[list[float], list[float]]:
    """Lateness (ms) of the runs due in the first and in the last window (`start`: the load's epoch)."""
    def pick(window: tuple[float, float]) -> list[float]:
        return [ms for due, ms in late if window[0] <= due - start <= window[1]]
    return pick(w.first), pick(w.last)


def load_note(samples: list[Sample], w: Windows) -> str:
    """The machine's mean load average in the first and the last window: context for a lateness breach."""
    def mean(window: tuple[float, float]) -> float:
        return statistics.fmean([s.load for s in within(samples, window)] or [float("nan")])
    return f"the machine's load average {mean(w.first):.1f} in the first window, {mean(w.last):.1f} in the last"


def lateness_breaches(first: list[float], last: list[float], b: Bounds, note: str = "") -> list[str]:
    if min(len(first), len(last)) < b.min_late_samples:
        return [f"too few runs to compare lateness: {len(first)} due in the first window, {len(last)} in the "
                f"last (at least {b.min_late_samples} each)"]
    p99_first, p99_last = percentile(first, 99), percentile(last, 99)
    if p99_last > p99_first + b.lateness_slack_ms:
        return [f"lateness p99 went from {p99_first:.2f} ms (first window, {len(first)} runs) to {p99_last:.2f} ms "
                f"(last window, {len(last)} runs), more than +{b.lateness_slack_ms:g} ms"
                + (f"; {note}" if note else "")]
    return []
