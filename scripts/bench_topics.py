"""Many topics (issue 41): Redis's own time per call of `stats` and `promote` with 1,000,000 topics of one
task each, and of `promote` and `claim` with 10,000 topics paused, on one bucket (the worst case: every
topic's counters in one hash). Redis's time per call is read from SLOWLOG with a threshold of 0 (every
command logged, with the µs Redis spent in it); wall times from this process.

  .venv/bin/python scripts/bench_topics.py [--topics 1000000] [--paused 10000]
  PYTHONPATH=/work/main .venv/bin/python scripts/bench_topics.py   # the same against another checkout

Prints a Markdown table (one row per figure: the median and the max over the calls measured).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_server import RedisServer  # noqa: E402

import delayd  # noqa: E402
from delayd import Client  # noqa: E402

DAY_MS = 86_400_000
BATCH = 20_000  # tasks per add_many of the fill


# The commands counted: scripts (SLOWLOG on Redis 7 also lists the commands a script runs, whose time is
# in the script's), and the plain reads of stats that no script makes (its peek, its HSCAN pages); its two
# small reads of the hosts' keys are left out.
SENT = (b"EVALSHA", b"EVAL", b"FCALL", b"FCALL_RO", b"HSCAN", b"LRANGE")


def scripts_us(r, run) -> tuple[list[int], float]:
    """Redis's µs of every command `run` sent (SLOWLOG at 0), and run's wall time (ms)."""
    r.slowlog_reset()
    start = time.perf_counter()
    run()
    wall = (time.perf_counter() - start) * 1000
    entries = r.slowlog_get(100_000)[::-1]  # oldest first
    sent = [e["duration"] for e in entries if e["command"].split(b" ", 1)[0].upper() in SENT]
    if os.environ.get("BENCH_SHOW_SLOWEST"):
        for entry in sorted(entries, key=lambda e: -e["duration"])[:3]:
            print("   slowest:", entry["duration"], entry["command"][:100], file=sys.stderr)
    return sent, wall


def row(name: str, durations: list[int], wall_ms: float | None = None, calls: int = 1) -> str:
    if not durations:
        return f"| {name} | - | - | - | - |"
    wall = f"{wall_ms / calls:,.1f}" if wall_ms is not None else "-"
    return (f"| {name} | {len(durations) / calls:,.0f} | {statistics.median(durations):,.0f} | {max(durations):,} | "
            f"{sum(durations) / calls / 1000:,.1f} | {wall} |")


def measure(r, name: str, run, calls: int = 1) -> None:
    """Print the row of `run` (`calls` calls), or its failure."""
    try:
        durations, wall = scripts_us(r, run)
    except Exception as exc:  # noqa: BLE001 - the figure is the failure
        print(f"| {name} | fails: {str(exc)[-70:]} | | | | |", flush=True)
        return
    print(row(name, durations, wall, calls), flush=True)


def fill(client: Client, topics: int, delay: float) -> None:
    for start in range(0, topics, BATCH):
        client.add_many([{"topic": f"tenant{i}:notify", "id": 1, "push": "out", "delay": delay}
                         for i in range(start, min(topics, start + BATCH))])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--paused", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(f"delayd from {Path(delayd.__file__).parent}, redis {os.environ.get('DELAYD_TEST_REDIS', '(embedded)')}",
          flush=True)
    print("| figure | commands per call | median µs | max µs | Redis ms per call (sum) | wall ms per call |")
    print("| --- | --- | --- | --- | --- | --- |")
    with RedisServer(extra=["--slowlog-max-len", "200000"]) as server:
        r = server.client()
        r.hset("delayd:meta", "buckets", 1)
        client = Client.from_url(server.url)
        store = client.store
        r.config_set("slowlog-log-slower-than", 0)
        # 10,000 topics paused (Client.pause, one pause.lua per topic), then promote and claim.
        for i in range(args.paused):
            client.pause(f"paused{i}:notify")
        client.add("other", 1, push="out")

        def promote_all():
            while store.promote(0, 200, DAY_MS).full:
                pass
        measure(r, f"promote, {args.paused:,} paused, a task of another topic due", promote_all)
        measure(r, f"promote, {args.paused:,} paused, idle",
                lambda: [store.promote(0, 200, DAY_MS) for _ in range(args.calls)], args.calls)
        client.add_many([{"topic": "other", "id": i, "push": "out"} for i in range(10 * args.calls)])
        for _ in range(3):  # (a Redis refusing the promote leaves them delayed: then the claims find nothing)
            try:
                promote_all()
            except Exception:  # noqa: BLE001
                pass
        measure(r, f"claim (10 ready), {args.paused:,} paused",
                lambda: [store.claim(0, (5, 3, 2), 10, 60_000, DAY_MS) for _ in range(args.calls)], args.calls)
        if not args.topics:
            return
        r.flushall()
        r.hset("delayd:meta", "buckets", 1)
        client = Client.from_url(server.url)
        store = client.store
        # 1,000,000 topics of one pending task each (due in a day): stats and an idle promote.
        r.config_set("slowlog-log-slower-than", -1)
        start = time.perf_counter()
        fill(client, args.topics, 86_400)
        print(f"| (fill: {args.topics:,} topics in {time.perf_counter() - start:,.0f} s) | | | | | |", flush=True)
        r.config_set("slowlog-log-slower-than", 0)
        client.stats()  # (the client learns Redis's clock)
        measure(r, f"stats, {args.topics:,} topics", client.stats)
        measure(r, f"promote, {args.topics:,} topics, idle",
                lambda: [store.promote(0, 200, DAY_MS) for _ in range(args.calls)], args.calls)
        client.add_many([{"topic": f"tenant{i}:notify", "id": 2, "push": "out"} for i in range(200)])
        measure(r, f"promote, {args.topics:,} topics, 200 due (of 200 topics)", promote_all)
        client.close()


if __name__ == "__main__":
    main()
