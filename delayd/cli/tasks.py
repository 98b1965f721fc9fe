"""The task verbs of `delayd`: add (one, or many from a JSONL file), get, del, retry, ls."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

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
from delayd.model.fields import FIELDS, SHOWN, Field
from delayd.model.task import STATUSES, TaskError

if TYPE_CHECKING:
    from delayd.client.sync_client import Client

CONVERTERS: dict[str, Callable[[str], Any]] = {"float": float, "int": int, "upper": str.upper,
                                                "non_negative": non_negative}  # the table's flag types


def add_flags() -> list[Field]:
    """The fields of the table (delayd.model.fields) that `delayd add` has a flag for, in its order, each group of
    flags that exclude each other together where its first member is."""
    flagged = [f for f in FIELDS if f.flag]
    out: list[Field] = []
    for f in flagged:
        if f not in out:
            out += [g for g in flagged if g.flag.group == f.flag.group] if f.flag.group else [f]
    return out


def flag_of(f: Field) -> str:
    """Field `f`'s flag: --name, with '-' for '_', unless the table names another."""
    return f.flag.flag or f"--{f.name.replace('_', '-')}"


ADD_FLAGS = add_flags()


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
    fields = {f.name: getattr(args, f.name) for f in ADD_FLAGS if f.name != "nx" and getattr(args, f.name) is not None}
    if args.from_file is not None:
        given = [flag_of(f) for f in ADD_FLAGS if f.name in fields]
        if args.topic is not None or given:
            args.parser.error("--from takes the tasks from the file: give no TOPIC, ID or task options with it"
                              + (f" (got {', '.join(given)})" if given else ""))
        return add_from(args)
    if args.topic is None or args.id is None:
        args.parser.error("TOPIC and ID are required (or --from FILE.jsonl)")
    if not (args.call or args.url or args.push):
        args.parser.error("one of the arguments --call --url --push is required")
    try:
        if "params" in fields:
            fields["params"] = json.loads(fields["params"])
    except json.JSONDecodeError as exc:
        return fail(f"--params is not valid JSON: {exc}")
    if "traceparent" not in fields and os.environ.get("TRACEPARENT"):  # a calling process's (OpenTelemetry's carriers)
        fields.update(traceparent=os.environ["TRACEPARENT"], tracestate=os.environ.get("TRACESTATE"))
    client = client_for(args)
    written = client.add(args.topic, args.id, nx=args.nx, **fields)
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
COLUMNS = [f for f in SHOWN if f.column]  # the table's fields ls shows in columns of their own
LS_HEADER = (f"{'KEY':32} {'STATUS':8} {'RUNS':>4} {'DUE':{DUE_WIDTH}} {'TARGET':40} "
             + "".join(f"{f.name.upper():{f.column}} " for f in COLUMNS) + "LAST_ERROR")


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
            own = "".join(f"{str(getattr(task, f.shown) or '-')[:f.column]:{f.column}} " for f in COLUMNS)
            print(f"{task.key:32} {task.status:8} {task.runs:>4} {due:{DUE_WIDTH}} {task.target[:40]:40} {own}{error}")
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
    p.set_defaults(parser=p, nx=False)  # (--nx: a flag of the table, which gives no default)
    groups: dict[str, Any] = {}
    for f in ADD_FLAGS:
        flag = f.flag
        where = p if flag.group is None else groups.get(flag.group) or groups.setdefault(
            flag.group, p.add_mutually_exclusive_group())
        options: dict[str, Any] = {"action": "store_const", "const": flag.const} if flag.const is not None else {
            "metavar": flag.metavar, "type": CONVERTERS.get(flag.type or ""), "choices": flag.choices}
        where.add_argument(flag_of(f), dest=f.name, help=flag.help, **options)

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
