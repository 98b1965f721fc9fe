"""What a task's fields may hold: the checks Task.new (delayd.model.task) runs on what it is given,
their one-line TaskError, and the limits they check against; also the UTF-8 helpers the readers of
stored names share. delayd.model.task holds the Task itself, and re-exports these names.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from delayd.model import schedule
from delayd.model.json_rules import beyond_double

METHODS = ("GET", "POST")
BODIES = ("form", "json")
DEFAULT_PARAMS_LIMIT = 64 * 1024
DEFAULT_RETRIES = 20  # the `retries` option's default (delayd.config)
MAX_RETRIES = 10_000
RETRY_JITTER = 0.1  # a backoff delay is up to this much (a fraction) longer, never shorter
MAX_NAME = 512
MAX_INTERVAL = 10 * 365 * 86400  # seconds: ten years
MAX_PARAMS_DEPTH = 64  # params nest at most this deep (the params object is level 1; the add script checks the same)
# A target is `package.module:function` (dotted identifiers on both sides).
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
TARGET_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_BAD_NAME_CHARS = re.compile(r"[\x00-\x20\x7f]")
KEY_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # a signing key's name (the add script checks the same)
_BAD_URL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\s]")  # whitespace and control characters, Unicode's too
# A URL's authority past any user info: a [bracketed] or plain host, then nothing or ':' and the port.
_HOST_PORT_RE = re.compile(r"(\[[^\]]+\]|[^:\[\]]*)(?::([0-9]*))?")
# A W3C traceparent of version 00 (lowercase hex, ids not all zero) and a tracestate kept with it (printable ASCII,
# at most 512 characters): a task's `trace` is the one, then a space and the other (the add script checks the same).
TRACEPARENT_RE = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE_RE = re.compile(r"[!-~](?:[ -~]{0,510}[!-~])?")
# A number written as text (intervals '0,30,60', at given as seconds): ASCII only, as JSON and the PHP and Node
# clients read one (float() also takes '٣', '1_0' and 'infinity').
DECIMAL_RE = re.compile(r"\s*-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*")
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
    return remember(_GOOD_TOPICS, _check_name("topic", value))


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
    """A task's `trace`: `traceparent`, then a space and `tracestate` when that is well formed (W3C: a bad
    tracestate is dropped); None without a traceparent. A bad traceparent is refused."""
    if traceparent is None:
        return None
    if not isinstance(traceparent, str) or not TRACEPARENT_RE.fullmatch(traceparent):
        raise TaskError(f"traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero), "
                        f"got {traceparent!r}")
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


def params_copy(params: dict, limit: int) -> tuple[dict, str]:
    """`params` as their JSON (at most `limit` bytes) decodes, and that JSON (what the record stores), or
    TaskError.

    The usual params, one level of str keys and values of JSON's own kinds, come back from JSON as they
    are: a shallow copy is their copy, and their JSON is made by a C encoder without the markers that
    find a container inside itself (there is none to find). Other params are encoded as json.dumps
    does, and decoded for the copy."""
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
