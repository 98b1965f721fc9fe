"""Redis's own cost of the drain's scripts (claim, finish, promote) and of add, from INFO commandstats.

Prints, per script call size, Redis µs per call and per task and the commands run inside;
then a drain of 20,000 through the real daemon (no-op and RPUSH handler): Redis µs per task
by command. Commandstats count Redis's own CPU, so the figures hold on a busy machine.
--add: add.lua instead (one task per call, then 200; minimal tasks, bench.py's realistic ones, then URL
tasks: webhooks to 50 merchants), beside a trivial EVALSHA (`return 1`).
With --versus DIR (a checkout of another version), each call alternates between that
version's scripts and these on the same data, and SLOWLOG gives each call's duration:
medians per version, robust to a busy machine.
Usage: PYTHONPATH=scripts:tests .venv/bin/python scripts/script_cost.py [--add] [--drain] [--versus DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import NOOP, RPUSH, N, drain, handler_env, minimal_task, realistic_task
from daemon_helper import Daemon
from redis_server import RedisServer

from delayd import Client
from delayd.store import dialect, lua_lib
from delayd.store.replies import Finish
from delayd.store.scripts import SCRIPTS
from delayd.store.transitions import Store

SCRIPT_COMMANDS = ("evalsha", "eval")


def stats(r) -> dict[str, tuple[int, int]]:
    """command -> (calls, µs) since the last CONFIG RESETSTAT."""
    return {name.removeprefix("cmdstat_"): (v["calls"], v["usec"])
            for name, v in r.info("commandstats").items()}


def measured(r, action) -> dict[str, tuple[int, int]]:
    r.config_resetstat()
    r.slowlog_reset()
    action()
    got = stats(r)
    got.pop("config", None)
    got.pop("info", None)
    got.pop("slowlog", None)
    return got


def report(label: str, got: dict[str, tuple[int, int]], calls: int, tasks: int) -> None:
    script_us = sum(got.get(c, (0, 0))[1] for c in SCRIPT_COMMANDS)
    inner = {k: v for k, v in got.items() if k not in SCRIPT_COMMANDS}
    inner_calls = sum(c for c, _ in inner.values())
    print(f"{label:<14} {script_us / calls:8.1f} µs/call {script_us / max(tasks, 1):7.2f} µs/task "
          f"{inner_calls / calls:6.1f} cmds/call  "
          + " ".join(f"{k}={c / calls:.1f}" for k, (c, _) in sorted(inner.items(), key=lambda kv: -kv[1][0])))


def ready_tasks(client: Client, r, n: int) -> None:
    """n call tasks due now, promoted into bucket 0's ready lists (others promoted too)."""
    r.flushall()
    client.add_many([{"topic": "t", "id": i, "call": NOOP, "delay": 0} for i in range(n)])
    for bucket in range(len(client.store.keys)):
        while client.store.promote(bucket, 1000, 3_600_000).full:
            pass


def versions(other: Path, names: tuple[str, ...] = ("claim", "finish", "promote")) -> list[dict[str, tuple[str, str]]]:
    """(source, sha) of the scripts `names`: these, then those of the checkout `other`."""
    files = re.search(r"(?:LIB_FILES =|for name in) \(([^)]*)\)", (other / "delayd/store/scripts.py").read_text())
    lib = "".join((other / "delayd/store/lua" / name).read_text()  # (in the order its scripts.py reads them)
                  for name in re.findall(r'"(_\w+\.lua)"', files.group(1) if files else '"_lib.lua"'))
    theirs = {}
    for name in names:
        body = (other / f"delayd/store/lua/{name}.lua").read_text()
        source = lua_lib.source(lib, body)
        theirs[name] = (source, hashlib.sha1(source.encode()).hexdigest())
    return [{name: (SCRIPTS[name].source, SCRIPTS[name].sha) for name in theirs}, theirs]


def alternating(r, pair: list[dict[str, tuple[str, str]]]):
    """Before each call: the scripts of the next version in turn (a generator to advance)."""
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1_000_000)
    for chosen in itertools.cycle(pair):
        for name, (source, sha) in chosen.items():
            SCRIPTS[name].source, SCRIPTS[name].sha = source, sha
            for spoken in (dialect.EVALSHA, dialect.FCALL):  # they keep each script's name and load as sent
                for cache in (spoken._names, spoken._leads, getattr(spoken, "_loads", {})):
                    cache.pop(name, None)
        yield


def durations(r, pair: list[dict[str, tuple[str, str]]], label: str) -> None:
    """Median µs per call of each version's script (from SLOWLOG, then reset)."""
    shas = [{sha: name for name, (_, sha) in v.items()} for v in pair]
    got: list[list[int]] = [[], []]
    for entry in r.slowlog_get(1_000_000):
        args = entry["command"].split()
        if args and args[0].upper() == b"EVALSHA":
            for i, v in enumerate(shas):
                if args[1].decode() in v:
                    got[i].append(entry["duration"])
    r.slowlog_reset()
    new, old = (statistics.median(g) if g else 0 for g in got)
    print(f"{label:<14} median µs/call: this {new:7.1f}  other {old:7.1f}  ({len(got[0])}+{len(got[1])} calls)")


