"""Ten million pending (`./scripts/bench --huge`): delayd with 10,000,000 tasks waiting, on each Redis
server users run (the embedded 6.2, Debian's Redis 7.0, Valkey 8.0), one server at a time.

Per server: the fill (set-up, timed, not a figure), Redis memory per pending task, `add` and `add_many`
with the tasks pending beside the same on an empty store of the same server (its database 1, in
alternating rounds, so both see the same host), `delayd start` to the first run (empty and full), the
lateness of tasks due while the tasks wait, the slowest Redis call (SLOWLOG) while a wave of a tenth
of them comes due and is drained, and the dashboard's pages. One table with a column per server,
written into BENCHMARKS.md as its section "Ten million pending".
"""
from __future__ import annotations

import datetime
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import bench
import bench_web
import psutil
from daemon_helper import Daemon
from redis_server import RedisServer, server_binary, wait_for
from web_helper import Web

from delayd import Client
from delayd.store.scripts import SCRIPTS

ROOT = bench.ROOT
SERVERS = {"6.2": "", "7.0": "/usr/bin/redis-server", "8.0": "/usr/bin/valkey-server"}  # "": the embedded one
BATCH = 50_000          # tasks per add_many of the fill
FAR = 30 * 86_400       # the filled tasks are due 30 to 60 days ahead, one every few ms of that span
SLOW_US = 1_000         # SLOWLOG threshold during the wave (µs)
ROUNDS, PAGE_RUNS = 5, 50  # rounds of `add` / `add_many` (full and empty), requests of each page
TOKEN = "bench"
SECTION = "## Ten million pending"

FIGURES = {  # key: (row, unit, target)
    "fill": ("fill (set-up, not a figure): time to write them with add_many, 2 processes", "s", ""),
    "mem": ("Redis memory per pending task (INFO used_memory delta / tasks)", "bytes", "<= 300"),
    "add_empty": ("`add`, one at a time, empty store (database 1 of the same server)", "tasks/s", ""),
    "add_full": ("`add`, one at a time, with the tasks pending", "tasks/s", ""),
    "add_pct": ("… full as % of empty (median of the per-round ratios)", "%", ">= 90 %"),
    "many_empty": ("`add_many` of 20,000, empty store", "tasks/s", ""),
    "many_full": ("`add_many` of 20,000, with the tasks pending", "tasks/s", ""),
    "many_pct": ("… full as % of empty (median of the per-round ratios)", "%", ">= 90 %"),
    "start_empty": ("`delayd start` to the first run, empty store", "s", ""),
    "start_full": ("`delayd start` to the first run, with the tasks pending", "s", ""),
    "p99_empty": ("lateness p99 of 1,000 tasks due over 20 s, empty store (the host's share)", "ms", ""),
    "p50": ("lateness p50 of 1,000 tasks due over 20 s while the tasks wait", "ms", ""),
    "p99": ("lateness p99", "ms", "<= 3 ms"),
    "max": ("lateness max", "ms", ""),
    "early": ("early starts (of 1,000)", "count", "0"),
    "wave": ("drain of the wave (a tenth as many, due at one instant among them), 2 queue processes", "tasks/s",
             ""),
    "probe99": ("`add` round trip during the wave, p99", "ms", ""),
    "redis_cpu": ("Redis main thread on a CPU during the wave (from its writing to its last finish)", "%", ""),
    "redis_wait": ("… and runnable but waiting for a CPU (the host's stalls: /proc schedstat)", "%", ""),
    "slowmax": ("slowest Redis call during the wave (SLOWLOG, any command)", "ms", "<= 10 ms"),
    "slowcmd": ("… that call", "", ""),
    "slow10": ("Redis calls over 10 ms during the wave", "count", "0"),
    "slow10by": ("… by command", "", ""),
    "slow1": ("Redis calls over 1 ms during the wave", "count", ""),
    "page_overview": ("dashboard: overview `/`, p99", "ms", "< 200 ms"),
    "page_tasks": ("dashboard: task list `/tasks`, p99", "ms", "< 200 ms"),
    "page_task": ("dashboard: one task `/tasks/TOPIC/ID`, p99", "ms", "< 200 ms"),
    "page_overview_cpu": ("… CPU of `delayd web` per request: overview", "ms", ""),
    "page_tasks_cpu": ("… task list", "ms", ""),
    "page_task_cpu": ("… one task", "ms", ""),
    "load": ("load average (1 min) during this server's run, min–max", "", ""),
}


