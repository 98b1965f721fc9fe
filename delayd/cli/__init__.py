"""The `delayd` command: task verbs (tasks.py), `stats` (stats.py), daemon verbs
(daemon.py), schedule verbs (schedule.py) and `web` (delayd.web.command); what they
share is in common.py. This module builds the parser and runs a verb; a verb imports the
client (and redis-py) itself when it runs, so that the parser alone starts quickly.

Exit codes: 0 success, 1 failure (bad task, Redis unreachable, not found; `status`: a child
is down or crash-looping), 2 command-line syntax, 3 `status` when not running, 4 starting.
"""
from __future__ import annotations

import argparse
import sys

from setproctitle import setproctitle

from delayd import config as config_mod
from delayd.cli import daemon, schedule, stats, tasks
from delayd.cli.common import Verb, fail
from delayd.cli.options_help import HELP
from delayd.model.task import TaskError
from delayd.version import __version__
from delayd.web import command as web_command

VERBS: dict[str, Verb] = {**tasks.VERBS, **daemon.VERBS, **stats.VERBS, **schedule.VERBS, "web": web_command.run}


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", metavar="FILE", help="config file (default: $DELAYD_CONFIG)")
    common.add_argument("--redis", metavar="URL", help="Redis URL (default: $DELAYD_REDIS_URL, the config, "
                                                       "or the embedded Redis)")
    common.add_argument("--prefix", help="key prefix in Redis (default: $DELAYD_PREFIX or delayd:)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")

    parser = argparse.ArgumentParser(prog="delayd", description="Delayed and recurring tasks stored in Redis.",
                                     epilog=HELP)
    parser.add_argument("--version", action="version", version=f"delayd {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in (tasks, daemon, stats, schedule):
        module.add_parsers(sub, common)
    web_command.add_parser(sub, common)
    return parser


def hide_password(url: str | None) -> None:
    """Retitle this process with the password in `--redis URL` masked, since `ps` shows argv.

    (A password in DELAYD_REDIS_URL or the config file never reaches argv at all.)"""
    if not url:
        return
    from delayd.store.connection import redact
    masked = redact(url)
    if masked != url:
        setproctitle(" ".join(arg.replace(url, masked) for arg in sys.argv))


def main(argv: list[str] | None = None) -> int:
    # What Redis holds may be any bytes (see delayd.store.connection): printed, they must not raise.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    if argv is None:  # the command line of this very process
        hide_password(getattr(args, "redis", None))
    try:
        return VERBS[args.verb](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if isinstance(exc, reported_errors()):
            return fail(str(exc))
        raise


def reported_errors() -> tuple[type[Exception], ...]:
    """The errors a verb ends with as one line. Imported when one is raised: the client's and
    the store's import redis-py, which verbs that never reach Redis (--help, stop) do without."""
    from delayd.client.errors import DelaydError
    from delayd.store.connection import RedisURLError
    return (TaskError, DelaydError, config_mod.ConfigError, RedisURLError)
