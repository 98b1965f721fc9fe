"""The `delayd` command: daemon verbs (start, stop, …) and task verbs (add, get, …).

Exit codes: 0 success, 1 failure (bad task, Redis unreachable, not found),
2 command-line syntax, 3 `status` when not running.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from setproctitle import setproctitle

from . import __version__
from . import config as config_mod
from .clock import local_time as fmt_time
from .client import ADD_BATCH, Client, DelaydError
from .connection import RedisURLError, redact
from .task import STATUSES, TaskError
from .web import command as web_command

VERBS: dict[str, Callable[[argparse.Namespace], int]] = {}


def verb(name: str) -> Callable:
    def register(func: Callable[[argparse.Namespace], int]) -> Callable:
        VERBS[name] = func
        return func
    return register


def fail(message: str, code: int = 1) -> int:
    print(f"delayd: error: {message}", file=sys.stderr)
    return code


def config_loader(args: argparse.Namespace) -> Callable[[], config_mod.Config]:
    """Builds the config from the file, the environment of now and the flags (again on each reload)."""
    return config_mod.loader(args.config, redis_url=args.redis, prefix=args.prefix)


def load_config(args: argparse.Namespace) -> config_mod.Config:
    config = config_loader(args)()
    for warning in config.warnings:
        print(f"delayd: warning: {warning}", file=sys.stderr)
    return config


def client_for(args: argparse.Namespace) -> Client:
    return Client(config=load_config(args))


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, separators=(",", ":")) if args.json else text)


class Progress:
    """A one-line progress report on stderr, only when stderr is a terminal (quiet when piped)."""

    def __init__(self, stream: Any = None, every: float = 0.1):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.every = every
        self.last = 0.0
        self.shown = False

    def __call__(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self.shown = True

    def done(self) -> None:
        """Clear the line, so that what follows starts clean."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


# -- task verbs ----------------------------------------------------------------------
ADD_FIELDS = ("call", "url", "push", "delay", "at", "intervals", "every", "cron", "tz", "once", "priority", "params",
              "method", "body", "timeout", "callback")


def read_jsonl(source: str, client: Client, progress: Progress) -> tuple[list, int]:
    """Every line of `source` (a file, or - for stdin) validated: (built tasks, lines read).

    Raises TaskError naming the first bad line (and how many more there are); nothing is written."""
    try:
        handle = sys.stdin if source == "-" else open(source, encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"cannot read {source}: {exc.strerror}") from None
    name = "stdin" if source == "-" else source
    built, errors, number = [], [], 0
    with handle:
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
    client = client_for(args)
    progress = Progress()
    try:
        built, lines = read_jsonl(args.from_file, client, progress)
        batch = 10 * ADD_BATCH
        written = 0
        for start in range(0, len(built), batch):
            progress(f"adding {start}/{len(built)} ({100 * start // max(1, len(built))}%)", force=start == 0)
            written += client.add_built(built[start:start + batch], args.nx)
    finally:
        progress.done()
    existed = len(built) - written
    emit(args, {"result": "added", "lines": lines, "tasks": len(built), "written": written, "existed": existed},
         f"added {written} task{'s' if written != 1 else ''} from {'stdin' if args.from_file == '-' else args.from_file}"
         + (f"; {existed} existed (nothing changed)" if existed else ""))
    return 0


@verb("add")
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
                  every=args.every, cron=args.cron, tz=args.tz)
    client = client_for(args)
    written = client.add(args.topic, args.id, nx=args.nx, **{k: v for k, v in fields.items() if v is not None})
    task = client.get(args.topic, args.id)
    state = "added" if written else "exists"
    emit(args, {"result": state, "task": task.to_dict() if task else None},
         f"{state} {args.topic}:{args.id}" + (f" due {fmt_time(task.due_at)}" if task and written else
                                              " (nothing changed)" if not written else ""))
    return 0