class ChosenServer(RedisServer):
    """A RedisServer running the given binary ("" for the suite's default, the embedded 6.2)."""

    def __init__(self, binary: str, directory: str):
        super().__init__(directory)
        self.binary = binary or server_binary()

    def args(self) -> list[str]:
        return [self.binary, *super().args()[1:]]


def task(i: int) -> dict:
    """The i-th filled task: minimal as in the bench's memory rows (topic m, a number, a module
    function, no params), due far ahead."""
    return {"topic": "m", "id": i, "call": bench.NOOP, "delay": FAR + i % FAR}


def fill_range(url: str, start: int, stop: int) -> int:
    client = Client.from_url(url)
    for first in range(start, stop, BATCH):
        client.add_many([task(i) for i in range(first, min(stop, first + BATCH))])
    client.close()
    return stop - start


def fill(url: str, count: int) -> float:
    """`count` tasks written by 2 processes, progress on the terminal; the seconds it took."""
    began, done = time.monotonic(), 0
    chunk = 250_000
    with ProcessPoolExecutor(2) as pool:
        jobs = [pool.submit(fill_range, url, s, min(count, s + chunk)) for s in range(0, count, chunk)]
        for job in as_completed(jobs):
            done += job.result()
            rate = done / (time.monotonic() - began)
            print(f"\r  fill: {done:,} / {count:,} ({rate:,.0f}/s, {(count - done) / rate:.0f} s left)   ",
                  end="", flush=True)
    print(flush=True)
    return time.monotonic() - began


def adds(url: str, r, full: Client, count: int, rounds: int, loads: list[float]) -> dict[str, list[float]]:
    """`add` (2,000) and `add_many` (20,000) rounds, alternating between the full store and an
    empty one (database 1, flushed before each round); the ratios are taken per round."""
    out: dict[str, list[float]] = {k: [] for k in ("add_empty", "add_full", "many_empty", "many_full")}
    pct: dict[str, list[float]] = {"add_pct": [], "many_pct": []}
    empty_r = Client.from_url(url.replace("/0", "/1")).redis
    first = count + 1_000_000
    for k in range(rounds):
        loads.append(os.getloadavg()[0])
        empty_r.flushdb()
        empty = Client.from_url(url.replace("/0", "/1"))
        order = (("empty", empty), ("full", full)) if k % 2 == 0 else (("full", full), ("empty", empty))
        for name, client in order:
            out[f"add_{name}"].append(bench.enqueue_single(client, r, 2_000, first=first))
            out[f"many_{name}"].append(bench.enqueue_many(client, r, bench.N, first=first + 2_000))
            first += 30_000
        empty.close()
        for kind in ("add", "many"):
            pct[f"{kind}_pct"].append(100 * out[f"{kind}_full"][-1] / out[f"{kind}_empty"][-1])
        print(f"  round {k + 1}/{rounds}: add {out['add_empty'][-1]:,.0f} / {out['add_full'][-1]:,.0f}, add_many "
              f"{out['many_empty'][-1]:,.0f} / {out['many_full'][-1]:,.0f} tasks/s (empty / full)", flush=True)
    empty_r.flushdb()
    return {**out, **pct}


def first_run(url: str, r, state: Path) -> tuple[Daemon, float]:
    """A task due now, then `delayd start`: the seconds from the start to that task's run (by
    Redis's clock), and the daemon, up and running."""
    client = Client.from_url(url)
    client.add("first", 0, call=bench.NOOP)
    began = bench.redis_now(r)
    daemon = Daemon(url, state, buckets=4, queues=2).start(wait=False)
    ran = wait_for(lambda: getattr(client.get("first", 0), "last_run_at", None), 300, interval=0.02,
                   message="the first run")
    wait_for(lambda: len(daemon.children()) == 6 and daemon.ready(), 60, message="daemon children up")
    client.delete("first", 0, hard=True)
    client.close()
    return daemon, ran - began


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds a process's main thread has run on a CPU and waited, runnable, for one (Linux)."""
    ran, waited = open(f"/proc/{pid}/schedstat").read().split()[:2]
    return int(ran) / 1e9, int(waited) / 1e9


