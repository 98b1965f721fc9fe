"""The task model: what a task is and how it is validated.

Everything written is validated first (`Task.new`); how a task is stored, and read back
defensively, is delayd.model.record (the wire format).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from delayd.model import schedule

FINISHED = ("ok", "failed", "deleted")
STATUSES = ("delayed", "running", *FINISHED)  # the one table of statuses (delayed first: stats counts it by state)
METHODS = ("GET", "POST")
BODIES = ("form", "json")
DEFAULT_PARAMS_LIMIT = 64 * 1024
DEFAULT_RETRIES = 20  # the `retries` option's default (delayd.config)
MAX_RETRIES = 10_000
RETRY_JITTER = 0.1  # a backoff delay is up to this much (a fraction) longer, never shorter
MAX_NAME = 512
# A target is `package.module:function` (dotted identifiers on both sides).
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
TARGET_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_BAD_NAME_CHARS = re.compile(r"[\x00-\x20\x7f]")
KEY_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # a signing key's name (the add script checks the same)
_BAD_URL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\s]")  # whitespace and control characters, Unicode's too
# A W3C traceparent of version 00 (lowercase hex, ids not all zero) and a tracestate kept with it (printable ASCII,
# at most 512 characters): a task's `trace` is the one, then a space and the other (the add script checks the same).
TRACEPARENT_RE = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE_RE = re.compile(r"[!-~](?:[ -~]{0,510}[!-~])?")


class TaskError(ValueError):
    """A task that fails validation. The message is one line, fit for a user."""


def parse_intervals(value: Any) -> list[float]:
    """Accept `10`, `[0, 30, 60]` or `"0,30,60"`; return a non-empty list of seconds."""
    if value is None:
        return [0]
    if isinstance(value, bool):
        raise TaskError("intervals must be seconds: a number, a list, or '0,30,60'")
    if isinstance(value, (int, float)):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise TaskError("intervals must be seconds: a number, a list, or '0,30,60'")
    if not items:
        raise TaskError("intervals must not be empty")
    if len(items) > 1000:
        raise TaskError("intervals may hold at most 1000 entries")
    out: list[float] = []
    for item in items:
        if isinstance(item, bool):
            raise TaskError(f"interval {item!r} is not a number of seconds")
        try:
            number = float(item)
        except (TypeError, ValueError, OverflowError):
            raise TaskError(f"interval {item!r} is not a number of seconds") from None
        if not math.isfinite(number) or number < 0:
            raise TaskError(f"interval {item!r} must be a finite number >= 0")
        if number > 10 * 365 * 86400:
            raise TaskError(f"interval {item!r} is longer than ten years")
        out.append(int(number) if number.is_integer() else number)
    return out


def _check_name(what: str, value: Any) -> str:
    if type(value) is int:  # digits (and a sign): only the length can be wrong
        text = str(value)
        if len(text) > MAX_NAME:
            raise TaskError(f"{what} is longer than {MAX_NAME} characters")
        return text
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TaskError(f"{what} must be a string or an integer")
    text = str(value)
    if not text:
        raise TaskError(f"{what} must not be empty")
    if len(text) > MAX_NAME:
        raise TaskError(f"{what} is longer than {MAX_NAME} characters")
    if _BAD_NAME_CHARS.search(text):
        raise TaskError(f"{what} must not contain spaces or control characters")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise TaskError(f"{what} is not valid UTF-8 text") from None
    return text


# Topics and targets already found good: the items of an add_many (and a web app's adds)
# repeat a few of them, so each is checked once, not per task. Bounded.
_GOOD_TOPICS: set[str] = set()
_GOOD_TARGETS: set[str] = set()
_GOOD_MAX = 1024


def _remember(good: set[str], text: str) -> str:
    if len(good) >= _GOOD_MAX:
        good.clear()
    good.add(text)
    return text


def check_topic(value: Any) -> str:
    """A topic name, checked as add() checks it."""
    if type(value) is str and value in _GOOD_TOPICS:
        return value
    return _remember(_GOOD_TOPICS, _check_name("topic", value))


def check_target(what: str, value: Any) -> str:
    """A `module:function` reference, checked for shape only."""
    if type(value) is str and value in _GOOD_TARGETS:
        return value
    if not isinstance(value, str) or not TARGET_RE.fullmatch(value):
        raise TaskError(f"{what} must look like package.module:function, got {value!r}")
    return _remember(_GOOD_TARGETS, value) if type(value) is str else value


def check_key_name(value: Any) -> str:
    """A signing key's name (url_signing_keys, a task's signing_key): 1-128 letters, digits, _ . : -."""
    if not isinstance(value, str) or not KEY_NAME_RE.fullmatch(value):
        raise TaskError(f"signing_key must be 1-128 letters, digits, '_', '.', ':' or '-', got {value!r}")
    return value


def trace_of(traceparent: Any, tracestate: Any = None) -> str | None:
    """A task's `trace`: `traceparent`, then a space and `tracestate` when that is well formed (W3C: a bad
    tracestate is dropped); None without a traceparent. A bad traceparent is refused."""
    if traceparent is None:
        return None
    if not isinstance(traceparent, str) or not TRACEPARENT_RE.fullmatch(traceparent):
        raise TaskError(f"traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero), "
                        f"got {traceparent!r}")
    state = tracestate.strip() if isinstance(tracestate, str) else ""
    return f"{traceparent} {state}" if _TRACESTATE_RE.fullmatch(state) else traceparent


def module_allowed(target: str, allowed: tuple[str, ...]) -> bool:
    """`shop.tasks` allows `shop.tasks` and `shop.tasks.x`, never `shop.tasks_evil`."""
    module = target.split(":", 1)[0]
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


@dataclass(slots=True)
class Task:
    """One delayed or recurring task, as handlers and the Client see it.

    Times (`created_at`, `due_at`, `last_run_at`) are Unix seconds as floats, by
    Redis's clock. `runs` is the number of the current (or last) run, 1-based.
    """

    topic: str
    id: str
    call: str | None = None
    url: str | None = None
    push: str | None = None
    method: str = "GET"
    body: str = "form"
    params: dict = field(default_factory=dict)
    intervals: list = field(default_factory=lambda: [0])
    persistent: bool = True
    priority: int = 2
    callback: str | None = None
    timeout: float | None = None
    # Recurring schedules (at most one of intervals, every, cron): success does not end them.
    every: float | None = None
    cron: str | None = None
    tz: str | None = None
    # No intervals, every or cron given: a run that neither succeeds nor fails is retried with
    # exponential backoff, at most `retries` times (SPEC 8; None: the reader's `default_retries`).
    backoff: bool = True
    retries: int | None = None
    signing_key: str | None = None  # a url task: the url_signing_keys entry that signs it (None: the default)
    trace: str | None = None  # the W3C trace context of its add: traceparent[ tracestate] (delayd.tracing)
    status: str = "delayed"
    created_at: float | None = None
    due_at: float | None = None
    last_run_at: float | None = None
    runs: int = 0
    last_error: str | None = None
    last_due_at: float | None = None  # a recurring task: the due time its last run was for
    attempts: list = field(default_factory=list)  # the delivery log: the last runs, newest last
    # The fencing token of the claim this copy was read under (internal).
    claim: int = field(default=0, repr=False, compare=False)
    # `retries` when the task gives none: the reader's (the daemon's, a client's) setting (internal).
    default_retries: int = field(default=DEFAULT_RETRIES, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.id}"

    @property
    def target(self) -> str:
        """What the task runs, for logs: `call:…`, `url:…` or `push:…`."""
        if self.call:
            return f"call:{self.call}"
        if self.url:
            return f"url:{self.url}"
        return f"push:{self.push}" if self.push else "-"

    # -- construction and validation -------------------------------------------------
    @classmethod
    def new(
        cls,
        topic: Any,
        id: Any,
        *,
        call: str | None = None,
        url: str | None = None,
        push: str | None = None,
        method: str = "GET",
        body: str = "form",
        params: dict | None = None,
        intervals: Any = None,
        persistent: bool = True,
        priority: int = 2,
        callback: str | None = None,
        timeout: float | None = None,
        every: Any = None,
        cron: Any = None,
        tz: Any = None,
        retries: Any = None,
        signing_key: Any = None,
        traceparent: Any = None,
        tracestate: Any = None,
        params_limit: int | None = DEFAULT_PARAMS_LIMIT,
    ) -> "Task":
        """Validate user input and build a task; raise TaskError with one clear line.

        params_limit=None is for params just decoded from JSON (a stored record):
        they need no serialisability check or copy, and its URL is not held to the add-time
        rule on whitespace (a task stored before the rule keeps running).
        """
        topic = check_topic(topic)
        id = _check_name("id", id)
        if ":" in id:
            raise TaskError("id must not contain ':' (the key is topic:id)")
        if (not call) + (not url) + (not push) != 2:
            raise TaskError("give exactly one of call, url or push")
        if call is not None:
            check_target("call", call)
        if url is not None:
            try:
                parts = urlsplit(url) if isinstance(url, str) else None
                if parts is not None:
                    parts.hostname  # noqa: B018  (raises ValueError for a malformed host)
            except ValueError:
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise TaskError(f"url must be an http:// or https:// URL with a host, got {url!r}")
            if params_limit is not None and _BAD_URL_CHARS.search(url):
                raise TaskError(f"url must not contain spaces or control characters (percent-encode them), "
                                f"got {url!r}")
            if params_limit is not None and not url.isascii() and not is_utf8(url):
                raise TaskError("url is not valid UTF-8 text")
        if push is not None:
            push = _check_name("push list", push)
        if signing_key is not None and check_key_name(signing_key) and url is None:
            raise TaskError("signing_key is for a url task: only URL requests are signed")
        if method != "GET" and (not isinstance(method, str) or method.upper() not in METHODS):
            raise TaskError(f"method must be GET or POST, got {method!r}")
        if body not in BODIES:
            raise TaskError(f"body must be 'form' or 'json', got {body!r}")
        if params is not None and not isinstance(params, dict):
            raise TaskError("params must be a JSON object (a dict)")
        if not params:
            params = {}  # a fresh one: nothing to check or copy
        elif params_limit is not None:  # user input: must survive JSON, as a copy, within the limit
            try:
                encoded = json.dumps(params, allow_nan=False, separators=(",", ":"))
            except (TypeError, ValueError, RecursionError) as exc:
                raise TaskError(f"params are not JSON-serialisable: {exc}") from None
            if len(encoded.encode()) > params_limit:
                raise TaskError(f"params are {len(encoded.encode())} bytes, more than the limit of {params_limit}")
            # A lone surrogate (a byte that was not UTF-8, decoded with surrogateescape) is escaped as
            # \udcNN like a character outside the BMP: checked only when such an escape is there.
            if "\\ud" in encoded and not is_utf8(json.dumps(params, ensure_ascii=False)):
                raise TaskError("params are not valid UTF-8 text")
            params = json.loads(encoded)
        if persistent is not True and persistent is not False:
            raise TaskError("persistent must be true or false")
        if priority not in (1, 2, 3) or isinstance(priority, bool) or not isinstance(priority, int):
            raise TaskError(f"priority must be 1, 2 or 3, got {priority!r}")
        if callback is not None:
            check_target("callback", callback)
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
                raise TaskError(f"timeout must be a number of seconds in (0, 86400], got {timeout!r}")
            timeout = int(timeout) if float(timeout).is_integer() else timeout  # 2.0 as 2, as every producer writes it
        if every is not None or cron is not None or tz is not None:
            every, cron, tz = _check_schedule(intervals, every, cron, tz)
        backoff = intervals is None and every is None and cron is None
        if retries is not None:
            _check_retries(retries, backoff, persistent, intervals, every)
        return cls(
            topic=topic, id=id, call=call, url=url, push=push, method=method.upper(), body=body,
            params=params, intervals=[0] if intervals is None else parse_intervals(intervals), persistent=persistent,
            priority=priority, callback=callback, timeout=timeout, every=every, cron=cron, tz=tz,
            backoff=backoff, retries=retries, signing_key=signing_key, trace=trace_of(traceparent, tracestate),
        )

    def to_dict(self) -> dict[str, Any]:
        """The task as `delayd get --json` prints it: the field names of SPEC section 2."""
        return {
            "topic": self.topic, "id": self.id, "key": self.key, "call": self.call, "url": self.url,
            "push": self.push, "method": self.method, "body": self.body, "params": self.params,
            "intervals": self.intervals, "persistent": self.persistent, "priority": self.priority,
            "callback": self.callback, "timeout": self.timeout, "every": self.every, "cron": self.cron,
            "tz": self.tz, "retries": self.retry_limit, "status": self.status, "created_at": self.created_at,
            "due_at": self.due_at,
            "last_run_at": self.last_run_at, "last_due_at": self.last_due_at, "runs": self.runs,
            "last_error": self.last_error, "attempts": self.attempts, "signing_key": self.signing_key,
            "traceparent": self.trace and self.trace[:55],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    # -- schedule --------------------------------------------------------------------
    @property
    def recurring(self) -> bool:
        """An `every` or `cron` task: it runs at each due time whatever the outcome."""
        return self.every is not None or self.cron is not None

    @property
    def retry_limit(self) -> int | None:
        """How many times a run that neither succeeds nor fails is retried (persistent=False: none);
        None for a task with a schedule (intervals, every or cron), which follows it instead."""
        if not self.backoff:
            return None
        if not self.persistent:
            return 0
        return self.default_retries if self.retries is None else self.retries

    def retry_delay(self, max_delay: float, jitter: float) -> float | None:
        """Seconds from the end of this run (number `runs`) to the retry that follows it, or None
        when no retry is left: retry k comes 2^(k-1) s after the run before it, `jitter` (a
        fraction in [0, RETRY_JITTER)) later, capped at `max_delay`."""
        limit = self.retry_limit
        if limit is None or self.runs > limit:
            return None
        exponent = min(max(self.runs, 1) - 1, 64)  # (2^64 s is past any cap: no float overflow)
        return min(2.0 ** exponent * (1 + jitter), max_delay)

    def describe_retries(self, now: float) -> str | None:
        """Retries used, and when the next one comes (`now`: Unix seconds), for `delayd get` and
        the dashboard; None for a task with a schedule."""
        limit = self.retry_limit
        if limit is None:
            return None
        if self.status == "delayed" and self.runs >= 1 and self.due_at is not None:
            wait = max(self.due_at - now, 0.0)
            return f"retry {self.runs} of {limit}, next in {wait:.{1 if wait < 10 else 0}f} s"
        return f"{max(self.runs - 1, 0)} of {limit} used"

    def describe_schedule(self) -> str:
        """The schedule in words, for `delayd get`."""
        once = "" if self.persistent else ", one run"
        if self.every is not None:
            return f"every {self.every:g} s{once}"
        if self.cron is not None:
            return f"cron '{self.cron}' in {self.tz}{once}"
        if self.backoff:
            limit = self.retry_limit
            return "once when due" + (f"; on error retried with backoff (1, 2, 4 … s) up to {limit} "
                                      f"time{'s' if limit != 1 else ''}, then failed" if limit else
                                      ", no retries")
        until = "then every last interval" if self.persistent else "then failed"
        return f"intervals {','.join(f'{i:g}' for i in self.intervals)} until success ({until})"

    def next_due_ms(self, due_ms: int, now_ms: int) -> int | None:
        """A recurring task's next due time after a run that was due at `due_ms` and was
        claimed at `now_ms` (Redis's clock); None when the schedule has no next time."""
        if self.every is not None:
            return schedule.next_every(self.every, due_ms, now_ms)
        return schedule.next_cron(self.cron, self.tz, now_ms)

    def next_gap(self) -> float | None:
        """Seconds from this run's due time to the next run, or None when the list is used up.

        After run k (1-based) the next gap is intervals[k]; past the end it is
        intervals[-1] if persistent, else the task is over. A repeat gap of 0 is
        raised to 1 s so that a task that never succeeds cannot spin.
        """
        if self.runs < len(self.intervals):
            gap = self.intervals[self.runs]
        elif self.persistent:
            gap = self.intervals[-1]
        else:
            return None
        return gap if gap > 0 else 1


def _check_schedule(intervals: Any, every: Any, cron: Any, tz: Any) -> tuple[Any, Any, Any]:
    """Validate a recurring schedule: (every, cron, tz), tz defaulting to UTC for cron."""
    given = [name for name, value in (("intervals", intervals), ("every", every), ("cron", cron))
             if value is not None]
    if len(given) > 1:
        raise TaskError(f"give one of intervals, every or cron, not {' and '.join(given)}")
    if cron is None and tz is not None:
        raise TaskError("tz is the zone of a cron schedule: give it with cron")
    try:
        if every is not None:
            return schedule.check_every(every), None, None
        tz = "UTC" if tz is None else tz
        schedule.zone(tz)
        return None, schedule.check_cron(cron), tz
    except schedule.ScheduleError as exc:
        raise TaskError(str(exc)) from None


def _check_retries(retries: Any, backoff: bool, persistent: Any, intervals: Any, every: Any) -> None:
    """`retries` is for a task without a schedule, and says what persistent=False says otherwise."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise TaskError(f"retries must be an integer from 0 to {MAX_RETRIES}, got {retries!r}")
    if not backoff:
        given = "intervals" if intervals is not None else "every" if every is not None else "cron"
        raise TaskError(f"retries is for a task without a schedule: give retries or {given}, not both")
    if persistent is False:
        raise TaskError("give retries or persistent=False (one run, no retries), not both")


def is_utf8(text: str) -> bool:
    """False if `text` holds lone surrogates: bytes that were not UTF-8, decoded with surrogateescape."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """`text` safe to print and log: bytes that were not UTF-8 become \\xNN escapes."""
    if text.isascii() or is_utf8(text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
