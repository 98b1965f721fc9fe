"""`./scripts/bench --only http`: the HTTP producer API against its ceiling, in one run.

(a) the ceiling: a bare Starlette app with one JSON POST endpoint (it parses the body and answers
201 {"added": true}), served by uvicorn with the settings `delayd web` uses
(delayd.web.command.server_settings, on a socket opened by its listen); (b) delayd's POST
/api/tasks, one task per request; (c) batches of 1,000 tasks per request. The same load generator
drives all three: this process, keep-alive HTTP/1.1 connections with several requests in
flight (one per connection), each request's bytes built in advance, answers read by
Content-Length (a wrk-like client on asyncio, much lighter than an HTTP library's). Client,
server and Redis share the machine's cores, so on a busy host the rates move with the neighbours'
load; the server's CPU time per request (its process's user + system time over every answer)
moves much less, and their ratio is what a host where the server is the bottleneck would see.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import psutil
from bench import Figure
from redis_server import free_port, wait_for
from web_helper import Web, answers

TOKEN = "bench-producer-token"
SINGLE_CONNS = 16     # single adds in flight
BATCH_CONNS = 4       # batches in flight
BATCH = 1000
SECONDS = 3.0         # measured per figure, after WARMUP
WARMUP = 0.5


def request(port: int, body: bytes) -> bytes:
    return (f"POST /api/tasks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def single_bodies(n: int) -> list[bytes]:
    return [json.dumps({"topic": "bench", "id": i, "call": "delayd.examples:noop", "delay": 3600}).encode()
            for i in range(n)]


def batch_bodies(n: int) -> list[bytes]:
    return [json.dumps([{"topic": "bench", "id": b * BATCH + i, "call": "delayd.examples:noop", "delay": 3600}
                        for i in range(BATCH)]).encode() for b in range(n)]


async def _connection(port: int, requests: list[bytes], first: int, step: int, stop: list[float],
                      done: list[int]) -> None:
    """Send requests[first], requests[first + step], … one at a time on one kept-alive connection
    until the stop time; count the answers (done[1]) and those after the warm-up (done[0]), check
    their status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i, warm = first, stop[1]
    while True:
        writer.write(requests[i % len(requests)])
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 201")):
            raise SystemExit(f"bench_http: answer {head[:60]!r}")
        length = int(head.lower().partition(b"content-length:")[2].partition(b"\r\n")[0])
        await reader.readexactly(length)
        now = time.perf_counter()
        done[1] += 1
        if now >= warm:
            done[0] += 1
        if now >= stop[0]:
            break
        i += step
    writer.close()


def load(port: int, pid: int, requests: list[bytes], conns: int, seconds: float = SECONDS) -> tuple[float, float]:
    """(requests answered per second over `seconds`, µs of CPU the server (process `pid`) spent per
    request), with `conns` connections each keeping one in flight."""
    async def main() -> list[int]:
        start = time.perf_counter()
        stop, done = [start + WARMUP + seconds, start + WARMUP], [0, 0]
        await asyncio.gather(*(_connection(port, requests, c, conns, stop, done) for c in range(conns)))
        return done
    server = psutil.Process(pid)
    before = sum(server.cpu_times()[:2])
    measured, total = asyncio.run(main())
    return measured / seconds, 1e6 * (sum(server.cpu_times()[:2]) - before) / total


def serve_ceiling(port: int) -> None:
    """The ceiling's server (run in its own process by Ceiling)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from delayd.config import Config
    from delayd.web.command import listen, server_settings

    async def add(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse({"added": True}, 201)

    async def ping(request: Request) -> JSONResponse:
        return JSONResponse({})

    config = Config(web_port=port)
    app = Starlette(routes=[Route("/api/tasks", add, methods=["POST"]), Route("/static/app.css", ping)])
    uvicorn.Server(uvicorn.Config(app, **server_settings(config))).run(sockets=[listen(config)])


class Ceiling:
    """serve_ceiling in a process of its own, like `delayd web`."""

    def __enter__(self) -> "Ceiling":
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--ceiling", str(self.port)])
        wait_for(lambda: answers(self.base), 30, message="the ceiling's server answering")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def figures() -> dict[str, Figure]:
    return {k: Figure(*v) for k, v in {
        "http_ceiling": (f"HTTP ceiling: bare Starlette JSON POST endpoint, uvicorn as `delayd web` runs it, "
                         f"{SINGLE_CONNS} keep-alive connections", "requests/s"),
        "http_add": ("HTTP producer: POST /api/tasks, one task per request, the same load", "tasks/s"),
        "http_pct": ("HTTP producer: single adds as % of that ceiling (per round)", "%", ">= 50 %"),
        "http_batch": (f"HTTP producer: POST /api/tasks, batches of {BATCH:,}, {BATCH_CONNS} in flight", "tasks/s",
                       ">= 50,000"),
        "http_ceiling_cpu": ("… CPU of the ceiling's server per request", "µs"),
        "http_add_cpu": ("… CPU of `delayd web` per single add", "µs"),
        "http_cpu_pct": ("… the ceiling's CPU per request as % of delayd's per single add (per round)", "%"),
        "http_batch_cpu": ("… CPU of `delayd web` per task in batches of 1,000", "µs"),
    }.items()}


def run_round(redis_url: str, r, figs: dict[str, Figure]) -> None:
    """One round of the three figures (the ceiling first, then delayd on a flushed Redis)."""
    singles = single_bodies(200_000)
    with Ceiling() as ceiling:
        rate, cpu = load(ceiling.port, ceiling.proc.pid, [request(ceiling.port, b) for b in singles], SINGLE_CONNS)
        figs["http_ceiling"].add(rate)
        figs["http_ceiling_cpu"].add(cpu)
    r.flushall()
    with Web(redis_url, DELAYD_PRODUCER_TOKEN=TOKEN) as web:
        rate, cpu = load(web.port, web.proc.pid, [request(web.port, b) for b in singles], SINGLE_CONNS)
        figs["http_add"].add(rate)
        figs["http_add_cpu"].add(cpu)
        figs["http_pct"].add(100 * rate / figs["http_ceiling"].values[-1])
        figs["http_cpu_pct"].add(100 * figs["http_ceiling_cpu"].values[-1] / cpu)
        r.flushall()
        batches = [request(web.port, b) for b in batch_bodies(400)]
        rate, cpu = load(web.port, web.proc.pid, batches, BATCH_CONNS)
        figs["http_batch"].add(BATCH * rate)
        figs["http_batch_cpu"].add(cpu / BATCH)
    r.flushall()


if __name__ == "__main__" and sys.argv[1:2] == ["--ceiling"]:
    serve_ceiling(int(sys.argv[2]))
