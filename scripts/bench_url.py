"""`./scripts/bench --url`: URL delivery figures against a local HTTP server.

The server (scripts/url_server.py) runs in its own processes, answering `success` after
a configurable delay on 20 loopback addresses (127.0.0.2 … 127.0.0.21), the 20
"merchants" (200 addresses for one row). Figures, each the median of --runs runs: the
HTTP client alone (the ceiling), 10,000 URL tasks due at once at delay 0 and at delay
1 s (default settings, then with the in-flight caps raised: DELAY1_ROWS), 2 of the 20
hosts never answering, and the RSS of one queue process with 5,000 requests in flight. Each delivery
row also gives the CPU µs per delivery of the queue processes, Redis and the merchants' server.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import url_server
from bench import Figure, redis_now
from daemon_helper import Daemon
from redis_server import free_port, wait_for

from delayd import Client

ROOT = Path(__file__).resolve().parent.parent
N = 10_000
HOSTS = 20


class Merchants:
    """scripts/url_server.py in its own processes."""

    def __init__(self, delay: float = 0.0, dead: int = 0, hosts: int = HOSTS):
        self.port, self.hosts, self.addresses = free_port(), hosts, url_server.addresses(hosts)
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "url_server.py"), "--port", str(self.port),
                                      "--delay", str(delay), "--dead", str(dead), "--hosts", str(hosts)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def url(self, i: int) -> str:
        return f"http://{self.addresses[i % self.hosts]}:{self.port}/notify"

    def __enter__(self) -> "Merchants":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def ceiling(merchants: Merchants, n: int = N, in_flight: int = 1000) -> float:
    """The HTTP client alone, one process: POSTs/s at delay 0 (as the engine sends them)."""
    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=in_flight, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:
            gate = asyncio.Semaphore(in_flight)

            async def one(i: int) -> None:
                async with gate, session.post(merchants.url(i), data=b"order=5", allow_redirects=False) as resp:
                    assert await resp.read() == b"success"
            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return n / (time.perf_counter() - start)
    return asyncio.run(main())


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User+sys CPU seconds the processes used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def deliver_all(client: Client, r, merchants: Merchants, n: int = N, dead: int = 0,
                groups: dict[str, list[psutil.Process]] | None = None) -> tuple:
    """n URL tasks due at one instant, spread over the hosts: seconds from the due time to
    the last success, of all and of the hosts' but the last two (waiting for all but the
    `dead` last hosts' tasks); and each group's CPU µs per delivery from the end of the add
    to the last delivery (user+sys: far less load-sensitive than the rate)."""
    hosts, groups = merchants.hosts, groups or {}
    due = redis_now(r) + 3.0 + n / 20_000
    tasks = [{"topic": "u", "id": i, "url": merchants.url(i), "method": "POST", "params": {"order": i}, "at": due}
             for i in range(n)]
    client.add_many(tasks)
    before = {name: cpu_seconds(procs) for name, procs in groups.items()}
    due = int(due * 1000) / 1000
    want = sum(1 for i in range(n) if i % hosts < hosts - dead)
    wait_for(lambda: sum(r.zcard(k.done("ok")) for k in client.store.keys) >= want, 600, interval=0.1,
             message="deliveries")
    cpu = {name: 1e6 * (cpu_seconds(procs) - before[name]) / want for name, procs in groups.items()}
    done = [(int(m.split(":")[1]), score / 1000) for k in client.store.keys
            for m, score in r.zrange(k.done("ok"), 0, -1, withscores=True)]
    return (max(t for _, t in done) - due, max(t for i, t in done if i % hosts < hosts - 2) - due, cpu)


def cpu_groups(r, daemon: Daemon, merchants: Merchants) -> dict[str, list[psutil.Process]]:
    """The processes whose CPU a delivery row counts: the queue processes, Redis, the merchants' server."""
    server = psutil.Process(merchants.proc.pid)
    return {"queue": daemon.children("queue"), "redis": [psutil.Process(r.info("server")["process_id"])],
            "server": [server, *server.children()]}


def rss_in_flight(client: Client, r, daemon: Daemon, merchants: Merchants, n: int = 5000) -> float:
    """MB of RSS of the one queue process while n requests are in flight."""
    client.add_many([{"topic": "rss", "id": i, "url": merchants.url(i)} for i in range(n)])
    wait_for(lambda: client.stats()["counts"]["running"] >= n, 120, interval=0.5, message="all in flight")
    time.sleep(2)  # the requests are sent (running counts the claims)
    [queue] = [p for p in daemon.children() if "queue" in " ".join(p.cmdline())]
    return queue.memory_info().rss / 1e6


