"""What a task's fields may hold: each kind of check of the table of fields (delayd.model.fields) as a
Python function (`checker`), the checks of the kinds written by hand (URLs, params, intervals, cron, zones,
the trace context) and the rules between fields (`between`), their one-line TaskError, and the limits they
check against; also the UTF-8 helpers the readers of stored names share. delayd.model.task holds the Task
itself (its Task.new made of these by delayd.model.make), and re-exports these names.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable
from urllib.parse import urlsplit

from delayd.model import schedule
from delayd.model.fields import (
    BY_NAME,
    DECIMAL,
    MAX_NAME,
    TARGET,
    TEN_YEARS,
    TRACEPARENT,
    Field,
    message,
    text_pattern,
)
from delayd.model.json_rules import beyond_double

DEFAULT_PARAMS_LIMIT = 64 * 1024
DEFAULT_RETRIES = 20  # the `retries` option's default (delayd.config)
MAX_RETRIES = int(BY_NAME["retries"].check.high)
RETRY_JITTER = 0.1  # a backoff delay is up to this much (a fraction) longer, never shorter
MAX_INTERVAL = TEN_YEARS
MAX_PARAMS_DEPTH = 64  # params nest at most this deep (the params object is level 1; the add script checks the same)
TARGET_RE = re.compile(TARGET)
_BAD_NAME_CHARS = re.compile(r"[\x00-\x20\x7f]")
KEY_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # a signing key's name (the add script checks the same)
_BAD_URL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\s]")  # whitespace and control characters, Unicode's too
# A URL's authority past any user info: a [bracketed] or plain host, then nothing or ':' and the port.
_HOST_PORT_RE = re.compile(r"(\[[^\]]+\]|[^:\[\]]*)(?::([0-9]*))?")
# A W3C traceparent of version 00 (lowercase hex, ids not all zero) and a tracestate kept with it (printable ASCII,
# at most 512 characters): a task's `trace` is the one, then a space and the other (the add script checks the same).
TRACEPARENT_RE = re.compile(TRACEPARENT)
_TRACESTATE_RE = re.compile(r"[!-~](?:[ -~]{0,510}[!-~])?")
DECIMAL_RE = re.compile(DECIMAL)  # a number written as text
_ESCAPE_RE, _STRING_RE, _BRACKET_RE = re.compile(r"\\."), re.compile(r'"[^"]*"'), re.compile(r"[\[\]{}]")
# Params as add() checks them: json.dumps(params, allow_nan=False, separators=(",", ":")), the encoder made once.
_encode_params = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def _flat_encoder() -> Any:
    """`_encode_params` for params with no container inside (a C encoder made once, without markers)."""
    make = json.encoder.c_make_encoder
    if make is None:  # (a Python without the json module's C part)
        return _encode_params
    encode = make(None, json.JSONEncoder().default, json.encoder.encode_basestring_ascii, None, ":", ",",
                  False, False, False)
    return lambda params: "".join(encode(params, 0))


_encode_flat = _flat_encoder()
_FLAT_VALUES = frozenset({str, int, float, bool, type(None)})  # what json.loads gives back as it was given
_STR_ONLY = frozenset({str})  # the keys json.loads gives back as they were given


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
        if type(item) is int and 0 <= item <= MAX_INTERVAL:  # the usual: whole seconds, as the checks below keep them
            out.append(item)
            continue
        if isinstance(item, bool):
            raise TaskError(f"interval {item!r} is not a number of seconds")
        try:
            if isinstance(item, str) and not DECIMAL_RE.fullmatch(item):
                raise ValueError(item)
            number = float(item)
        except (TypeError, ValueError, OverflowError):
            raise TaskError(f"interval {item!r} is not a number of seconds") from None
        if not math.isfinite(number) or number < 0:
            raise TaskError(f"interval {item!r} must be a finite number >= 0")
        if number > MAX_INTERVAL:
            raise TaskError(f"interval {item!r} is longer than ten years")
        out.append(int(number) if number.is_integer() else number)
    return out


def check_name(what: str, value: Any) -> str:
    """A topic, id or push list (`what`): a string or an integer, 1-512 characters of UTF-8, no space or
    control character."""
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
    # (ASCII has no other unprintable character than the controls: two calls cheaper than the search)
    if not (text.isascii() and text.isprintable() and " " not in text) and _BAD_NAME_CHARS.search(text):
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


def remember(good: set[Any], text: Any) -> Any:
    """Add `text` to `good`, a set of what was found good (emptied when full: bounded); returns it."""
    if len(good) >= _GOOD_MAX:
        good.clear()
    good.add(text)
    return text


def check_topic(value: Any) -> str:
    """A topic name, checked as add() checks it."""
    if type(value) is str and value in _GOOD_TOPICS:
        return value
    return remember(_GOOD_TOPICS, check_name("topic", value))


def check_target(what: str, value: Any) -> str:
    """A `module:function` reference, checked for shape only."""
    if type(value) is str and value in _GOOD_TARGETS:
        return value
    if not isinstance(value, str) or not TARGET_RE.fullmatch(value):
        raise TaskError(f"{what} must look like package.module:function, got {value!r}")
    return remember(_GOOD_TARGETS, value) if type(value) is str else value


def url_authority_error(netloc: str) -> str | None:
    """Why a URL whose authority (urlsplit's netloc) is `netloc` cannot be sent to, or None: an empty host, a
    port that is not a number from 1 to 65535, a host that is not ASCII (an international name is given in
    its xn-- form, as a browser sends it; the add script and the PHP and Node clients check the same)."""
    match = _HOST_PORT_RE.fullmatch(netloc.rpartition("@")[2])
    if not match or not match[1]:
        return "has no host" if match else "has a port that is not a number from 1 to 65535"
    if match[2] and not (len(match[2]) <= 5 and 1 <= int(match[2]) <= 65535):
        return f"has the port {match[2]}, not a number from 1 to 65535"
    if not match[1].isascii():
        return "has a host that is not ASCII: give an international name in its xn-- form (IDNA)"
    return None


def check_key_name(value: Any) -> str:
    """A signing key's name (url_signing_keys, a task's signing_key): 1-128 letters, digits, _ . : -."""
    if not isinstance(value, str) or not KEY_NAME_RE.fullmatch(value):
        raise TaskError(f"signing_key must be 1-128 letters, digits, '_', '.', ':' or '-', got {value!r}")
    return value


def trace_of(traceparent: Any, tracestate: Any = None) -> str | None:
    """A task's `trace`: `traceparent` (checked), then a space and `tracestate` when that is well formed (W3C: a
    bad tracestate is dropped); None without a traceparent."""
    if traceparent is None:
        return None
    state = tracestate.strip() if isinstance(tracestate, str) else ""
    return f"{traceparent} {state}" if _TRACESTATE_RE.fullmatch(state) else traceparent


def split_trace(trace: str) -> tuple[str, str] | None:
    """A stored `trace` (trace_of's) as (traceparent, tracestate: '' when none); None if it does not parse."""
    traceparent, gap = trace[:55], trace[55:56]
    if not TRACEPARENT_RE.fullmatch(traceparent) or gap not in ("", " "):
        return None
    return traceparent, trace[56:]


def stored_trace_ok(trace: Any) -> bool:
    """Whether a record's `trace` is one trace_of writes (the add script's gate checks the same)."""
    parts = split_trace(trace) if isinstance(trace, str) else None
    return parts is not None and (len(trace) == 55 or _TRACESTATE_RE.fullmatch(parts[1]) is not None)


def module_allowed(target: str, allowed: tuple[str, ...]) -> bool:
    """`shop.tasks` allows `shop.tasks` and `shop.tasks.x`, never `shop.tasks_evil`."""
    module = target.split(":", 1)[0]
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


def check_params(params: Any, limit: int | None) -> tuple[dict, str | None]:
    """(params, their JSON): a dict; given at add (a `limit`), a copy as their JSON (at most `limit` bytes)
    decodes, and that JSON (what the record stores); read back from a record (no `limit`), as they are.

    The usual params, one level of str keys and values of JSON's own kinds, come back from JSON as they
    are: a shallow copy is their copy, and their JSON is made by a C encoder without the markers that
    find a container inside itself (there is none to find). Other params are encoded as json.dumps
    does, and decoded for the copy."""
    if params is not None and not isinstance(params, dict):
        raise TaskError("params must be a JSON object (a dict)")
    if not params:
        return {}, None  # a fresh one: nothing to check or copy
    if limit is None:
        return params, None
    flat = (type(params) is dict and _STR_ONLY.issuperset(map(type, params))
            and _FLAT_VALUES.issuperset(map(type, params.values())))
    try:
        encoded = _encode_flat(params) if flat else _encode_params(params)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TaskError(f"params are not JSON-serialisable: {exc}") from None
    if len(encoded) > limit:  # (ASCII: the encoder escapes every other character)
        raise TaskError(f"params are {len(encoded)} bytes, more than the limit of {limit}")
    if beyond_double(encoded):  # (the add script's cjson would read it as infinite: docs/protocol.md section 7)
        raise TaskError("params hold an integer beyond a double's range (about 1.8e308)")
    if not flat and nested_deeper(encoded, MAX_PARAMS_DEPTH):
        raise TaskError(TOO_DEEP)
    # A lone surrogate (a byte that was not UTF-8, decoded with surrogateescape) is escaped as
    # \udcNN like a character outside the BMP: checked only when such an escape is there.
    if "\\ud" in encoded and not is_utf8(json.dumps(params, ensure_ascii=False)):
        raise TaskError("params are not valid UTF-8 text")
    return (dict(params) if flat else json.loads(encoded)), encoded


TOO_DEEP = f"params are nested more than {MAX_PARAMS_DEPTH} levels deep"


def nested_deeper(text: str, limit: int) -> bool:
    """True if the arrays and objects of JSON `text` nest more than `limit` deep, found without recursion
    (what reads JSON recursively, the dashboard's and the encoders', stays far from Python's limit). The
    add script counts the same way: escapes dropped, then strings, then brackets counted."""
    if len(text) <= 2 * limit or text.count("{") + text.count("[") <= limit:  # (each level takes two brackets)
        return False
    depth = 0
    for bracket in _BRACKET_RE.findall(_STRING_RE.sub("", _ESCAPE_RE.sub("", text))):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False


def check_id(value: Any) -> str:
    """A task's id: a name without ':' (the key is topic:id)."""
    text = check_name("id", value)
    if ":" in text:
        raise TaskError("id must not contain ':' (the key is topic:id)")
    return text


def check_url(url: Any, params_limit: int | None) -> str:
    """An http(s) URL with a host; at add (a `params_limit`), also a port from 1 to 65535, an ASCII host, no
    whitespace or control character and UTF-8 text (a URL read back from a record is not held to these)."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is not None:
            parts.hostname  # noqa: B018  (raises ValueError for a malformed host)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise TaskError(f"url must be an http:// or https:// URL with a host, got {url!r}")
    if params_limit is not None:
        if why := url_authority_error(parts.netloc):
            raise TaskError(f"url {why}, got {url!r}")
        if _BAD_URL_CHARS.search(url):
            raise TaskError(f"url must not contain spaces or control characters (percent-encode them), got {url!r}")
        if not url.isascii() and not is_utf8(url):
            raise TaskError("url is not valid UTF-8 text")
    return url


def check_cron(value: Any) -> str:
    """A cron expression (delayd.model.schedule.check_cron), normalised to single spaces."""
    try:
        return schedule.check_cron(value)
    except schedule.ScheduleError as exc:
        raise TaskError(str(exc)) from None


def check_zone(value: Any) -> str:
    """An IANA zone name (delayd.model.schedule.zone)."""
    try:
        schedule.zone(value)
    except schedule.ScheduleError as exc:
        raise TaskError(str(exc)) from None
    return value


# The checks of names and targets: (the field's label, value) -> the value kept.
LABELLED: dict[str, Callable[[str, Any], Any]] = {"name": check_name, "target": check_target}
# The checks of the kinds each language writes by hand: (value, the add's params_limit or None) -> the value kept.
CUSTOM: dict[str, Callable[[Any, int | None], Any]] = {
    "url": check_url, "params": check_params, "intervals": lambda value, _: parse_intervals(value),
    "cron": lambda value, _: check_cron(value), "zone": lambda value, _: check_zone(value),
    "tracestate": lambda value, _: value,
}


def checker(f: Field) -> Callable[[Any], Any]:
    """Field `f`'s check, of a kind of the table (delayd.model.fields): the value to keep, or TaskError."""
    check = f.check
    kind, low, high = check.kind, check.low, check.high

    def refuse(value: Any, kind_message: str | None = None) -> Any:
        raise TaskError(message(f, repr(value), kind_message=kind_message))

    if kind == "text":
        pattern = re.compile(text_pattern(check))
        return lambda value: (value if isinstance(value, str) and pattern.fullmatch(value) and is_utf8(value)
                              else refuse(value))
    if kind == "enum":
        values = check.values
        if check.fold:
            return lambda value: (value.upper() if isinstance(value, str) and value.upper() in values
                                  else refuse(value))
        return lambda value: value if value in values else refuse(value)
    if kind == "bool":
        return lambda value: value if value is True or value is False else refuse(value)
    if kind == "int":
        return lambda value: (value if not isinstance(value, bool) and isinstance(value, int) and low <= value <= high
                              else refuse(value))
    if kind == "number":
        def number(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                refuse(value, check.type_message or None)
            if not ((low < value) if check.low_open else (low <= value)) or not value <= high:  # (NaN fails both)
                refuse(value)
            return int(value) if float(value).is_integer() else value  # 2.0 as 2, as every producer writes it
        return number
    raise ValueError(f"{f.name}: a check of kind {kind!r} is written by hand (CUSTOM, LABELLED)")


def between(intervals: Any, every: Any, cron: Any, tz: Any, retries: Any, persistent: Any, traceparent: Any,
            tracestate: Any) -> tuple[Any, bool, str | None]:
    """The rules between fields (each checked alone before, and what it requires): one schedule of intervals,
    every or cron (tz UTC by default), retries only without a schedule and not with persistent=False. Returns
    (tz, backoff: no schedule given, the task's `trace`)."""
    if every is None and cron is None and tz is None and retries is None:  # (the usual: no rule to apply)
        return None, intervals is None, None if traceparent is None else trace_of(traceparent, tracestate)
    given = [name for name, value in (("intervals", intervals), ("every", every), ("cron", cron))
             if value is not None]
    if len(given) > 1:
        raise TaskError(f"give one of intervals, every or cron, not {' and '.join(given)}")
    if retries is not None:
        if given:
            raise TaskError(f"retries is for a task without a schedule: give retries or {given[0]}, not both")
        if persistent is False:
            raise TaskError("give retries or persistent=False (one run, no retries), not both")
    return "UTC" if cron is not None and tz is None else tz, not given, trace_of(traceparent, tracestate)


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