def scripts(client: Client, r, calls: int = 200, pair: list | None = None) -> None:
    store, keys = client.store, client.store.keys[0]
    turn = alternating(r, pair) if pair else itertools.repeat(None)

    def show(label: str, got: dict, calls: int, tasks: int) -> None:
        if pair:
            durations(r, pair, label)
        else:
            report(label, got, calls, tasks)

    for n in (1, 9, 32):
        ready_tasks(client, r, calls * n * len(store.keys) * 2)
        claimed: list = []

        def claim() -> None:
            for _ in range(calls):
                next(turn)
                claimed.append(store.claim(0, (n, n, n), n, 60_000, 3_600_000).tasks)

        show(f"claim {n}", measured(r, claim), calls, sum(len(t) for t in claimed))

        def finish() -> None:
            for tasks in claimed:
                next(turn)
                store.finish(0, [Finish(t.member, int(t.claim), "ok") for t in tasks], 3_600_000)

        show(f"finish {n}", measured(r, finish), calls, sum(len(t) for t in claimed))
    r.flushall()

    def idle() -> None:
        for _ in range(calls):
            next(turn)
            store.promote(0, 1000, 3_600_000)

    show("promote empty", measured(r, idle), calls, 0)
    moved = []
    client.add_many([{"topic": "t", "id": i, "call": NOOP, "delay": 0} for i in range(calls * 256)])
    due = r.zcard(keys.delayed)

    def promote() -> None:
        while next(turn) or (p := store.promote(0, 256, 3_600_000)).moved or p.full:
            moved.append(p.moved)

    show("promote 256", measured(r, promote), len(moved), due)


def url_task(i: int) -> dict[str, Any]:
    """A webhook as a payment platform adds it: a JSON POST to one of 50 merchants, due in an hour."""
    return {"topic": "webhooks", "id": f"evt-{i}", "url": f"https://merchant-{i % 50}.example/hooks/delayd",
            "method": "POST", "body": "json", "delay": 3600,
            "params": {"type": "payment.succeeded", "order": f"ord-{i:08d}", "amount_cents": 4990 + i % 500}}


def adds(client: Client, r, calls: int = 200, pair: list | None = None) -> None:
    """add.lua writing one task per call, then 200 (fresh tasks of one bucket, as `add` and
    `add_many` send them; minimal, then realistic: bench.py's two kinds, then URL tasks), beside a
    trivial EVALSHA (`return 1`): how much of a single add's round trip is Redis's own."""
    store = Store(r, client.prefix, 1)  # (every task in bucket 0)
    turn = alternating(r, pair) if pair else itertools.repeat(None)
    trivial = r.script_load("return 1")
    report("trivial", measured(r, lambda: [r.evalsha(trivial, 0) for _ in range(calls)]), calls, calls)
    ids = itertools.count()
    kinds = (("", minimal_task), (" realistic", realistic_task), (" url", url_task))
    for (kind, task), n in itertools.product(kinds, (1, 200)):
        built = [[client.build(**task(next(ids))) for _ in range(n)] for _ in range(calls)]

        def add() -> None:
            for tasks in built:
                next(turn)
                store.add(store.keys[0], tasks, False)

        got = measured(r, add)
        if pair:
            durations(r, pair, f"add{kind} {n}")
        else:
            report(f"add{kind} {n}", got, calls, calls * n)


def drains(client: Client, r, work: Path) -> None:
    for name, call, env in (("no-op", NOOP, {}), ("rpush", RPUSH, handler_env(client.url))):
        r.flushall()
        with Daemon(client.url, work / name, buckets=4, queues=2, **env):
            got = measured(r, lambda: drain(Client.from_url(client.url), r, call=call))
        per = sorted(((us / N, c / N, k) for k, (c, us) in got.items()), reverse=True)
        script_us = sum(got.get(c, (0, 0))[1] for c in SCRIPT_COMMANDS)
        print(f"drain {name}: scripts {script_us / N:.1f} µs/task (inner commands below are part of it)")
        for us, c, k in per[:14]:
            print(f"   {k:<16} {us:6.2f} µs/task {c:6.2f} calls/task")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--add", action="store_true", help="add.lua (single and batched) instead of the drain's scripts")
    ap.add_argument("--drain", action="store_true", help="also drains through the daemon")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--versus", type=Path, help="a checkout whose scripts to alternate with these")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="delayd-cost-"))
    server = RedisServer(str(work / "redis")).start()
    try:
        r = server.client()
        client = Client.from_url(server.url)
        if args.add:
            adds(client, r, args.calls, versions(args.versus, ("add",)) if args.versus else None)
        else:
            scripts(client, r, args.calls, versions(args.versus) if args.versus else None)
        if args.drain:
            drains(client, r, work)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
