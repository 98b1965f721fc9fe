"""delayd benchmarks (run through ./scripts/bench). Every figure is the median of
--runs runs (default 3) with min-max; the Redis ceiling is measured in the same run.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import psutil  # noqa: E402
from cluster_helper import Cluster  # noqa: E402
from daemon_helper import Daemon  # noqa: E402
from redis_server import RedisServer, has_functions, wait_for  # noqa: E402

from delayd import Client  # noqa: E402
from delayd.daemon.embedded import RECORD_SETTINGS, find_redis_server  # noqa: E402

N = 20_000
TABLE_SECTION = "## The full table"  # the section of BENCHMARKS.md a whole run (no --only) rewrites
REDIS7 = "/usr/bin/redis-server"  # where the PHP and Node rows run when present (producers_server)
NOOP, RPUSH = "delayd.examples:noop", "bench_handlers:rpush"  # RPUSH: one Redis round trip per run
MOVE_LUA = """
local m = redis.call('ZRANGE', KEYS[1], 0, 99)
if #m > 0 then redis.call('RPUSH', KEYS[2], unpack(m)); redis.call('ZREM', KEYS[1], unpack(m)) end
return #m
"""


class Figure:
    def __init__(self, name: str, unit: str, target: str = ""):
        self.name, self.unit, self.target, self.values = name, unit, target, []

    def add(self, value: float) -> None:
        self.values.append(value)

    def row(self) -> str:
        if not self.values:
            return f"| {self.name} | - | - | {self.unit} | {self.target} |"
        med = statistics.median(self.values)
        return (f"| {self.name} | {fmt(med)} | {fmt(min(self.values))}–{fmt(max(self.values))} | "
                f"{self.unit} | {self.target} |")


def fmt(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}"


def redis_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    beside = Path(find_redis_server()).parent / name
    return str(beside) if beside.exists() else None


# -- the Redis ceiling -----------------------------------------------------------------
def zadd_ceiling(server: RedisServer, pipeline: int) -> float:
    """ZADD ops/s: redis-benchmark if installed, else redis-cli (--pipe / one by one)."""
    bench = redis_tool("redis-benchmark")
    if bench:
        out = subprocess.run([bench, "-p", str(server.port), "-n", "200000" if pipeline > 1 else "50000",
                              "-c", "1" if pipeline == 1 else "4", "-P", str(pipeline), "-q", "-r", "100000",
                              "ZADD", "ceil", "__rand_int__", "m:__rand_int__"],
                             capture_output=True, text=True, check=True).stdout
        return float(out.split(":")[-1].split()[0].replace(",", ""))
    cli = redis_tool("redis-cli")
    n = 200_000 if pipeline > 1 else 20_000
    if pipeline > 1:
        payload = "".join(f"*4\r\n$4\r\nZADD\r\n$4\r\nceil\r\n${len(str(i))}\r\n{i}\r\n${len(str(i)) + 2}\r\nm:{i}\r\n"
                          for i in range(n)).encode()
        start = time.perf_counter()
        subprocess.run([cli, "-p", str(server.port), "--pipe"], input=payload, capture_output=True, check=True)
        return n / (time.perf_counter() - start)
    return cli_round_trips(server, n)


def socket_round_trips(server: RedisServer, n: int) -> float:
    """ZADD ops/s, one at a time, from Python on a bare socket (no client library, no parsing
    beyond the reply's end): the fastest sequential round trip a Python client can make."""
    command = b"*4\r\n$4\r\nZADD\r\n$4\r\nceil\r\n$1\r\n1\r\n$1\r\nm\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for _ in range(n):
            sock.sendall(command)
            reply = sock.recv(64)
            while not reply.endswith(b"\r\n"):
                reply += sock.recv(64)
        return n / (time.perf_counter() - start)


def cli_round_trips(server: RedisServer, n: int, cpus: set[int] | None = None) -> float:
    """ZADD ops/s, one at a time, from redis-cli (-r), on `cpus` if given."""
    start = time.perf_counter()
    subprocess.run([redis_tool("redis-cli"), "-p", str(server.port), "-r", str(n), "ZADD", "ceil", "1", "m"],
                   capture_output=True, check=True,
                   preexec_fn=(lambda: psutil.Process().cpu_affinity(sorted(cpus))) if cpus else None)
    return n / (time.perf_counter() - start)


class Placement:
    """Pins this process and Redis to given vCPUs for a measurement, then undoes it.

    On a VM, waking a process on another idle vCPU costs tens of µs (an IPI through the
    hypervisor): a one-client round trip takes ~60 µs here when client and server sit on
    different vCPUs and ~15 µs when they share one. Left to the scheduler, a run lands on
    either, so a ratio of two figures taken at different moments swings by 3x. Pinning
    both sides makes `add` and the round trip it is compared with pay the same wake-ups.
    """

    def __init__(self, server: RedisServer, client_cpu: int, server_cpu: int):
        self.me, self.redis = psutil.Process(), psutil.Process(server.proc.pid)
        self.cpus = ({client_cpu}, {server_cpu})

    def __enter__(self) -> "Placement":
        self.saved = self.me.cpu_affinity(), self.redis.cpu_affinity()
        self.me.cpu_affinity(sorted(self.cpus[0]))
        self.redis.cpu_affinity(sorted(self.cpus[1]))
        return self

    def __exit__(self, *exc: object) -> None:
        self.me.cpu_affinity(self.saved[0])
        self.redis.cpu_affinity(self.saved[1])


def add_against_round_trip(server: RedisServer, client: Client, r, figs: dict, first: int,
                           rounds: int = 5, n: int = 4_000) -> None:
    """`add` beside the one-client round trip, client and Redis pinned to different vCPUs
    (as a web application and its Redis are), in alternating rounds so that both see the
    same machine; the ratio is taken per round. Also the round trip on one shared vCPU,
    which shows what the wake-ups cost."""
    ratios, socket_rt, cli_rt, adds, shared = [], [], [], [], []
    with Placement(server, 0, 1):
        for k in range(rounds):
            socket_rt.append(socket_round_trips(server, n))
            cli_rt.append(cli_round_trips(server, n, {0}))
            adds.append(enqueue_single(client, r, n, first=first + k * n))
            ratios.append(100 * adds[-1] / max(socket_rt[-1], cli_rt[-1]))
    with Placement(server, 0, 0):
        shared.append(socket_round_trips(server, n))
    for name, values in (("rt_socket", socket_rt), ("rt_cli", cli_rt), ("add_pinned", adds),
                         ("addpct", ratios), ("rt_shared", shared)):
        figs[name].add(statistics.median(values))


def producers_server(server: RedisServer, work: Path) -> tuple[RedisServer, str]:
    """The Redis the PHP and Node rows run on, and what their label says of it: Debian's Redis 7
    (/usr/bin/redis-server) when installed, where the clients call delayd's function library (FCALL) as
    their users on Redis >= 7 and Valkey get; else the bench's own Redis (6.2 as embedded: EVALSHA)."""
    if not os.access(REDIS7, os.X_OK):
        return server, " (the bench's Redis: EVALSHA)"
    other = RedisServer(str(work / "redis7"), extra=RECORD_SETTINGS, binary=REDIS7).start()
    spoken = "FCALL" if has_functions(other.client()) else "EVALSHA"
    return other, f" (Redis {other.client().info('server')['redis_version']} from {REDIS7}: `add` by {spoken})"


def lua_move_ceiling(server: RedisServer) -> float:
    """Calls/s of one Lua call moving 100 members zset -> list, from one client."""
    r = server.client()
    sha = r.script_load(MOVE_LUA)
    r.delete("z", "l")
    calls = 2000
    pipe = r.pipeline(transaction=False)
    for i in range(calls * 100):
        pipe.zadd("z", {f"m{i}": i})
        if i % 10000 == 9999:
            pipe.execute()
    pipe.execute()
    start = time.perf_counter()
    for _ in range(calls):
        r.evalsha(sha, 2, "z", "l")
    elapsed = time.perf_counter() - start
    r.delete("z", "l")
    return calls / elapsed


# -- delayd ----------------------------------------------------------------------------
def redis_now(r) -> float:
    reply = r.time()
    if isinstance(reply, dict):  # RedisCluster asks every node; any one will do
        reply = next(iter(reply.values()))
    s, us = reply
    return s + us / 1e6


def minimal_task(i: int, due: float | None = None) -> dict[str, Any]:
    """The minimal task of most rows: a topic, an id, a call (due in an hour unless `due` is given)."""
    return {"topic": "bench", "id": i, "call": NOOP, **({"delay": 3600} if due is None else {"at": due})}


def realistic_task(i: int, due: float | None = None) -> dict[str, Any]:
    """A task as users add it (the rows marked "realistic"): an absolute due time (`at`, an hour
    ahead unless `due` is given), a callback and ~110 bytes of params, a few str and int fields."""
    return {"topic": "orders", "id": f"ord-{i}", "call": NOOP, "callback": NOOP,
            "at": time.time() + 3600 if due is None else due,
            "params": {"order": f"ord-{i:08d}", "customer": f"cus_{i % 9973:06d}", "amount_cents": 4990 + i % 500,
                       "currency": "EUR", "attempt": 1, "reason": "payment_pending"}}


def enqueue_single(client: Client, r, n: int = N, first: int = 0, task: Callable = minimal_task) -> float:
    """`add` one at a time: tasks/s (ids from `first`, on top of whatever is pending)."""
    items = [task(i) for i in range(first, first + n)]
    start = time.perf_counter()
    for item in items:
        client.add(**item)
    return n / (time.perf_counter() - start)


def enqueue_many(client: Client, r, n: int = N, first: int = 0, task: Callable = minimal_task) -> float:
    items = [task(i) for i in range(first, first + n)]
    start = time.perf_counter()
    client.add_many(items)
    return n / (time.perf_counter() - start)


class AddProbe(threading.Thread):
    """While a drain runs: one `add` every 10 ms, timing each round trip (is adding starved?)."""

    def __init__(self, client: Client):
        super().__init__(daemon=True)
        self.client, self.stop, self.ms = client, threading.Event(), []

    def run(self) -> None:
        i = 0
        while not self.stop.wait(0.01):
            start = time.perf_counter()
            self.client.add("probe", i, call="delayd.examples:noop", delay=3600)
            self.ms.append((time.perf_counter() - start) * 1000)
            i += 1

    def result(self) -> tuple[float, float]:
        self.stop.set()
        self.join()
        ms = sorted(self.ms)
        return ms[int(len(ms) * 0.99) - 1], ms[-1]


def last_finish(client: Client, r) -> float:
    """The latest finish time (s) over every bucket's done:ok index (its top entry: O(log N))."""
    return max(score for keys in client.store.keys
               for _, score in r.zrevrange(keys.done("ok"), 0, 0, withscores=True)) / 1000


def handler_env(url: str) -> dict[str, str]:
    """Daemon settings that let it import scripts/bench_handlers.py (its Redis: `url`)."""
    return {"PYTHONPATH": f"{ROOT / 'tests'}:{ROOT / 'scripts'}", "BENCH_REDIS_URL": url,
            "DELAYD_ALLOWED_MODULES": "delayd.examples,bench_handlers"}


def drain(client: Client, r, n: int = N, call: str = NOOP, task: Callable = minimal_task, written=lambda: None,
          writes: float = 25_000) -> float:
    """n tasks (`task`'s, of topic `drain`, running `call`) due at one instant: tasks/s from the due
    time to the last finish (`written()` is called once they are all written, before they are due if
    they are written at `writes` per s)."""
    for keys in client.store.keys:
        r.delete(keys.done("ok"))
    due = redis_now(r) + 3.0 + n / writes  # every task is written before the first is due
    for i in range(0, n, 20_000):
        client.add_many([{**task(j, due), "topic": "drain", "call": call} for j in range(i, min(n, i + 20_000))])
    written()
    due = int(due * 1000) / 1000  # the due time as stored (ms)
    wait_for(lambda: sum(r.zcard(k.done("ok")) for k in client.store.keys) >= n, 600, interval=0.05,
             message="drain")
    last = last_finish(client, r)
    return n / (last - due)


def lateness(client: Client, r) -> tuple[float, float, float, int]:
    """1,000 tasks spread over 20 s: start minus due (ms, by Redis time)."""
    start = redis_now(r) + 1.0
    client.add_many([{"topic": "late", "id": i, "call": "delayd.examples:noop", "at": start + i * 0.02}
                     for i in range(1000)])
    wait_for(lambda: client.stats()["counts"]["ok"] >= 1000 + client_ok_base[0], 60, interval=0.2,
             message="lateness run")
    tasks = client.list(topic="late", limit=2000)
    late = sorted((t.last_run_at - t.due_at) * 1000 for t in tasks)
    early = sum(1 for x in late if x < 0)
    for t in tasks:
        client.delete("late", t.id, hard=True)
    return statistics.median(late), late[int(len(late) * 0.99) - 1], late[-1], early


client_ok_base = [0]


def idle_cpu(daemon: Daemon, seconds: float = 10.0) -> float:
    procs = [daemon.master] + daemon.children()
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    start = time.monotonic()
    time.sleep(seconds)  # the measurement window itself
    used = sum(sum(p.cpu_times()[:2]) - before[p.pid] for p in procs if p.is_running())
    return 100.0 * used / (time.monotonic() - start)


def memory_per_task(client: Client, r, n: int, task: Callable = minimal_task) -> float:
    r.flushall()
    base = r.info("memory")["used_memory"]
    for i in range(0, n, 20_000):
        client.add_many([{**task(j), "topic": "m"} for j in range(i, min(n, i + 20_000))])
    used = r.info("memory")["used_memory"] - base
    return used / n


def pause_cost(client: Client, r, backlog: int) -> tuple[float, float, float, int]:
    """Pause a topic of 10 ready tasks behind `backlog` ready tasks of another topic: its script
    calls' median and slowest Redis time (SLOWLOG, ms), the pause's wall time (ms) and its calls."""
    r.flushall()
    for i in range(0, backlog, 20_000):
        client.add_many([{"topic": "backlog", "id": j, "call": NOOP, "delay": 0}
                         for j in range(i, min(backlog, i + 20_000))])
    client.add_many([{"topic": "tiny", "id": j, "call": NOOP, "delay": 0} for j in range(10)])
    for bucket in range(client.store.buckets):
        while client.store.promote(bucket, 1000, 86_400_000).full:
            pass
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    start = time.perf_counter()
    client.pause("tiny")
    wall = (time.perf_counter() - start) * 1000
    calls = [e["duration"] / 1000 for e in r.slowlog_get(100_000) if e["command"].startswith(SCRIPT_CALLS)]
    r.config_set("slowlog-log-slower-than", 10_000)
    r.flushall()
    return statistics.median(calls), max(calls), wall, len(calls)


def url_figures(runs: int, rows: frozenset[str] | None = None) -> None:
    import bench_url
    work = Path(tempfile.mkdtemp(prefix="delayd-bench-url-"))
    server = RedisServer(str(work / "redis")).start()
    try:
        print(bench_url.run(server.url, server.client(), work, runs, rows))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


SCRIPT_CALLS = (b"EVALSHA", b"FCALL")  # delayd's script calls in SLOWLOG: 6.2's, and functions' (Redis >= 7, Valkey)
UNBINDING = {"rate": "1000000/s", "concurrency": 1_000_000}  # a limit that never holds a task back here


def limited_claim_us(client: Client, r, limited: bool, calls: int = 50, n: int = 100) -> float:
    """Redis µs (INFO commandstats: its own CPU) of one claim.lua call taking `n` ready tasks of one topic,
    with a limit on the topic that does not bind (`limited`) or none."""
    r.flushall()
    if limited:
        client.set_limit("claimed", **UNBINDING)
    store = client.store
    client.add_many([{"topic": "claimed", "id": i, "call": NOOP} for i in range(2 * calls * n)])  # (spread)
    for b in range(store.buckets):
        while store.promote(b, 1000, 60_000).full:
            pass
    r.config_resetstat()
    made = 0
    for b in itertools.cycle(range(store.buckets)):
        if made == calls:
            break
        if r.llen(store.keys[b].ready[1]) >= n:
            store.claim(b, (5, 3, 2), n, 60_000, 60_000)
            made += 1
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in ("evalsha", "fcall", "fcall_ro")) / calls


