"""`delayd stats`: counts, lag, tasks/s and lateness, per topic and overall, as a table or JSON; `delayd
hosts`: the health of the URL hosts delivered to in the last day, and disabling or enabling one; `delayd
replay`: sending a host's finished URL tasks again."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from delayd.cli.common import Progress, Verb, client_for, fmt_ms, positive_int, verb_parser
from delayd.model.clock import local_time as fmt_time
from delayd.model.origin import origins


def cmd_stats(args: argparse.Namespace) -> int:
    from delayd.store.stats import OUTCOMES
    stats = client_for(args).stats()
    if args.json:
        print(json.dumps(stats, separators=(",", ":")))
        return 0
    counts, ready, runs, late = stats["counts"], stats["ready"], stats["runs_last_minute"], stats["lateness"]
    print(f"tasks    delayed={counts['delayed']} (waiting={stats['waiting']} ready p3={ready['3']} p2={ready['2']} "
          f"p1={ready['1']})  running={counts['running']}  ok={counts['ok']}  failed={counts['failed']}  "
          f"deleted={counts['deleted']}  quarantined={stats['quarantined']}")
    if stats["paused"]:
        parked = stats["parked"]
        print(f"paused   {', '.join(stats['paused'])} "
              f"({parked} due task{'s' if parked != 1 else ''} waiting for resume)")
    for topic, limit in stats["limits"].items():
        shown = ", ".join(part for part in (limit["rate"] and f"rate {limit['rate']}",
                                            limit["concurrency"] and f"concurrency {limit['concurrency']}") if part)
        print(f"limited  {topic}: {shown} ({limit['held']} held back"
              + (f", {limit['running']} running" if limit["concurrency"] else "") + ")")
    print(f"due      oldest {fmt_time(stats['oldest_due_at'])} (lag {stats['oldest_due_lag']:.3f} s"
          f"{'' if stats['oldest_due_exact'] else ', per-topic lags approximate'})  "
          f"next {fmt_time(stats['next_due_at'])}")
    print(f"runs     last {stats['window_s']:.0f} s: {sum(runs[o] for o in OUTCOMES)} "
          f"({stats['tasks_per_s']:.2f}/s)  ok={runs['ok']} failed={runs['failed']} retry={runs['retry']} "
          f"quarantine={runs['quarantine']} defer={runs['defer']} lapsed={runs['lapsed']}  "
          f"lateness p50={fmt_ms(late['p50'])} ms p99={fmt_ms(late['p99'])} ms ({late['runs']} starts)")
    if stats["topics"]:
        print()
        width = max(12, *(len(t) for t in stats["topics"]))
        print(f"{'TOPIC':{width}} {'DELAYED':>8} {'READY 3/2/1':>13} {'RUNNING':>8} {'OK':>8} {'FAILED':>7} "
              f"{'DELETED':>8} {'LAG_S':>8} {'TASKS/S':>8} {'P50_MS':>8} {'P99_MS':>8}")
        for topic, t in stats["topics"].items():
            c, r = t["counts"], t["ready"]
            per_priority = f"{r['3']}/{r['2']}/{r['1']}"
            print(f"{topic:{width}} {c['delayed']:>8} {per_priority:>13} "
                  f"{c['running']:>8} {c['ok']:>8} {c['failed']:>7} {c['deleted']:>8} {t['oldest_due_lag']:>8.3f} "
                  f"{t['tasks_per_s']:>8.2f} {fmt_ms(t['lateness']['p50']):>8} {fmt_ms(t['lateness']['p99']):>8}")
    print()
    for b in stats["per_bucket"]:
        print(f"bucket {b['bucket']:<3} waiting={b['waiting']} ready={sum(b['ready'].values())} "
              f"running={b['running']} ok={b['ok']} failed={b['failed']} deleted={b['deleted']} "
              f"next={fmt_time(b['next_due_at'])}")
    return 0


NOT_DELIVERED = "no delivery in the last day"  # rather than "ok" for a host nothing was sent to


def cmd_hosts(args: argparse.Namespace) -> int:
    if args.action:
        return switch_host(args)
    found = client_for(args).hosts(args.limit)
    if args.json:
        for host in found:
            print(json.dumps(host.to_dict(), separators=(",", ":")))
        return 0
    if not found:
        print("no URL host delivered to in the last day, disabled, or with tasks waiting")
        return 0
    width = max(20, *(len(h.host) for h in found))
    print(f"{'HOST':{width}} {'SENT_1H':>8} {'FAILED_1H':>9} {'BREAKER':>8} {'WAITING':>8}  "
          "FAILING SINCE / LAST ERROR")
    for h in found:
        state = ("ok" if h.delivered else NOT_DELIVERED) if h.failing_since is None else \
            f"failing since {fmt_time(h.failing_since)}: {h.last_error}"
        if h.disabled_at is not None:
            state = f"DISABLED since {fmt_time(h.disabled_at)}; {state}"
        print(f"{h.host:{width}} {h.deliveries:>8} {h.failures:>9} {h.breaker:>8} {h.tasks_waiting:>8}  {state}")
    return 0


def switch_host(args: argparse.Namespace) -> int:
    """delayd hosts disable|enable HOST."""
    if not args.host:
        print(f"delayd hosts {args.action}: give the HOST (scheme://host[:port] or a bare host)", file=sys.stderr)
        return 2
    client = client_for(args)
    if args.action == "disable":
        named = origins(args.host)  # (TaskError for a bad HOST, before anything is read)
        if {health.host for health in client.hosts()}.isdisjoint(named):
            print(f"delayd: warning: no task of host {args.host} was delivered in the last day or waits (a typo?); "
                  "disabled all the same: its tasks added later are kept, not sent", file=sys.stderr)
        changed = client.disable_host(args.host)
        print(f"disabled {', '.join(changed)}" if changed else f"{args.host}: already disabled")
    else:
        moved = client.enable_host(args.host)
        print(f"enabled {args.host}: {moved} task{'s' if moved != 1 else ''} set aside went back, in due order")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    progress = Progress()
    verb = "would re-queue" if args.dry_run else "re-queued"
    try:
        done = client_for(args).replay(args.host, args.since, args.status, args.dry_run, progress=lambda r: progress(
            f"{r.examined} finished tasks looked at, {r.matched} of {args.host}, {verb} {r.requeued}"))
    finally:
        progress.done()
    count = done.matched if args.dry_run else done.requeued
    print(f"{verb} {count} finished URL task{'s' if count != 1 else ''} of {args.host} ({args.status}) since "
          f"{args.since} ({done.examined} finished tasks looked at)")
    return 0


VERBS: dict[str, Verb] = {"stats": cmd_stats, "hosts": cmd_hosts, "replay": cmd_replay}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    verb_parser(sub, common, "stats", "counts, lag, tasks/s and lateness, per topic and overall",
                "Per topic and overall: tasks delayed (waiting, ready per priority), running, "
                "ok/failed/deleted (retained), the oldest due lag, runs and tasks/s over the "
                "last minute (defer: URL runs not sent because the host's circuit was open), and the "
                "lateness (start minus due) p50/p99 of those runs. "
                "Read from counters in Redis that every daemon keeps, so any host sees all.")
    p = verb_parser(sub, common, "hosts", "health of the URL hosts delivered to in the last day",
                    "Per scheme://host:port that a URL task was sent to in the last day, by every daemon "
                    "sharing the store (and each one disabled, or with URL tasks waiting): requests sent and "
                    "failed over the last hour, the circuit breaker (open: nothing is sent until its probe), "
                    "its URL tasks still to be delivered (WAITING: delayed, ready, running, parked, held, set "
                    "aside), since when it has been failing (every request since its last success failed) and "
                    "the last error; failing hosts first. "
                    "`delayd hosts disable HOST` sends nothing more to HOST: its due URL tasks are kept, set "
                    "aside (not run, not counted as runs) until `delayd hosts enable HOST` runs them in due "
                    "order. HOST: scheme://host[:port], or a bare host[:port] meaning its http and https origins.")
    p.add_argument("action", nargs="?", choices=("disable", "enable"), help="disable or enable HOST")
    p.add_argument("host", nargs="?", metavar="HOST", help="scheme://host[:port], or a bare host[:port]")
    p.add_argument("--limit", type=positive_int, default=1000, metavar="N",
                   help="at most N hosts, the most recently seen, then those with the most tasks waiting "
                        "(default 1000)")
    p = verb_parser(sub, common, "replay", "send again the finished URL tasks of a host since a time",
                    "Re-queues the URL tasks of HOST that finished (--status failed, the default; ok; or all) "
                    "since TIME, each as a new run of the same task: the same webhook-id, so the merchant's "
                    "de-duplication sees the same message. Streams through any number of tasks a page at a "
                    "time; --dry-run only counts them. HOST: scheme://host[:port], or a bare host[:port] "
                    "meaning its http and https origins.")
    p.add_argument("--host", required=True, metavar="HOST", help="scheme://host[:port], or a bare host[:port]")
    p.add_argument("--since", required=True, metavar="TIME", help="Unix seconds or an ISO 8601 time")
    p.add_argument("--status", choices=("failed", "ok", "all"), default="failed",
                   help="which finished tasks (default failed)")
    p.add_argument("--dry-run", action="store_true", help="count them, re-queue nothing")