def wave(client: Client, r, n: int, pid: int) -> dict[str, object]:
    """n tasks due at one instant, drained by the running daemon; SLOWLOG at SLOW_US, reset once
    they are written (the loader's own calls are not the daemon's). Redis's main thread's time
    waiting for a CPU meanwhile tells the host's stalls from the scripts' own time."""
    r.config_set("slowlog-log-slower-than", SLOW_US)
    r.config_set("slowlog-max-len", 1_000_000)
    probe = bench.AddProbe(client)
    marks = []

    def written() -> None:
        r.slowlog_reset()
        marks.append((time.monotonic(), *schedstat(pid)))
        probe.start()

    rate = bench.drain(client, r, n, written=written, writes=10_000)
    (began, ran, waited), now = marks[0], (time.monotonic(), *schedstat(pid))
    p99, _ = probe.result()
    entries = [e for e in r.slowlog_get(1_000_000) if not e["command"].upper().startswith(b"SLOWLOG")]  # (ours)
    r.config_set("slowlog-log-slower-than", 10_000)
    r.slowlog_reset()
    slowest = max(entries, key=lambda e: e["duration"], default=None)
    over = {}
    for entry in entries:
        if entry["duration"] > 10_000:
            over[call_name(entry)] = over.get(call_name(entry), 0) + 1
    return {"wave": rate, "probe99": p99, "redis_cpu": 100 * (now[1] - ran) / (now[0] - began),
            "redis_wait": 100 * (now[2] - waited) / (now[0] - began),
            "slowmax": slowest["duration"] / 1000 if slowest else 0.0,
            "slowcmd": call_name(slowest) if slowest else "-",
            "slow10": sum(over.values()), "slow10by": ", ".join(f"{k} {v}" for k, v in sorted(over.items())) or "-",
            "slow1": len(entries)}


NAMES = {script.sha.encode(): name for name, script in SCRIPTS.items()}


def call_name(entry: dict) -> str:
    """A SLOWLOG entry's command, a script by its name (`claim.lua`)."""
    words = entry["command"].split(b" ")
    if words[0].upper() == b"EVALSHA" and len(words) > 1:
        return f"{NAMES.get(words[1].lower(), words[1][:8].decode())}.lua"
    return words[0].decode(errors="replace")


def pages(url: str, runs: int) -> dict[str, float]:
    """p99 (ms) of the overview, the task list and one task page over `runs` requests each, and the
    `delayd web` process's CPU per request (ms: its own work, the rest of a slow page is waiting)."""
    walk = {"page_overview": "/", "page_tasks": "/tasks", "page_task": "/tasks/m/3"}
    got = {}
    with Web(url, DELAYD_WEB_TOKEN=TOKEN) as web, \
            web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        process = psutil.Process(web.proc.pid)
        bench_web.timed(http, walk, 2)  # warm up (imports, script loading)
        for name, path in walk.items():
            cpu = sum(process.cpu_times()[:2])
            ms = sorted(bench_web.timed(http, {name: path}, runs)[name])
            got[f"{name}_cpu"] = 1000 * (sum(process.cpu_times()[:2]) - cpu) / runs
            got[name] = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return got


