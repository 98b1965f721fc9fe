"""Verbs that steer when tasks run: `delayd pause TOPIC`, `resume TOPIC`, `run TOPIC ID`."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from delayd.cli.common import Verb, client_for, emit, fail, task_verb, verb_parser


def cmd_pause(args: argparse.Namespace) -> int:
    client = client_for(args)
    if not client.count(args.topic):  # a typo would leave the real topic running: say so, pause anyway
        print(f"delayd: warning: no task of topic {args.topic} exists (a typo?); paused all the same: "
              "tasks added to it later wait for resume", file=sys.stderr)
    parked = client.pause(args.topic)
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


VERBS: dict[str, Verb] = {"pause": cmd_pause, "resume": cmd_resume, "run": cmd_run}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    for name, help in (("pause", "start no task of a topic until resume (runs in flight finish; every daemon)"),
                       ("resume", "start the tasks of a paused topic again, due ones in due order")):
        p = verb_parser(sub, common, name, help)
        p.add_argument("topic", help="task type, e.g. order:cancel")
    task_verb(sub, common, "run", "make a delayed task due now (a recurring one then continues on its schedule); "
                     "a running or finished task is an error")