@verb("get")
def cmd_get(args: argparse.Namespace) -> int:
    task = client_for(args).get(args.topic, args.id)
    if task is None:
        return fail(f"not found: {args.topic}:{args.id}")
    if args.json:
        print(task.to_json())
        return 0
    data = task.to_dict()
    print(f"{'schedule':12} {task.describe_schedule()}")
    for name, value in data.items():
        if value is None or name == "key":
            continue
        if name.endswith("_at"):
            value = f"{fmt_time(value)} ({value:.3f})"
        elif isinstance(value, (dict, list)):
            value = json.dumps(value)
        print(f"{name:12} {value}")
    return 0


@verb("del")
def cmd_del(args: argparse.Namespace) -> int:
    found = client_for(args).delete(args.topic, args.id, hard=args.hard)
    if not found:
        return fail(f"not found: {args.topic}:{args.id}")
    emit(args, {"result": "deleted", "hard": args.hard},
         f"{'removed' if args.hard else 'deleted'} {args.topic}:{args.id}")
    return 0


@verb("retry")
def cmd_retry(args: argparse.Namespace) -> int:
    if not client_for(args).retry(args.topic, args.id):
        return fail(f"not found: {args.topic}:{args.id}")
    emit(args, {"result": "retrying"}, f"retrying {args.topic}:{args.id} now")
    return 0


@verb("ls")
def cmd_ls(args: argparse.Namespace) -> int:
    progress = Progress()
    try:
        tasks = client_for(args).list(
            topic=args.topic, status=args.status, limit=args.limit, offset=args.offset,
            progress=lambda bucket, buckets, read: progress(f"listing: bucket {bucket + 1}/{buckets}, "
                                                            f"{read} records read"))
    finally:
        progress.done()
    if args.json:
        for task in tasks:
            print(task.to_json())
        return 0
    print(f"{'KEY':32} {'STATUS':8} {'RUNS':>4} {'DUE':23} {'TARGET':40} LAST_ERROR")
    for task in tasks:
        error = (task.last_error or "").splitlines()[0][:60] if task.last_error else ""
        print(f"{task.key:32} {task.status:8} {task.runs:>4} {fmt_time(task.due_at):23} {task.target[:40]:40} {error}")
    return 0


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


