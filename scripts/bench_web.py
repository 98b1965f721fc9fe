"""Dashboard page latency with many tasks stored: p50/p99 of each page over a scripted walk.

    ./scripts/bench-web                  1,000,000 tasks (about a minute to fill)
    ./scripts/bench-web --tasks 100000   a quicker run
Prints one line per page; the figure for BENCHMARKS.md is the p99 column.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from daemon_helper import Daemon  # noqa: E402
from redis_server import RedisServer, wait_for  # noqa: E402
from web_helper import Web  # noqa: E402

from delayd import Client  # noqa: E402

TOKEN = "bench"
RECURRING = 1000


def fill(client: Client, total: int) -> None:
    """`total` tasks: 2% failed and 3% ok (run by a real daemon), the rest delayed over 3 topics, and
    10 tasks of a rare topic and 1,000 recurring ones (every/cron over 4 topics) among them."""
    failed, ok = total // 50, total * 3 // 100
    client.add_many([{"topic": "webhook", "id": f"w{i}", "call": "delayd.examples:fail"} for i in range(failed)])
    client.add_many([{"topic": "report", "id": f"r{i}", "call": "delayd.examples:noop"} for i in range(ok)])
    wait_for(lambda: client.stats()["counts"]["delayed"] == 0, 600, 0.5, "the due tasks run")
    rest = total - failed - ok - 10 - RECURRING
    topics = ("order:cancel", "order:notify", "invoice")
    batch = 50_000
    for start in range(0, rest, batch):
        client.add_many([{"topic": topics[i % 3], "id": f"{i:07d}", "call": "delayd.examples:echo",
                          "delay": 3600 + i % 86400} for i in range(start, min(rest, start + batch))])
    client.add_many([{"topic": "rare", "id": f"rare{i}", "call": "delayd.examples:echo", "delay": 7200}
                     for i in range(10)])
    client.add_many([{"topic": f"sync:{i % 4}", "id": f"s{i:04d}", "call": "delayd.examples:echo",
                      **({"every": 3600 + i} if i % 2 else {"cron": f"{i % 60} 3 * * *", "tz": "Europe/Berlin"})}
                     for i in range(RECURRING)])


def walk(http, runs: int) -> dict[str, list[float]]:
    pages = {
        "overview /": "/",
        "list, any status": "/tasks",
        "list, failed": "/tasks?status=failed",
        "list, topic + delayed": "/tasks?topic=order:cancel&status=delayed",
        "search, topic + id prefix": "/tasks?topic=invoice&status=delayed&q=00012",
        "search, rare topic (1st page)": "/tasks?topic=rare",
        "task": "/tasks/order:cancel/0000003",
        "api stats": "/api/stats",
        "api tasks, failed by prefix": "/api/tasks?topic=webhook&status=failed&q=w1",
        "schedules": "/schedules",
        "schedules, topic + id prefix": "/schedules?topic=sync:1&q=s01",
        "api schedules": "/api/schedules",
    }
    cursor = http.get("/api/tasks", params={"topic": "order:cancel", "status": "delayed"}).json()["cursor"]
    pages["list, next page (cursor)"] = f"/api/tasks?topic=order:cancel&status=delayed&cursor={cursor}"
    cursor = http.get("/api/schedules").json()["cursor"]
    pages["schedules, next page (cursor)"] = f"/api/schedules?cursor={cursor}"
    return timed(http, pages, runs)


def timed(http, pages: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Each page (name: path) fetched `runs` times in turn: the times in ms per name."""
    times: dict[str, list[float]] = {name: [] for name in pages}
    for _ in range(runs):
        for name, path in pages.items():
            started = time.perf_counter()
            answer = http.get(path)
            times[name].append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, (path, answer.status_code)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50, help="walks over every page")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        with Daemon(server.url, Path(server.dir) / "state", buckets=4, queues=2):
            client = Client.from_url(server.url)
            began = time.monotonic()
            fill(client, args.tasks)
            stored = sum(client.stats()["counts"].values())
            print(f"{stored} tasks stored in {time.monotonic() - began:.0f} s", flush=True)
        with Web(server.url, DELAYD_WEB_TOKEN=TOKEN) as web, \
                web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            walk(http, 2)  # warm up (script loading, imports)
            times = walk(http, args.runs)
        print(f"{'page':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for name, values in times.items():
            values.sort()
            p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
            print(f"{name:34} {statistics.median(values):8.1f} {p99:8.1f} {values[-1]:8.1f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
