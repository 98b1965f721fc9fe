"""The task verbs of `delayd`: add (one, or many from a JSONL file), get, del, retry, ls."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from delayd.cli.common import (
    Progress,
    Verb,
    client_for,
    emit,
    fail,
    int_at_least,
    non_negative,
    positive_int,
    task_verb,
    verb_parser,
)
from delayd.model import attempts
from delayd.model.clock import local_time as fmt_time
from delayd.model.clock import time_parts
from delayd.model.deletion import CLAIMED
from delayd.model.task import STATUSES, TaskError

if TYPE_CHECKING:
    from delayd.client.sync_client import Client

ADD_FIELDS = ("call", "url", "push", "delay", "at", "intervals", "every", "cron", "tz", "retries", "once", "priority",
              "params", "method", "body", "timeout", "callback", "signing_key", "debounce", "max_wait",
              "traceparent", "tracestate")


def read_jsonl(source: str, client: Client, progress: Progress) -> tuple[list, int]:
    """Every line of `source` (a file, or - for stdin) validated: (built tasks, lines read).

    Raises TaskError naming the first bad line (and how many more there are); nothing is written."""
    from delayd.client.base import gc_paused
    try:
        handle = sys.stdin if source == "-" else open(source, encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"cannot read {source}: {exc.strerror}") from None
    name = "stdin" if source == "-" else source
    built, errors, number = [], [], 0
    with handle, gc_paused():
        try:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as exc:
                    errors.append(f"{name} line {number}: not valid JSON: {exc}")
                    continue
                if not isinstance(item, dict):
                    errors.append(f"{name} line {number}: expected a JSON object of add() arguments")
                    continue
                try:
                    built.append(client.build(item.pop("topic", None), item.pop("id", None), **item))
                except TaskError as exc:
                    errors.append(f"{name} line {number}: {exc}")
                progress(f"checking {name}: line {number}")
        except UnicodeDecodeError as exc:
            raise TaskError(f"{name} line {number + 1}: not UTF-8 text: {exc.reason}") from None
    if errors:
        more = f" (and {len(errors) - 1} more bad line{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise TaskError(errors[0] + more + "; nothing was added")
    return built, number


def add_from(args: argparse.Namespace) -> int:
    """`delayd add --from FILE.jsonl`: validate every line, then write in batches."""
    from delayd.client.sync_client import ADD_BATCH, AddInterrupted
    client = client_for(args)
    progress = Progress()
    try:
        built, lines = read_jsonl(args.from_file, client, progress)
        batch = 10 * ADD_BATCH
        written = 0
        for start in range(0, len(built), batch):
            progress(f"adding {start}/{len(built)} ({100 * start // max(1, len(built))}%)", force=start == 0)
            try:
                written += client.add_built(built[start:start + batch], args.nx)
            except AddInterrupted as exc:  # the message counts the whole file's tasks written before it
                raise exc.after(written, len(built)) from None
    finally:
        progress.done()
    existed = len(built) - written
    source = "stdin" if args.from_file == "-" else args.from_file
    emit(args, {"result": "added", "lines": lines, "tasks": len(built), "written": written, "existed": existed},
         f"added {written} task{'s' if written != 1 else ''} from {source}"
         + (f"; {existed} existed (nothing changed)" if existed else ""))
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    if args.from_file is not None:
        given = [f"--{name}" for name in ADD_FIELDS if getattr(args, name) not in (None, False)]
        if args.topic is not None or given:
            args.parser.error("--from takes the tasks from the file: give no TOPIC, ID or task options with it"
                              + (f" (got {', '.join(given)})" if given else ""))
        return add_from(args)
    if args.topic is None or args.id is None:
        args.parser.error("TOPIC and ID are required (or --from FILE.jsonl)")
    if not (args.call or args.url or args.push):
        args.parser.error("one of the arguments --call --url --push is required")
    try:
        params = json.loads(args.params) if args.params is not None else None
    except json.JSONDecodeError as exc:
        return fail(f"--params is not valid JSON: {exc}")
    fields = dict(call=args.call, url=args.url, push=args.push, params=params, intervals=args.intervals,
                  persistent=not args.once, priority=args.priority, callback=args.callback,
                  method=args.method, body=args.body, timeout=args.timeout, delay=args.delay, at=args.at,
                  every=args.every, cron=args.cron, tz=args.tz, retries=args.retries, signing_key=args.signing_key,
                  debounce=args.debounce, max_wait=args.max_wait)
    if args.traceparent is None:  # the trace context a calling process hands down (OpenTelemetry's env carriers)
        args.traceparent, args.tracestate = os.environ.get("TRACEPARENT") or None, os.environ.get("TRACESTATE")
    fields.update(traceparent=args.traceparent, tracestate=args.tracestate)
    client = client_for(args)
    written = client.add(args.topic, args.id, nx=args.nx, **{k: v for k, v in fields.items() if v is not None})
    task = client.get(args.topic, args.id)
    state = "added" if written else "exists"
    emit(args, {"result": state, "task": task.to_dict() if task else None},
         f"{state} {args.topic}:{args.id}" + (f" due {fmt_time(task.due_at, task.tz)}" if task and written else
                                              " (nothing changed)" if not written else ""))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    task = client_for(args).get(args.topic, args.id)
    if task is None:
        return fail(f"not found: {args.topic}:{args.id}")
    if args.json:
        print(task.to_json())
        return 0
    data = task.to_dict()
    if not task.url:  # a URL task's request: a call or push task has none to show (--json keeps them)
        del data["method"], data["body"]
    print(f"{'schedule':12} {task.describe_schedule()}")
    for name, value in data.items():
        if value is None or name in ("key", "attempts") or (name == "intervals" and task.backoff):
            continue
        if name == "retries":
            value = task.describe_retries(time.time())
        elif name.endswith("_at"):
            value = f"{fmt_time(value, task.tz)}, unix {value:.3f}"
        elif isinstance(value, (dict, list)):
            value = json.dumps(value)
        print(f"{name:12} {value}")
    for line in attempts.describe(task.attempts, task.tz):
        print(line)
    return 0


TOO_LATE = 3  # `del`'s exit code for a task deleted after a run of it was claimed


def cmd_del(args: argparse.Namespace) -> int:
    """Exit 0: deleted, no run of it starts; 1: no such task; 3: deleted, but a run was already claimed."""
    answer = client_for(args).delete(args.topic, args.id, hard=args.hard)
    if answer is False:
        return fail(f"not found: {args.topic}:{args.id}")
    claimed = answer is CLAIMED
    done = f"{'removed' if args.hard else 'deleted'} {args.topic}:{args.id}"
    emit(args, {"result": "deleted", "hard": args.hard, "claimed": claimed},
         f"{done}, too late: a run had already been claimed and may be starting or running" if claimed else done)
    return TOO_LATE if claimed else 0


def cmd_retry(args: argparse.Namespace) -> int:
    if not client_for(args).retry(args.topic, args.id):
        return fail(f"not found: {args.topic}:{args.id}")
    emit(args, {"result": "retrying"}, f"retrying {args.topic}:{args.id} now")
    return 0


DUE_WIDTH = 29  # a time with its zone: '2026-12-07 03:00:00.000 CET', up to a 5-letter zone such as +0530
LS_HEADER = f"{'KEY':32} {'STATUS':8} {'RUNS':>4} {'DUE':{DUE_WIDTH}} {'TARGET':40} LAST_ERROR"


def cmd_ls(args: argparse.Namespace) -> int:
    """Stream the tasks as they are read; when --limit stopped the listing, say on stderr (stdout
    stays parseable) how many more there are, by the counters, and how to see them."""
    client = client_for(args)
    progress = Progress()
    shown, more = 0, False

    def reading(bucket: int, buckets: int, read: int) -> None:
        if not shown:  # once rows are printed, a progress line would get between them
            progress(f"listing: bucket {bucket + 1}/{buckets}, {read} records read")

    try:
        for task in itertools.islice(client.iter_tasks(args.topic, args.status, reading), args.offset, None):
            if shown == args.limit and not args.all:
                more = True
                break
            if not shown:
                progress.done()
                if not args.json:
                    print(LS_HEADER)
            shown += 1
            if args.json:
                print(task.to_json())
                continue
            error = (task.last_error or "").splitlines()[0][:60] if task.last_error else ""
            due = time_parts(task.due_at, task.tz)[0]  # a cron task's in its zone, without the local time beside it
            print(f"{task.key:32} {task.status:8} {task.runs:>4} {due:{DUE_WIDTH}} {task.target[:40]:40} {error}")
    finally:
        progress.done()
    if not shown and not args.json:
        print(LS_HEADER)
    if more:
        left = max(1, client.count(args.topic, args.status) - args.offset - shown)
        print(f"delayd: {shown} task{'s' if shown != 1 else ''} shown, {left} more: --offset {args.offset + shown} "
              "for the next page, --limit N for more at once, --all for every one", file=sys.stderr)
    return 0


VERBS: dict[str, Verb] = {"add": cmd_add, "get": cmd_get, "del": cmd_del, "retry": cmd_retry, "ls": cmd_ls}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = verb_parser(sub, common, "add", "add (or replace) a task, or many from a JSONL file",
                    "Add (or replace) a task; or, with --from, one task per line of a JSONL "
                    "file: each line a JSON object of add()'s keyword arguments with topic and "
                    "id, e.g. {\"topic\": \"order:cancel\", \"id\": 42, \"call\": "
                    "\"shop.tasks:cancel\", \"delay\": 1800}. Every line is checked before "
                    "anything is written.")
    p.add_argument("topic", nargs="?", help="task type, e.g. order:cancel")
    p.add_argument("id", nargs="?", help="id within the topic")
    p.add_argument("--from", dest="from_file", metavar="FILE.jsonl",
                   help="add the tasks of a JSONL file (- for stdin); progress on a terminal, quiet when piped")
    p.set_defaults(parser=p)
    target = p.add_mutually_exclusive_group()
    target.add_argument("--call", metavar="MOD:FUNC", help="function to call with the task")
    target.add_argument("--url", help="http(s) URL to request")
    target.add_argument("--push", metavar="LIST", help="Redis list to RPUSH the task's JSON to")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", type=non_negative, metavar="S", help="first run S seconds from now")
    when.add_argument("--at", metavar="TIME", help="first run at Unix seconds or an ISO 8601 time")
    when.add_argument("--debounce", type=non_negative, metavar="S",
                      help="run S seconds after the last such add: a task that has not started yet gets these "
                           "arguments and is put off to now + S (see --max-wait)")
    p.add_argument("--max-wait", type=non_negative, metavar="M",
                   help="with --debounce: never put the run off more than M seconds after its first add")
    schedule = p.add_mutually_exclusive_group()
    schedule.add_argument("--intervals", metavar="0,30,60", help="runs until success, gaps in seconds, each from "
                                                                    "the previous run's due time: 0,30,60 runs at "
                                                                    "+0, +30, +90 s (none: see --retries)")
    schedule.add_argument("--every", type=float, metavar="S", help="recurring: every S seconds (>= 1), whatever "
                                                                  "the outcome; first run after S unless --delay/--at")
    schedule.add_argument("--cron", metavar="EXPR", help="recurring: at the times of 'm h dom mon dow' in --tz")
    schedule.add_argument("--retries", type=int, metavar="N",
                          help="no schedule: retry a run that neither succeeds nor fails at most N times, "
                               "with backoff 1, 2, 4 … s (default: the daemon's retries, 20; 0 = one run)")
    p.add_argument("--tz", metavar="ZONE", help="IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
    p.add_argument("--once", action="store_true", help="end as failed after the last interval, or "
                                                           "after one run without a schedule (persistent=false)")
    p.add_argument("--priority", type=int, choices=(1, 2, 3), help="1-3, 3 highest (default 2)")
    p.add_argument("--params", metavar="JSON", help="JSON object handed to the handler or sent to the URL")
    p.add_argument("--method", type=str.upper, choices=("GET", "POST"), help="HTTP method of a url task")
    p.add_argument("--body", choices=("form", "json"), help="how a POST sends params (default form)")
    p.add_argument("--timeout", type=float, metavar="S", help="per-run timeout of a url task")
    p.add_argument("--callback", metavar="MOD:FUNC", help="function called once after success")
    p.add_argument("--signing-key", metavar="NAME", help="the url_signing_keys entry that signs a url task's "
                                                         "requests (default: url_signing_secret)")
    p.add_argument("--traceparent", metavar="TP", help="the W3C trace context its runs link to "
                                                       "(default: $TRACEPARENT, with $TRACESTATE)")
    p.add_argument("--tracestate", metavar="TS", help="the W3C tracestate going with --traceparent")
    p.add_argument("--nx", action="store_true", help="only add if the task does not exist")

    task_verb(sub, common, "get", "show a task")
    p = task_verb(sub, common, "del", "delete a task (it never runs again; exit 3: too late for a run already "
                                      "claimed, which may be starting or running)")
    p.add_argument("--hard", action="store_true", help="remove every trace instead of marking it deleted")
    task_verb(sub, common, "retry", "run a failed task again now")

    p = verb_parser(sub, common, "ls", "list tasks, bucket by bucket and by key within a bucket (an order that "
                                       "--offset pages keep while tasks change state)")
    p.add_argument("--topic")
    p.add_argument("--status", choices=STATUSES)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--limit", type=positive_int, default=100, metavar="N",
                      help="show at most N tasks (default 100); stderr says how many more there are")
    size.add_argument("--all", action="store_true", help="show every task, streamed as it is read")
    p.add_argument("--offset", type=int_at_least(0), default=0, metavar="N",
                   help="skip the first N tasks of that order")
