"""What every verb of the `delayd` command shares: the config, the client, errors and output."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from delayd import config as config_mod
from delayd.cli.options_help import options_help
from delayd.model.task import printable

if TYPE_CHECKING:
    from delayd.client.sync_client import Client

Verb = Callable[[argparse.Namespace], int]


def fail(message: str, code: int = 1) -> int:
    """One error line on stderr (bytes of a name that are not UTF-8 as \\xNN, as `ls` shows them)."""
    print(f"delayd: error: {printable(message)}", file=sys.stderr)
    return code


def config_loader(args: argparse.Namespace) -> config_mod.Recipe:
    """Builds the config from the file, the environment of now and the flags (again on each reload)."""
    return config_mod.loader(args.config, redis_url=args.redis, prefix=args.prefix)


def load_config(args: argparse.Namespace) -> config_mod.Config:
    config = config_loader(args)()
    for warning in config.warnings:
        print(f"delayd: warning: {warning}", file=sys.stderr)
    return config


def client_for(args: argparse.Namespace) -> Client:
    from delayd.client.sync_client import Client  # here, not above: only the verbs that reach Redis import redis-py
    return Client(config=load_config(args))


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, separators=(",", ":")) if args.json else text)


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


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


# -- argument types and parsers --------------------------------------------------------
def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}")
        return value
    parse.__name__ = "int"  # argparse names the type in its message: "invalid int value"
    return parse


positive_int = int_at_least(1)


def non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def verb_parser(sub: Any, common: argparse.ArgumentParser, name: str, help: str,
                description: str | None = None, **options: Any) -> argparse.ArgumentParser:
    return sub.add_parser(name, parents=[common], help=help, description=description or help, **options)


def with_options(sub: Any, common: argparse.ArgumentParser, name: str, help: str) -> argparse.ArgumentParser:
    """A verb that reads the daemon's configuration: its --help lists every option (options_help)."""
    return verb_parser(sub, common, name, help, epilog=options_help(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)


def task_verb(sub: Any, common: argparse.ArgumentParser, name: str, help: str) -> argparse.ArgumentParser:
    """A verb that names one task: TOPIC ID."""
    p = verb_parser(sub, common, name, help)
    p.add_argument("topic", help="task type, e.g. order:cancel")
    p.add_argument("id", help="id within the topic")
    return p
