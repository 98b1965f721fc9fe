"""Verbs that steer when tasks run: `delayd pause TOPIC`, `resume TOPIC`, `run TOPIC ID`, and the limits
per topic: `limit TOPIC [--rate N/s] [--concurrency K] | --clear`, `limits`."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from delayd.cli.common import Verb, client_for, emit, fail, int_at_least, task_verb, verb_parser
from delayd.model.limit import parse_rate
from delayd.model.task import TaskError


def warn_if_unknown(client: Any, topic: str, done: str) -> None:
    """A typo would leave the real topic as it was: say so, once the verb is done (an error comes alone)."""
    if not client.count(topic):
        print(f"delayd: warning: no task of topic {topic} exists (a typo?); {done}", file=sys.stderr)


def cmd_pause(args: argparse.Namespace) -> int:
    client = client_for(args)
    parked = client.pause(args.topic)
    warn_if_unknown(client, args.topic, "paused all the same: tasks added to it later wait for resume")
    emit(args, {"result": "paused", "topic": args.topic, "parked": parked},
         f"paused {args.topic}: no task of it starts until 'delayd resume {args.topic}' (runs in flight finish)"
         + (f"; {parked} ready task{'s' if parked != 1 else ''} set aside" if parked else ""))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    waited = client_for(args).resume(args.topic)
    emit(args, {"result": "resumed", "topic": args.topic, "tasks": waited},
         f"resumed {args.topic}" + (f": {waited} due task{'s' if waited != 1 else ''} start in due order"
                                    if waited else ""))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    client = client_for(args)
    if not client.run_now(args.topic, args.id):
        return fail(f"not found: {args.topic}:{args.id}")
    paused = args.topic in client.paused()
    emit(args, {"result": "due", "paused": paused},
         f"{args.topic}:{args.id} is due now" + (" (topic paused: it starts first on resume)" if paused else ""))
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    if args.clear == bool(args.rate or args.concurrency):
        return fail("limit: give --rate and/or --concurrency, or --clear alone", 2)
    client = client_for(args)
    if args.clear:
        had = client.clear_limit(args.topic)
        emit(args, {"result": "cleared" if had else "none", "topic": args.topic},
             f"cleared the limit of {args.topic}: its held tasks start now, in due order" if had
             else f"{args.topic} had no limit")
        return 0
    replaced = client.set_limit(args.topic, rate=args.rate, concurrency=args.concurrency)
    warn_if_unknown(client, args.topic, "limited all the same: tasks added to it later are held by the limit")
    shown = ", ".join(part for part in (args.rate and f"rate {args.rate}",
                                        args.concurrency and f"concurrency {args.concurrency}") if part)
    emit(args, {"result": "replaced" if replaced else "set", "topic": args.topic, "rate": args.rate,
                "concurrency": args.concurrency},
         f"limited {args.topic} to {shown} across every daemon" + (" (replacing its limit)" if replaced else ""))
    return 0


def cmd_limits(args: argparse.Namespace) -> int:
    limits = client_for(args).limits()
    if args.json:
        emit(args, {"limits": [limit.as_dict() for limit in limits]}, "")
    elif not limits:
        print("no limits set")
    else:
        print(f"{'TOPIC':<24} {'RATE':>10} {'CONCURRENCY':>11} {'HELD':>8} {'RUNNING':>8}")
        for limit in limits:
            print(f"{limit.topic:<24} {limit.rate or '-':>10} {limit.concurrency or '-':>11} {limit.held:>8} "
                  f"{limit.running if limit.concurrency else '-':>8}")
    return 0


def rate_arg(text: str) -> str:
    try:
        parse_rate(text)
    except TaskError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.replace(" ", "")


VERBS: dict[str, Verb] = {"pause": cmd_pause, "resume": cmd_resume, "run": cmd_run, "limit": cmd_limit,
                          "limits": cmd_limits}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    for name, help in (("pause", "start no task of a topic until resume (runs in flight finish; every daemon)"),
                       ("resume", "start the tasks of a paused topic again, due ones in due order")):
        p = verb_parser(sub, common, name, help)
        p.add_argument("topic", help="task type, e.g. order:cancel")
    task_verb(sub, common, "run", "make a delayed task due now (a recurring one then continues on its schedule); "
                     "a running or finished task is an error")
    p = verb_parser(sub, common, "limit", "limit a topic across every daemon: at most N starts per second, minute "
                    "or hour, at most K runs in flight; tasks over it wait (not run, not failed)")
    p.add_argument("topic", help="task type, e.g. payment:refund")
    p.add_argument("--rate", type=rate_arg, metavar="N/s|N/m|N/h", help="at most N starts per period")
    p.add_argument("--concurrency", type=int_at_least(1), metavar="K", help="at most K runs in flight")
    p.add_argument("--clear", action="store_true", help="lift the topic's limit: its held tasks start now")
    verb_parser(sub, common, "limits", "the limits set, each with the tasks it holds back and its runs in flight")
