"""The soak's end checks (tests/soak_report.py) on made-up samples: each bound breaks just past it,
and holds just within (the short run in test_soak.py shows them on a real daemon)."""
from __future__ import annotations

import soak_report
from soak_report import MIB, Bounds, Proc, Sample, Windows

BOUNDS = Bounds()


def samples(rss_per_minute: float = 0.0, fds_at_end: int = 10, bytes_at_end: float = 1000.0,
            minutes: int = 60) -> list[Sample]:
    """A sample a minute of one process and a store holding 1,000 tasks: RSS growing by
    `rss_per_minute` MiB a minute, open files and memory per task moving to their end values in the
    last ten minutes."""
    out = []
    for m in range(1, minutes + 1):
        late = m >= minutes - 10
        proc = Proc(1, "delayd: queue 0", int((50 + rss_per_minute * m) * MIB), fds_at_end if late else 10, 3)
        used = int((bytes_at_end if late else 1000.0) * 1000)
        out.append(Sample(m * 60.0, [proc], used, {"delayed": 1000}, [], 100, 0.1))
    return out


def test_windows_scale_with_the_run():
    assert (Windows.of(3600).first, Windows.of(3600).last) == ((600, 1200), (3000, 3600))
    short = Windows.of(120)
    assert short.warmup == 30 and short.length == 30 and short.last == (90, 120)


def test_rss_growth_over_the_bound_breaks_it():
    w = Windows.of(3600)
    within = BOUNDS.rss_mib_per_hour / 60 * 0.9     # MiB a minute
    assert soak_report.rss_breaches(samples(within), w, BOUNDS) == []
    broken = soak_report.rss_breaches(samples(BOUNDS.rss_mib_per_hour / 60 * 1.2), w, BOUNDS)
    assert len(broken) == 1 and "delayd: queue 0 (pid 1) grew" in broken[0] and "MiB/h" in broken[0]


def test_open_files_and_memory_per_task():
    w = Windows.of(3600)
    assert soak_report.fd_breaches(samples(fds_at_end=10 + BOUNDS.fd_slack), w, BOUNDS) == []
    assert "went from 10 to 15" in soak_report.fd_breaches(samples(fds_at_end=15), w, BOUNDS)[0]
    assert soak_report.memory_breaches(samples(bytes_at_end=1090.0), w, BOUNDS) == []
    assert "from 1000 to 1200 bytes" in soak_report.memory_breaches(samples(bytes_at_end=1200.0), w, BOUNDS)[0]


def test_lateness_p99_may_move_by_the_slack_only():
    assert soak_report.percentile([float(n) for n in range(1, 101)], 99) == 99.0   # nearest rank
    first = [1.0] * 98 + [5.0] * 2
    assert soak_report.lateness_breaches(first, [1.0] * 98 + [5.9] * 2, BOUNDS) == []
    assert "from 5.00 ms" in soak_report.lateness_breaches(first, [1.0] * 98 + [6.2] * 2, BOUNDS)[0]
    assert "too few runs" in soak_report.lateness_breaches(first[:10], first, BOUNDS)[0]