@verb("stats")
def cmd_stats(args: argparse.Namespace) -> int:
    stats = client_for(args).stats()
    if args.json:
        print(json.dumps(stats, separators=(",", ":")))
        return 0
    counts, ready, runs, late = stats["counts"], stats["ready"], stats["runs_last_minute"], stats["lateness"]
    print(f"tasks    delayed={counts['delayed']} (waiting={stats['waiting']} ready p3={ready['3']} p2={ready['2']} "
          f"p1={ready['1']})  running={counts['running']}  ok={counts['ok']}  failed={counts['failed']}  "
          f"deleted={counts['deleted']}  quarantined={stats['quarantined']}")
    if stats["paused"]:
        print(f"paused   {', '.join(stats['paused'])} ({stats['parked']} due tasks waiting for resume)")
    print(f"due      oldest {fmt_time(stats['oldest_due_at'])} (lag {stats['oldest_due_lag']:.3f} s"
          f"{'' if stats['oldest_due_exact'] else ', per-topic lags approximate'})  "
          f"next {fmt_time(stats['next_due_at'])}")
    print(f"runs     last {stats['window_s']:.0f} s: {sum(runs[o] for o in ('ok', 'failed', 'retry', 'quarantine'))} "
          f"({stats['tasks_per_s']:.2f}/s)  ok={runs['ok']} failed={runs['failed']} retry={runs['retry']} "
          f"quarantine={runs['quarantine']} lapsed={runs['lapsed']}  "
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


# -- daemon verbs --------------------------------------------------------------------
@verb("start")
def cmd_start(args: argparse.Namespace) -> int:
    from . import control
    return control.start(load_config(args), config_loader(args), args.foreground)


@verb("stop")
def cmd_stop(args: argparse.Namespace) -> int:
    from . import control
    return control.stop(load_config(args), args.timeout)


@verb("restart")
def cmd_restart(args: argparse.Namespace) -> int:
    from . import control
    config = load_config(args)
    code = control.stop(config, args.timeout)
    return code or control.start(config, config_loader(args), foreground=False)


@verb("reload")
def cmd_reload(args: argparse.Namespace) -> int:
    import signal
    from . import control
    pid = control.signal_master(load_config(args), signal.SIGHUP)
    if not pid:
        return fail("delayd is not running")
    print(f"reload requested (pid {pid})")
    return 0


def fmt_span(seconds: float) -> str:
    """A duration as 3d04h, 2h05m, 7m30s or 12s."""
    s = int(seconds)
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{s % 60:02d}s" if minutes else f"{s}s"


def cluster_status(args: argparse.Namespace) -> int:
    """Every live daemon on the store (from the registry in Redis), wherever it runs."""
    daemons = client_for(args).daemons()
    if args.json:
        print(json.dumps({"daemons": daemons}, separators=(",", ":")))
        return 0 if daemons else 3
    if not daemons:
        print("no live delayd daemon on this store")
        return 3
    now = time.time()
    print(f"{len(daemons)} live daemon{'s' if len(daemons) != 1 else ''}; every bucket process scans every bucket "
          "and every queue process claims from every bucket (a due task moves once and runs once)")
    width = max(6, *(len(d["id"]) for d in daemons))
    print(f"{'DAEMON':{width}} {'STATE':9} {'VERSION':8} {'UPTIME':>8} {'SEEN':>6} {'BUCKETS':>7} {'QUEUES':>10} "
          f"{'CHILDREN':>9} RESTARTS")
    for d in daemons:
        children = [c for c in d["children"] if c["name"] != "redis"]
        up = sum(1 for c in children if c["pid"])
        looping = sum(1 for c in children if c["crash_looping"])
        print(f"{d['id']:{width}} {d['state']:9} {d['version'][:8]:8} {fmt_span(now - d['started']):>8} "
              f"{d['seen_ago']:>5.1f}s {d['buckets']:>7} {str(d['queues']) + ' x ' + str(d['concurrency']):>10} "
              f"{str(up) + '/' + str(len(children)) + ' up':>9} {sum(c['restarts'] for c in children)}"
              + (f"  {looping} CRASH-LOOPING" if looping else ""))
    return 0


@verb("status")
def cmd_status(args: argparse.Namespace) -> int:
    from . import control
    if args.cluster:
        return cluster_status(args)
    state = control.status(load_config(args))
    if state is None:
        emit(args, {"running": False}, "delayd is not running")
        return 3
    if args.json:
        print(json.dumps(state, separators=(",", ":")))
        return 0
    print(f"delayd is running (pid {state['pid']}, redis {state['redis']})")
    print(f"{'PID':>7} {'TITLE':28} {'STATE':9} {'UPTIME':>9} {'CPU%':>6} {'RSS':>8} RESTARTS")
    for p in state["processes"]:
        flag = "  CRASH-LOOPING" if p["crash_looping"] else ""
        print(f"{p['pid']:>7} {p['title'][:28]:28} {p['state']:9} {p['uptime']:>8.0f}s {p['cpu_percent']:>6.2f} "
              f"{p['rss'] // 1024:>6}Ki {p['restarts']}{flag}")
    for name in state["waiting_to_restart"]:
        print(f"{'-':>7} {'delayd: ' + name:28} waiting to restart")
    return 0


@verb("web")
def cmd_web(args: argparse.Namespace) -> int:
    return web_command.run(args)


# -- parser --------------------------------------------------------------------------
def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", metavar="FILE", help="config file (default: $DELAYD_CONFIG)")
    common.add_argument("--redis", metavar="URL", help="Redis URL (default: $DELAYD_REDIS_URL, the config, "
                                                       "or the embedded Redis)")
    common.add_argument("--prefix", help="key prefix in Redis (default: $DELAYD_PREFIX or delayd:)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")

    parser = argparse.ArgumentParser(prog="delayd", description="Delayed and recurring tasks stored in Redis.",
                                     epilog=config_mod.HELP)
    parser.add_argument("--version", action="version", version=f"delayd {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def task_verb(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.add_argument("topic", help="task type, e.g. order:cancel")
        p.add_argument("id", help="id within the topic")
        return p

    p = sub.add_parser("add", parents=[common], help="add (or replace) a task, or many from a JSONL file",
                       description="Add (or replace) a task; or, with --from, one task per line of a JSONL "
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
    schedule = p.add_mutually_exclusive_group()
    schedule.add_argument("--intervals", metavar="0,30,60", help="runs until success, gaps in seconds (default 0)")
    schedule.add_argument("--every", type=float, metavar="S", help="recurring: every S seconds (>= 1), whatever "
                                                                  "the outcome; first run after S unless --delay/--at")
    schedule.add_argument("--cron", metavar="EXPR", help="recurring: at the times of 'm h dom mon dow' in --tz")
    p.add_argument("--tz", metavar="ZONE", help="IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
    p.add_argument("--once", action="store_true", help="end as failed after the last interval (persistent=false)")
    p.add_argument("--priority", type=int, choices=(1, 2, 3), help="1-3, 3 highest (default 2)")
    p.add_argument("--params", metavar="JSON", help="JSON object handed to the handler or sent to the URL")
    p.add_argument("--method", type=str.upper, choices=("GET", "POST"), help="HTTP method of a url task")
    p.add_argument("--body", choices=("form", "json"), help="how a POST sends params (default form)")
    p.add_argument("--timeout", type=float, metavar="S", help="per-run timeout of a url task")
    p.add_argument("--callback", metavar="MOD:FUNC", help="function called once after success")
    p.add_argument("--nx", action="store_true", help="only add if the task does not exist")

    task_verb("get", "show a task")
    p = task_verb("del", "delete a task (it never runs again)")
    p.add_argument("--hard", action="store_true", help="remove every trace instead of marking it deleted")
    task_verb("retry", "run a failed task again now")

    p = sub.add_parser("ls", parents=[common], help="list tasks", description="list tasks")
    p.add_argument("--topic")
    p.add_argument("--status", choices=STATUSES)
    p.add_argument("--limit", type=positive_int, default=100)
    p.add_argument("--offset", type=int, default=0)

    p = sub.add_parser("start", parents=[common], help="start the daemon", description="start the daemon")
    p.add_argument("--foreground", action="store_true", help="do not detach (systemd, containers, tests)")
    for name, help in (("stop", "stop the daemon and wait until it is gone"),
                       ("restart", "stop, then start the daemon")):
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.add_argument("--timeout", type=non_negative, metavar="S",
                       help="seconds to wait (default graceful_timeout + 15)")
    sub.add_parser("reload", parents=[common], help="reread the config and replace the workers (SIGHUP)",
                   description="reread the config and replace the workers (SIGHUP)")
    p = sub.add_parser("status", parents=[common], help="show the master and its children (exit 3: not running)",
                       description="show the master and its children (exit 3: not running)")
    p.add_argument("--cluster", action="store_true",
                   help="every live daemon on this Redis store, on any host (exit 3: none)")

    sub.add_parser("stats", parents=[common], help="counts, lag, tasks/s and lateness, per topic and overall",
                   description="Per topic and overall: tasks delayed (waiting, ready per priority), running, "
                               "ok/failed/deleted (retained), the oldest due lag, runs and tasks/s over the "
                               "last minute, and the lateness (start minus due) p50/p99 of those runs. "
                               "Read from counters in Redis that every daemon keeps, so any host sees all.")
    from . import cli_schedule  # pause, resume, run: verbs of their own module
    cli_schedule.add_parsers(sub, common, task_verb)
    VERBS.update(cli_schedule.VERBS)
    web_command.add_parser(sub, common)
    return parser


def hide_password(url: str | None) -> None:
    """Retitle this process with the password in `--redis URL` masked, since `ps` shows argv.

    (A password in DELAYD_REDIS_URL or the config file never reaches argv at all.)"""
    masked = redact(url)
    if url and masked != url:
        setproctitle(" ".join(arg.replace(url, masked) for arg in sys.argv))


def main(argv: list[str] | None = None) -> int:
    # What Redis holds may be any bytes (see delayd.connection): printed, they must not raise.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    if argv is None:  # the command line of this very process
        hide_password(getattr(args, "redis", None))
    try:
        return VERBS[args.verb](args)
    except (TaskError, DelaydError, config_mod.ConfigError, RedisURLError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