def one_server(name: str, binary: str, count: int, rounds: int, page_runs: int) -> dict[str, object]:
    """Every figure on one server, started for it and stopped (its memory freed) at the end."""
    work = Path(tempfile.mkdtemp(prefix="delayd-bench-huge-"))
    server = ChosenServer(binary, str(work / "redis")).start()
    got: dict[str, object] = {}
    loads = [os.getloadavg()[0]]
    try:
        r = server.client()
        info = r.info("server")
        got["version"] = (f"Valkey {info['valkey_version']}" if "valkey_version" in info
                          else f"Redis {info['redis_version']}")
        print(f"{name}: {got['version']}, {count:,} pending", flush=True)
        r.flushall()
        client = Client.from_url(server.url)
        client.add("warm", 0, call=bench.NOOP, delay=FAR)  # the store's own keys and scripts, before the baseline
        client.delete("warm", 0, hard=True)
        base = r.info("memory")["used_memory"]
        got["fill"] = fill(server.url, count)
        got["mem"] = (r.info("memory")["used_memory"] - base) / count
        loads.append(os.getloadavg()[0])
        print(f"  filled in {got['fill']:.0f} s, {got['mem']:.0f} B per task", flush=True)
        for key, values in adds(server.url, r, client, count, rounds, loads).items():
            got[key] = statistics.median(values)
        empty_url = server.url.replace("/0", "/1")
        daemon, got["start_empty"] = first_run(empty_url, r, work / "state-empty")
        try:
            empty = Client.from_url(empty_url)
            bench.client_ok_base[0] = empty.stats()["counts"]["ok"]
            got["p99_empty"] = bench.lateness(empty, r)[1]
            empty.close()
        finally:
            daemon.stop()
        server.client(db=1).flushdb()
        loads.append(os.getloadavg()[0])
        daemon, got["start_full"] = first_run(server.url, r, work / "state")
        print(f"  delayd start to the first run: {got['start_empty']:.2f} s empty, {got['start_full']:.2f} s full",
              flush=True)
        try:
            loads.append(os.getloadavg()[0])
            bench.client_ok_base[0] = client.stats()["counts"]["ok"]
            got["p50"], got["p99"], got["max"], got["early"] = bench.lateness(client, r)
            print(f"  lateness p50/p99/max {got['p50']:.0f}/{got['p99']:.0f}/{got['max']:.0f} ms", flush=True)
            loads.append(os.getloadavg()[0])
            got.update(wave(client, r, count // 10, server.proc.pid))
            print(f"  wave of {count // 10:,}: {got['wave']:,.0f} tasks/s, slowest call {got['slowmax']:.1f} ms "
                  f"({got['slowcmd']}), {got['slow10']} over 10 ms", flush=True)
            loads.append(os.getloadavg()[0])
            got.update(pages(server.url, page_runs))
            print(f"  pages p99: overview {got['page_overview']:.0f}, list {got['page_tasks']:.0f}, task "
                  f"{got['page_task']:.0f} ms", flush=True)
            loads.append(os.getloadavg()[0])
        finally:
            daemon.stop()
        got["load"] = f"{min(loads):.1f}–{max(loads):.1f}"
        client.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return got


def cell(value: object) -> str:
    return value if isinstance(value, str) else bench.fmt(float(value))


def table(results: dict[str, dict[str, object]]) -> str:
    names = list(results)
    lines = [
        "| figure | " + " | ".join(str(results[n].get("version", n)) for n in names) + " | unit | target |",
        "| --- |" + " --- |" * len(names) + " --- | --- |",
    ]
    for key, (row, unit, target) in FIGURES.items():
        lines.append(f"| {row} | " + " | ".join(cell(results[n][key]) if key in results[n] else "-" for n in names)
                     + f" | {unit} | {target} |")
    return "\n".join(lines)


def section(results: dict[str, dict[str, object]], count: int, rounds: int, page_runs: int, commit: str) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        SECTION, "",
        f"`./scripts/bench --huge{'' if count == 10_000_000 else f' --huge-count {count}'}` at {commit}, {when}, "
        f"{os.cpu_count()} cores shared with other work (the load row). {count:,} minimal tasks pending (topic m, "
        f"ids 0 to {count - 1:,}, due 30 to 60 days ahead, over the 4 buckets); "
        f"one server at a time, no persistence, loopback TCP; the daemon with default settings (4 buckets, "
        f"2 queue processes). `add`: {rounds} rounds of 2,000 and of `add_many` 20,000, each round on the full store "
        f"and on an empty one (database 1 of the same server, flushed), in alternating order. Lateness: "
        f"1,000 tasks due over 20 s. The wave: {count // 10:,} tasks due at one instant, SLOWLOG at "
        f"{SLOW_US / 1000:g} ms reset once they are written. Pages: {page_runs} requests of each of the three "
        f"pages, with the daemon running, after the wave.",
        "",
        table(results), "",
    ])


def main(servers: list[str], count: int, out: Path | None) -> None:
    """The figures on each server in turn; the section is printed, and written into `out` if given."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                      text=True).stdout.strip():
        commit += " (with uncommitted changes)"
    results = {}
    for name in servers:
        results[name] = one_server(name, SERVERS.get(name, name), count, ROUNDS, PAGE_RUNS)
        print(table({name: results[name]}), flush=True)
    text = section(results, count, ROUNDS, PAGE_RUNS, commit)
    print(text)
    if out is not None:
        bench.write_section(out, SECTION, text)
