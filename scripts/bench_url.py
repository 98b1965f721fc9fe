"""`./scripts/bench --url`: URL delivery figures against a local HTTP server.

The server (scripts/url_server.py) runs in its own processes, answering `success` after
a configurable delay on 20 loopback addresses (127.0.0.2 … 127.0.0.21), the 20
"merchants". Figures, each the median of --runs runs: the HTTP client alone (the
ceiling), 10,000 URL tasks due at once at delay 0 and at delay 1 s (default settings),
2 of the 20 hosts never answering, and the RSS of one queue process with 5,000
requests in flight.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil

from bench import Figure, redis_now
from daemon_helper import Daemon
from redis_server import free_port, wait_for

from delayd import Client

ROOT = Path(__file__).resolve().parent.parent
N = 10_000
HOSTS = 20


class Merchants:
    """scripts/url_server.py in its own processes."""

    def __init__(self, delay: float = 0.0, dead: int = 0):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "url_server.py"), "--port", str(self.port),
                                      "--delay", str(delay), "--dead", str(dead)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def url(self, i: int) -> str:
        return f"http://127.0.0.{2 + i % HOSTS}:{self.port}/notify"

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


def deliver_all(client: Client, r, merchants: Merchants, n: int = N, hosts: range = range(HOSTS)) -> tuple:
    """n URL tasks due at one instant, spread over the hosts: seconds from the due time to
    the last success, of all and of the first 18 hosts' tasks (waiting only for `hosts`)."""
    due = redis_now(r) + 3.0 + n / 20_000
    tasks = [{"topic": "u", "id": i, "url": merchants.url(i), "method": "POST", "params": {"order": i}, "at": due}
             for i in range(n)]
    client.add_many(tasks)
    due = int(due * 1000) / 1000
    want = sum(1 for i in range(n) if i % HOSTS in hosts)
    wait_for(lambda: sum(r.zcard(k.done("ok")) for k in client.store.keys) >= want, 600, interval=0.1,
             message="deliveries")
    done = [(int(m.split(":")[1]), score / 1000) for k in client.store.keys
            for m, score in r.zrange(k.done("ok"), 0, -1, withscores=True)]
    return (max(t for _, t in done) - due, max(t for i, t in done if i % HOSTS < HOSTS - 2) - due)


def rss_in_flight(client: Client, r, daemon: Daemon, merchants: Merchants, n: int = 5000) -> float:
    """MB of RSS of the one queue process while n requests are in flight."""
    client.add_many([{"topic": "rss", "id": i, "url": merchants.url(i)} for i in range(n)])
    wait_for(lambda: client.stats()["counts"]["running"] >= n, 120, interval=0.5, message="all in flight")
    time.sleep(2)  # the requests are sent (running counts the claims)
    [queue] = [p for p in daemon.children() if "queue" in " ".join(p.cmdline())]
    return queue.memory_info().rss / 1e6


def run(server_url: str, r, work: Path, runs: int) -> str:
    figs = {k: Figure(*v) for k, v in {
        "ceiling": ("HTTP client alone (aiohttp, 1 process, 1,000 in flight), delay 0", "requests/s"),
        "d0": ("10,000 URL tasks due at once, delay 0", "deliveries/s"),
        "d0pct": ("… as % of the client alone", "%"),
        "d1": ("10,000 URL tasks due at once, delay 1 s, default settings", "deliveries/s", ">= 2,000"),
        "healthy": ("18 healthy hosts' 9,000 deliveries, all 20 hosts healthy, delay 1 s", "s"),
        "dead": ("… the same 9,000 with 2 of the 20 hosts never answering", "s"),
        "ratio": ("… ratio (dead / healthy)", "x", "<= 1.2"),
        "rss": ("RSS of one queue process with 5,000 requests in flight", "MB"),
    }.items()}
    for run_no in range(runs):
        print(f"url run {run_no + 1}/{runs}", flush=True)
        with Merchants(0.0) as m:
            figs["ceiling"].add(ceiling(m))
        for delay, key in ((0.0, "d0"), (1.0, "d1")):
            r.flushall()
            client = Client.from_url(server_url)
            with Merchants(delay) as m, Daemon(server_url, work / f"url{key}{run_no}", buckets=4, queues=2):
                total, eighteen = deliver_all(client, r, m)
            figs[key].add(N / total)
            if delay == 1.0:
                figs["healthy"].add(eighteen)
        figs["d0pct"].add(100 * figs["d0"].values[-1] / figs["ceiling"].values[-1])
        r.flushall()
        client = Client.from_url(server_url)
        with Merchants(1.0, dead=2) as m, Daemon(server_url, work / f"urldead{run_no}", buckets=4, queues=2):
            figs["dead"].add(deliver_all(client, r, m, hosts=range(HOSTS - 2))[1])
        figs["ratio"].add(figs["dead"].values[-1] / figs["healthy"].values[-1])
        r.flushall()
        client = Client.from_url(server_url)
        with Merchants(60.0) as m, Daemon(server_url, work / f"urlrss{run_no}", buckets=4, queues=1,
                                          DELAYD_URL_CONCURRENCY="5000", DELAYD_URL_HOST_CONCURRENCY="250",
                                          DELAYD_TASK_TIMEOUT="120", DELAYD_URL_TIMEOUT="100") as d:
            figs["rss"].add(rss_in_flight(client, r, d, m))
        r.flushall()
    lines = ["| figure | median | min–max | unit | target |", "| --- | --- | --- | --- | --- |",
             *[f.row() for f in figs.values()]]
    return "\n".join(lines)