PARTS = ("add", "add_many", "mem", "drain", "drainio", "cluster", "lateness", "pause", "php", "node", "http",
         "limits")  # --only's names


def names_of(text: str, known: tuple[str, ...], what: str) -> set[str]:
    """A comma-separated list of names, each one of `known` (argparse's error otherwise)."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - set(known)
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(sorted(unknown)) or '(none)'}; "
                                         f"choose from {', '.join(known)}")
    return names


def parts(text: str) -> set[str]:
    """--only's value: names of PARTS, comma-separated."""
    return names_of(text, PARTS, "part")


def url_rows(text: str) -> frozenset[str]:
    """--url-rows' value: delivery rows of scripts/bench_url.py (ROWS), comma-separated."""
    import bench_url
    return frozenset(names_of(text, bench_url.ROWS, "row"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also 1M pending and 1M due at once")
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument("--url", action="store_true", help="only the URL delivery figures (scripts/bench_url.py), printed")
    ap.add_argument("--url-rows", type=url_rows, default=None, metavar="ROW[,ROW]",
                    help="with --url: only these delivery rows (d0, d1, d1h64, d1h200, d1big), e.g. the 200-host "
                         "row alone: --url --url-rows d1h200 --runs 5")
    ap.add_argument("--only", type=parts, default=None, metavar="NAME[,NAME]",
                    help=f"run just these parts ({', '.join(PARTS)}; the Redis ceiling always), print the "
                         "table and write no BENCHMARKS.md")
    ap.add_argument("--huge", action="store_true", help="only the ten-million-pending figures (scripts/bench_huge.py),"
                    " a server at a time, into BENCHMARKS.md's section \"Ten million pending\"")
    ap.add_argument("--huge-count", type=int, default=10_000_000, help="--huge: tasks pending (a tenth: the wave)")
    ap.add_argument("--servers", default="6.2,7.0,8.0", help="--huge: 6.2 (embedded), 7.0, 8.0 (Valkey) or paths")
    args = ap.parse_args()
    if args.url_rows is not None and not args.url:
        ap.error("--url-rows: only with --url")
    if args.url:
        return url_figures(args.runs, args.url_rows)
    if args.huge:
        import bench_huge
        return bench_huge.main(args.servers.split(","), args.huge_count,
                               Path(args.out) if args.huge_count == 10_000_000 else None)
    want = (lambda part: True) if args.only is None else args.only.__contains__

    work = Path(tempfile.mkdtemp(prefix="delayd-bench-"))
    server = RedisServer(str(work / "redis"), extra=RECORD_SETTINGS).start()  # as the embedded Redis
    r = server.client()
    version = r.info("server")["redis_version"]
    producers, producers_note = producers_server(server, work) if want("php") or want("node") else (server, "")
    figs = {k: Figure(*v) for k, v in {
        "zadd1": ("Redis ZADD, no pipelining (one client's sequential round trip; placement left to the scheduler)",
                  "ops/s"),
        "zaddp": ("Redis ZADD, pipelined", "ops/s"),
        "lua": ("Redis Lua move of 100 members (calls/s)", "calls/s"),
        "luam": ("Redis Lua move of 100 members (members/s)", "members/s"),
        "add": ("enqueue: `add`, one at a time, awaited", "tasks/s", ">= 8,000"),
        "add_real": ("enqueue: `add` of a realistic task (at, callback, ~110 B of params), one at a time, awaited",
                     "tasks/s"),
        "rt_socket": ("one-client ZADD round trip, Python bare socket, client and Redis pinned to 2 vCPUs",
                      "ops/s"),
        "rt_cli": ("… the same with redis-cli", "ops/s"),
        "add_pinned": ("enqueue: `add`, one at a time, placed the same way (rounds alternating with the two above)",
                       "tasks/s"),
        "addpct": ("enqueue: `add` as % of the faster of those round trips (per round)", "%", ">= 75 %"),
        "rt_shared": ("one-client ZADD round trip, Python bare socket, client and Redis on 1 vCPU", "ops/s"),
        "many": ("enqueue: `add_many`", "tasks/s", ">= 100,000"),
        "manypct": ("enqueue: `add_many` as % of pipelined ZADD", "%", ">= 35 %"),
        "many_real": ("enqueue: `add_many` of realistic tasks (right after the row above, 20,000 each)", "tasks/s"),
        "many_realpct": ("… as % of `add_many` of minimal tasks (per run)", "%", ">= 75 %"),
        "drain1": ("drain 20,000 due at once, 1 queue process", "tasks/s"),
        "drain2": ("drain 20,000 due at once, 2 queue processes", "tasks/s", ">= 20,000"),
        "drain_real": ("drain 20,000 realistic tasks (no-op call and callback) due at once, 2 queue processes",
                       "tasks/s"),
        "drainio": ("drain 20,000 due at once, handler does one RPUSH on its own connection, 2 queue processes",
                    "tasks/s", ">= 12,000"),
        "drainfree": ("drain 20,000 due at once, 2 queue processes, no limit (paired with the next)", "tasks/s"),
        "drainlim": ("… the same with a limit on the topic that never binds (1,000,000/s, concurrency 1,000,000)",
                     "tasks/s"),
        "drainlimpct": ("… the limited drain as % of the one without (per run)", "%", ">= 90 %"),
        "claimfree": ("Redis CPU of one claim.lua call taking 100 ready tasks, no limit", "µs"),
        "claimlim": ("… the same with that limit on their topic", "µs"),
        "shard1": ("drain 20,000, Redis Cluster with 1 shard, 2 queue processes", "tasks/s"),
        "shard3": ("drain 20,000, Redis Cluster with 3 shards, 2 queue processes", "tasks/s"),
        "p50": ("lateness p50 (start - due)", "ms"),
        "p99": ("lateness p99", "ms", "<= 3 ms"),
        "max": ("lateness max", "ms"),
        "early": ("early starts (of 1,000)", "count", "0"),
        "idle": ("idle CPU, all delayd processes, 10 s", "% of one core", "< 0.5 %"),
        "mem": ("Redis memory per pending minimal task (20,000)", "bytes", "<= 300"),
        "mem_real": ("Redis memory per pending realistic task (20,000)", "bytes"),
        "mem_real64": ("… on a Redis left at its default hash-max-listpack-value (64)", "bytes"),
        "pause": ("`pause` of a topic behind 1,000,000 ready tasks of another: median script call (SLOWLOG)",
                  "ms"),
        "pausemax": ("… its slowest script call", "ms", "<= 5 ms"),
        "pausewall": ("… that pause's wall time, every bucket", "ms"),
        "pausecalls": ("… its script calls", "count"),
        "php_rt": (f"PHP (phpredis): one-client round trip of a trivial EVALSHA{producers_note}", "calls/s"),
        "php_add": ("PHP client: `add`, one at a time (rounds alternating with the round trip above)", "tasks/s"),
        "php_pct": ("PHP client: `add` as % of that round trip (per round)", "%", ">= 75 %"),
        "php_add_us": ("… Redis time in add.lua per single add (INFO commandstats)", "µs"),
        "php_many": ("PHP client: `addMany` of 20,000", "tasks/s", ">= 100,000"),
        "php_many_us": ("… Redis time in add.lua per task of `addMany`", "µs"),
        "node_rt": (f"Node (ioredis): one-client round trip of a trivial EVALSHA{producers_note}", "calls/s"),
        "node_add": ("Node client: `add`, one at a time (rounds alternating with the round trip above)", "tasks/s"),
        "node_pct": ("Node client: `add` as % of that round trip (per round)", "%", ">= 75 %"),
        "node_add_us": ("… Redis time in add.lua per single add (INFO commandstats)", "µs"),
        "node_many": ("Node client: `addMany` of 20,000", "tasks/s", ">= 100,000"),
        "node_many_us": ("… Redis time in add.lua per task of `addMany`", "µs"),
    }.items()}
    import bench_http  # (it imports this module's Figure)
    figs.update(bench_http.figures())
    if args.big:
        figs["mem1m"] = Figure("Redis memory per pending minimal task (1,000,000)", "bytes", "<= 300")
        figs["add1m"] = Figure("enqueue: `add` with 1,000,000 pending", "tasks/s")
        figs["many1m"] = Figure("enqueue: `add_many` with 1,000,000 pending", "tasks/s")
        figs["drain1m"] = Figure("drain 1,000,000 due at once, 2 queue processes", "tasks/s")
        figs["probe99"] = Figure("`add` round trip during that drain, p99", "ms")
        figs["probemax"] = Figure("`add` round trip during that drain, max", "ms")
        figs["slowmax"] = Figure("slowest Redis call during that drain (SLOWLOG)", "ms", "<= 10 ms")
        figs["slow10"] = Figure("Redis calls over 10 ms during that drain (SLOWLOG)", "count", "0")
        figs["stall5"] = Figure("single commands inside scripts over 5 ms (host stalls: each is µs of work)",
                                "count", "")
    try:
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}: Redis ceiling", flush=True)
            r.flushall()
            figs["zadd1"].add(zadd_ceiling(server, 1))
            figs["zaddp"].add(zadd_ceiling(server, 64))
            calls = lua_move_ceiling(server)
            figs["lua"].add(calls)
            figs["luam"].add(calls * 100)
            r.flushall()
            client = Client.from_url(server.url)
            if want("add"):
                print(f"run {run + 1}/{args.runs}: add", flush=True)
                figs["add"].add(enqueue_single(client, r))
                figs["add_real"].add(enqueue_single(client, r, task=realistic_task))
                if psutil.cpu_count() >= 2:
                    add_against_round_trip(server, client, r, figs, first=N)
                r.flushall()
            if want("add_many"):
                print(f"run {run + 1}/{args.runs}: add_many", flush=True)
                figs["many"].add(enqueue_many(client, r))
                figs["manypct"].add(100 * figs["many"].values[-1] / figs["zaddp"].values[-1])
                r.flushall()
                figs["many_real"].add(enqueue_many(client, r, task=realistic_task))
                figs["many_realpct"].add(100 * figs["many_real"].values[-1] / figs["many"].values[-1])
            if want("mem"):
                figs["mem"].add(memory_per_task(client, r, N))
                figs["mem_real"].add(memory_per_task(client, r, N, realistic_task))
                r.config_set("hash-max-ziplist-value", 64)
                figs["mem_real64"].add(memory_per_task(client, r, N, realistic_task))
                r.config_set("hash-max-ziplist-value", RECORD_SETTINGS[1])
            r.flushall()
            client = Client.from_url(server.url)
            for queues, task in ((1, minimal_task), (2, minimal_task), (2, realistic_task)) if want("drain") else ():
                print(f"run {run + 1}/{args.runs}: drain with {queues} queue process(es), {task.__name__}s",
                      flush=True)
                with Daemon(server.url, work / f"state{queues}", buckets=4, queues=queues):
                    figs["drain_real" if task is realistic_task else f"drain{queues}"].add(drain(client, r, task=task))
                r.flushall()
                client = Client.from_url(server.url)
            if want("drainio"):
                print(f"run {run + 1}/{args.runs}: drain with a handler doing one RPUSH", flush=True)
                with Daemon(server.url, work / "stateio", buckets=4, queues=2, **handler_env(server.url)):
                    figs["drainio"].add(drain(client, r, call=RPUSH))
                if r.llen("bench:pushed") < N:
                    raise SystemExit(f"the RPUSH handler pushed {r.llen('bench:pushed')} of {N}")
                r.flushall()
                client = Client.from_url(server.url)
            if want("limits"):  # a limit set on the drained topic but never binding, against none, in turn
                for limited in ((False, True) if run % 2 == 0 else (True, False)):
                    print(f"run {run + 1}/{args.runs}: drain, {'a limit set' if limited else 'no limit'}", flush=True)
                    if limited:
                        client.set_limit("drain", **UNBINDING)
                    with Daemon(server.url, work / "statelim", buckets=4, queues=2):
                        figs["drainlim" if limited else "drainfree"].add(drain(client, r))
                    r.flushall()
                    client = Client.from_url(server.url)
                figs["drainlimpct"].add(100 * figs["drainlim"].values[-1] / figs["drainfree"].values[-1])
                for limited in (False, True):
                    figs["claimlim" if limited else "claimfree"].add(limited_claim_us(client, r, limited))
                r.flushall()
                client = Client.from_url(server.url)
            for shards in (1, 3) if want("cluster") else ():
                print(f"run {run + 1}/{args.runs}: drain on a {shards}-shard Redis Cluster", flush=True)
                with Cluster(shards) as cluster:
                    cc = Client.from_url(cluster.url)
                    with Daemon(cluster.url, work / f"cluster{shards}", buckets=4, queues=2):
                        figs[f"shard{shards}"].add(drain(cc, cc.redis))
                    cc.close()
            if want("lateness"):
                print(f"run {run + 1}/{args.runs}: lateness and idle CPU (default settings)", flush=True)
                with Daemon(server.url, work / "state", buckets=4, queues=2) as d:
                    client_ok_base[0] = client.stats()["counts"]["ok"]
                    p50, p99, mx, early = lateness(client, r)
                    figs["p50"].add(p50)
                    figs["p99"].add(p99)
                    figs["max"].add(mx)
                    figs["early"].add(early)
                    figs["idle"].add(idle_cpu(d))
                r.flushall()
            if want("pause"):
                print(f"run {run + 1}/{args.runs}: pause behind 1,000,000 ready tasks", flush=True)
                median, slowest, wall, calls = pause_cost(client, r, 1_000_000)
                figs["pause"].add(median)
                figs["pausemax"].add(slowest)
                figs["pausewall"].add(wall)
                figs["pausecalls"].add(calls)
            if want("http"):
                print(f"run {run + 1}/{args.runs}: the HTTP producer API (scripts/bench_http.py)", flush=True)
                bench_http.run_round(server.url, r, figs)
            if want("php") and shutil.which("php"):
                print(f"run {run + 1}/{args.runs}: the PHP client", flush=True)
                php = json.loads(subprocess.run(["php", str(ROOT / "scripts/bench_php.php"), "127.0.0.1",
                                                 str(producers.port)], check=True, capture_output=True,
                                                text=True).stdout)
                for name in ("rt", "add", "pct", "add_us", "many", "many_us"):
                    figs[f"php_{name}"].add(php[name])
                producers.client().flushall()
            if want("node") and shutil.which("node") and (ROOT / "clients/node/node_modules").is_dir():
                print(f"run {run + 1}/{args.runs}: the Node client", flush=True)
                node = json.loads(subprocess.run(["node", "bench/bench.mjs", producers.url, "--rounds", "5", "--n",
                                                  "4000", "--many", "20000", "--json"], cwd=ROOT / "clients/node",
                                                 check=True, capture_output=True, text=True).stdout)
                for name in ("rt", "add", "pct", "add_us", "many", "many_us"):
                    figs[f"node_{name}"].add(node[name])
                producers.client().flushall()
        if args.big:
            client = Client.from_url(server.url)
            print("big: 1,000,000 pending", flush=True)
            figs["mem1m"].add(memory_per_task(client, r, 1_000_000))
            figs["add1m"].add(enqueue_single(client, r, 2_000, first=1_000_000))
            figs["many1m"].add(enqueue_many(client, r, N, first=1_100_000))
            r.flushall()
            # µs: every call over 5 ms (few enough that the log never overflows). Redis
            # logs the commands a script runs as well: a plain HMGET that took 5 ms
            # was descheduled, not working, which tells host stalls from script cost.
            r.config_set("slowlog-log-slower-than", 5000)
            r.config_set("slowlog-max-len", 10_000)
            with Daemon(server.url, work / "big", buckets=4, queues=2):
                print("big: 1,000,000 due at once", flush=True)
                r.slowlog_reset()
                probe = AddProbe(client)
                probe.start()
                figs["drain1m"].add(drain(client, r, 1_000_000))
                p99, worst = probe.result()
                figs["probe99"].add(p99)
                figs["probemax"].add(worst)
                entries = r.slowlog_get(10_000)
                for entry in entries:
                    if entry["duration"] > 10_000:
                        print(f"  slow: {entry['duration'] / 1000:.1f} ms {entry['command'][:120]!r}", flush=True)
                scripts = [e["duration"] / 1000 for e in entries if e["command"].startswith(SCRIPT_CALLS)]
                figs["slowmax"].add(max(scripts, default=0.0))
                figs["slow10"].add(sum(1 for ms in scripts if ms > 10))
                figs["stall5"].add(len(entries) - len(scripts))
    finally:
        server.stop()
        producers.stop()
        shutil.rmtree(work, ignore_errors=True)

    cpu = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        model = cpu
    ceiling_tool = "redis-benchmark" if redis_tool("redis-benchmark") else "redis-cli (--pipe / -r)"
    lines = [
        TABLE_SECTION,
        "",
        f"Written by `./scripts/bench{' --big' if args.big else ''}` on {datetime.date.today()} — "
        f"{model}, {psutil.cpu_count()} cores, Python {platform.python_version()}, Redis {version} "
        f"(no persistence, loopback TCP). Each figure: median of {args.runs} run(s), min–max. "
        f"Ceiling measured with {ceiling_tool}. The daemon runs with default settings "
        "(4 buckets, 2 queue processes, concurrency 32) unless the row says otherwise.",
        "",
        "| figure | median | min–max | unit | target |",
        "| --- | --- | --- | --- | --- |",
        *[f.row() for f in figs.values() if f.values or args.only is None],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.only is None:
        write_section(Path(args.out), TABLE_SECTION, text)


def write_section(out: Path, heading: str, text: str) -> None:
    """`text` replaces the section of `out` under the line `heading` (up to the next `## ` heading), or is
    appended: the rest of the page (the summary at its top, the sections written by hand) stays."""
    old = out.read_text() if out.exists() else ""
    start = ("\n" + old).find("\n" + heading + "\n")
    if start < 0:
        out.write_text(old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n")
        return
    end = old.find("\n## ", start + len(heading))
    out.write_text(old[:start] + text.rstrip("\n") + "\n" + ("\n" + old[end + 1:] if end >= 0 else ""))


if __name__ == "__main__":
    main()
