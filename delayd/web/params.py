"""The values a request of the JSON API gives besides its path (its query string, its form body), each
checked where it is given: a bad one answers 400 with one line, whatever else the request says, so that
docs/openapi.json describes exactly what each takes."""
from __future__ import annotations

from typing import Callable, NamedTuple, TypeVar

from starlette.requests import Request

from delayd.client.base import to_ms
from delayd.model.checks import TaskError, check_topic
from delayd.model.limit import MAX_COUNT, parse_rate
from delayd.model.origin import origins
from delayd.web import cursors

T = TypeVar("T")
FLAGS = {"true": True, "1": True, "false": False, "0": False}
DRY_RUN = {**FLAGS, "on": True, "off": False}  # (a checkbox without a value sends "on")
REPLAY_STATUSES = ("failed", "ok", "all")


class BadParam(ValueError):
    """A value refused (app.py answers 400 with its one line)."""


def flag(name: str, text: str, words: dict[str, bool] = FLAGS) -> bool:
    if text not in words:
        raise BadParam(f"{name} must be {', '.join(words)}, got {text!r}")
    return words[text]


def whole(name: str, text: str, low: int, high: int) -> int:
    """A number from `low` to `high` in ASCII digits (int() also takes '٣' and '1_0')."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18 and low <= int(text) <= high):
        raise BadParam(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return int(text)


def choice(name: str, text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise BadParam(f"{name} must be one of {', '.join(choices)}, got {text!r}")
    return text


def failed_cursor(name: str, text: str) -> str | None:
    """retry-failed's cursor (delayd.web.cursors, of failed tasks) as delayd.client takes it; '' is none."""
    return cursors.for_client(cursors.place(text, ("failed",))) if text else None


def host(name: str, text: str) -> str:
    """A HOST as delayd.model.origin reads it, without `%` (a host name holds no percent-escape, and a path
    segment's are decoded before this reads it)."""
    if "%" in text:
        raise BadParam(f"bad host {text!r}: a host name holds no %")
    try:
        origins(text)
    except TaskError as exc:
        raise BadParam(str(exc)) from None
    return text


def topic(name: str, text: str) -> str:
    return check_topic(text)


def time(name: str, text: str) -> str:
    """Unix seconds or an ISO 8601 time (as delayd.client.base.to_ms reads them)."""
    try:
        to_ms(text)
    except TaskError:
        raise BadParam(f"{name} must be Unix seconds or an ISO 8601 time, got {text!r}") from None
    return text


def rate(name: str, text: str) -> str | None:
    """N/s, N/m or N/h; '' is none."""
    if text:
        parse_rate(text)
    return text or None


def concurrency(name: str, text: str) -> int | None:
    return whole(name, text, 1, MAX_COUNT - 1) if text else None


def given(request: Request, name: str, check: Callable[[str, str], T], default: T, query: bool = True,
          form: bool = True) -> T:
    """`name`'s value: each one given (in the query string, then in the form body, which wins; each where
    asked for) passed through check(name, text); BadParam for one it refuses (a ValueError: a TaskError,
    a BadCursor), `default` when none is given."""
    body = getattr(request.state, "form", {}) if form else {}
    texts = [*(request.query_params.getlist(name) if query else ()), *([body[name]] if name in body else [])]
    try:
        values = [check(name, text) for text in texts]
    except ValueError as exc:
        raise BadParam(str(exc)) from None
    return values[-1] if values else default


class Replay(NamedTuple):
    since: str
    status: str
    dry_run: bool


def replay(request: Request) -> Replay:
    """POST /api/hosts/HOST/replay's form body: `since` (needed), `status`, `dry_run`."""
    since = given(request, "since", time, "", query=False)
    if not since:
        raise BadParam("replay needs since: Unix seconds or an ISO 8601 time")
    return Replay(since, given(request, "status", lambda name, text: choice(name, text, REPLAY_STATUSES), "failed",
                               query=False),
                  given(request, "dry_run", lambda name, text: flag(name, text, DRY_RUN), False, query=False))


class Limit(NamedTuple):
    rate: str | None
    concurrency: int | None
    clear: bool


def limit(request: Request) -> Limit:
    """POST /api/limits/TOPIC's form body: `rate` and/or `concurrency` ('' is none), or `clear`."""
    found = Limit(given(request, "rate", rate, None, query=False),
                  given(request, "concurrency", concurrency, None, query=False),
                  given(request, "clear", flag, False, query=False))
    if found == (None, None, False):
        raise BadParam("a limit needs a rate (N/s, N/m, N/h), a concurrency, or both; or clear=1 to lift it")
    return found