# The delay-1 s rows: (key, name, hosts, settings). Little's law caps each at
# (requests in flight) / 1 s; the note under the table says which cap binds.
DELAY1_ROWS = (
    ("d1", "10,000 URL tasks due at once, delay 1 s, default settings (20 hosts: cap 20 x 16 x 2 = 640/s)",
     HOSTS, {}),
    ("d1h64", "… url_host_concurrency 64 (cap: url_concurrency 1,000 x 2 = 2,000/s)",
     HOSTS, {"DELAYD_URL_HOST_CONCURRENCY": "64"}),
    ("d1h200", "… default settings, 200 hosts (cap: url_concurrency 1,000 x 2 = 2,000/s)", 200, {}),
    ("d1big", "… url_host_concurrency 128, url_concurrency 2,500 (cap 5,000/s: the engine itself)",
     HOSTS, {"DELAYD_URL_HOST_CONCURRENCY": "128", "DELAYD_URL_CONCURRENCY": "2500"}),
)
NOTE = ("At a server delay of 1 s a delivery holds its slot for 1 s, so deliveries/s cannot exceed "
        "the requests in flight (Little's law). With the defaults pinned by SPEC section 7 that is "
        "20 hosts x url_host_concurrency 16 x 2 queue processes = 640, and with any number of hosts "
        "url_concurrency 1,000 x 2 processes = 2,000: the 2,000/s target needs more in flight than "
        "the defaults allow (a higher url_concurrency, or more queue processes); the last row shows "
        "what the engine does once the caps are out of the way. 10,000 tasks include the ramp: the "
        "first wave opens every connection.")


ROWS = ("d0", *(key for key, *_ in DELAY1_ROWS))  # the delivery rows --url-rows can pick
CPU_GROUPS = {"queue": "the 2 queue processes", "redis": "Redis", "server": "the merchants' server"}


def run(server_url: str, r, work: Path, runs: int, rows: frozenset[str] | None = None) -> str:
    """The table of URL figures; `rows`: only these delivery rows (of ROWS), nothing else, to measure one
    row alone (alternating two versions on a busy host takes many short runs)."""
    figs = {k: Figure(*v) for k, v in {
        "ceiling": ("HTTP client alone (aiohttp, 1 process, 1,000 in flight), delay 0", "requests/s"),
        "d0": ("10,000 URL tasks due at once, delay 0", "deliveries/s"),
        "d0pct": ("… as % of the client alone", "%"),
        **{key: (name, "deliveries/s", ">= 2,000") for key, name, _, _ in DELAY1_ROWS},
        **{f"{key}{group}": (f"… {key}: CPU per delivery, {what}", "µs") for key in ROWS
           for group, what in CPU_GROUPS.items()},
        "healthy": ("18 healthy hosts' 9,000 deliveries, all 20 hosts healthy, delay 1 s", "s"),
        "dead": ("… the same 9,000 with 2 of the 20 hosts never answering", "s"),
        "ratio": ("… ratio (dead / healthy)", "x", "<= 1.2"),
        "rss": ("RSS of one queue process with 5,000 requests in flight", "MB"),
    }.items()}
    for run_no in range(runs):
        print(f"url run {run_no + 1}/{runs}", flush=True)
        if rows is None:
            with Merchants(0.0) as m:
                figs["ceiling"].add(ceiling(m))
        for key, delay, hosts, env in (("d0", 0.0, HOSTS, {}), *((k, 1.0, h, e) for k, _, h, e in DELAY1_ROWS)):
            if rows is not None and key not in rows:
                continue
            r.flushall()
            client = Client.from_url(server_url)
            with Merchants(delay, hosts=hosts) as m, Daemon(server_url, work / f"url{key}{run_no}", buckets=4,
                                                            queues=2, **env) as d:
                total, eighteen, cpu = deliver_all(client, r, m, groups=cpu_groups(r, d, m))
            figs[key].add(N / total)
            for group, used in cpu.items():
                figs[f"{key}{group}"].add(used)
            if key == "d1":
                figs["healthy"].add(eighteen)
        if rows is not None:
            continue
        figs["d0pct"].add(100 * figs["d0"].values[-1] / figs["ceiling"].values[-1])
        r.flushall()
        client = Client.from_url(server_url)
        with Merchants(1.0, dead=2) as m, Daemon(server_url, work / f"urldead{run_no}", buckets=4, queues=2):
            figs["dead"].add(deliver_all(client, r, m, dead=2)[1])
        figs["ratio"].add(figs["dead"].values[-1] / figs["healthy"].values[-1])
        r.flushall()
        client = Client.from_url(server_url)
        with Merchants(60.0) as m, Daemon(server_url, work / f"urlrss{run_no}", buckets=4, queues=1,
                                          DELAYD_URL_CONCURRENCY="5000", DELAYD_URL_HOST_CONCURRENCY="250",
                                          DELAYD_TASK_TIMEOUT="120", DELAYD_URL_TIMEOUT="100") as d:
            figs["rss"].add(rss_in_flight(client, r, d, m))
        r.flushall()
    lines = ["| figure | median | min–max | unit | target |", "| --- | --- | --- | --- | --- |",
             *[f.row() for f in figs.values() if f.values or rows is None], "", NOTE]
    return "\n".join(lines)
