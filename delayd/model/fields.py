"""The one table of a task's fields: what each add argument may hold and the one line that refuses it, where
the spec JSON stores it, what `get` shows, its flag of `delayd add`, its OpenAPI schema and its line on the
reference page.

Everything else is made from it: the Python checks and spec encoder (delayd.model.make, at import), the
add script's gate's part (delayd.store.lua_fields, linked into _gate.lua), the PHP and Node field tables
(clients/php/src/Fields.php, clients/node/src/fields.js) and docs/openapi.json's task schemas (written by
scripts/build-clients, which tests/producers/test_packages.py holds to this table), the add verb's flags
(delayd.cli.tasks), ls's columns, the dashboard's plain task rows and the reference page
(scripts/docs_reference.py). What no table can say stays code in each language: the rules
between fields (one target, one schedule, retries without a schedule, the trace context), URLs, params,
intervals, cron and zones, and when a task first runs (delay, at, debounce).

A field's checks are one of a few kinds, each checked alike by every producer with the same message:
- `name`: a topic, id or push list: a string or an integer, 1-512 characters, no space or control character;
- `text`: a string of `low` to `high` characters, all of `chars` (ASCII), or with `chars` empty any character
  but a control character (Unicode's Cc); or one that `pattern` matches; refused with `message`;
- `target`: `package.module:function` (text of the pattern TARGET);
- `enum`: one of `values` (compared in upper case, and kept so, with `fold`);
- `bool`, `int` (`low` to `high`, no bool), `number` (finite, `low` to `high`, above `low` with `low_open`;
  a whole number kept as an integer);
- any other kind is a check each language writes once by hand (delayd.model.checks.CUSTOM names them).

When the spec holds a field (`written`): `set`, when it is not null; `changed`, when it is none of `omit`;
`with-url`, for a URL task, else when it is none of `omit`; `scheduled`, when the task has intervals (given, and
no every or cron). A field is refused unless one of the fields it `requires` is given too, saying `alone`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TEN_YEARS = 10 * 365 * 86400  # seconds: the longest interval, every, delay, debounce
MAX_NAME = 512  # characters of a topic, id or push list
TARGET = r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$"
NO_CONTROLS = "^\\x00-\\x1f\\x7f-\\x9f"  # a text check's class of any character but a control character (Cc)
# A number written as text (intervals '0,30,60', at given as seconds): ASCII only, as JSON reads one (Python's
# float() also takes '٣', '1_0' and 'infinity', JavaScript's Number() '0x1f', PHP's is_numeric() '+1').
DECIMAL = r"^\s*-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$"
# A W3C traceparent of version 00: lowercase hex, ids not all zero.
TRACEPARENT = "^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$"
TARGETS = ("call", "url", "push")  # a task has exactly one (a rule between fields)
# OpenAPI's schemas that several fields share: a field add() takes as None when null, and the components of
# docs/openapi.json (delayd.model.api_schemas) that say what a kind of value may be.
def _ref(name: str, null: bool = True) -> dict:
    schema = {"$ref": f"#/components/schemas/{name}"}
    return {"anyOf": [schema, {"type": "null"}]} if null else schema


_SECONDS = {"type": ["number", "null"], "minimum": 0, "maximum": TEN_YEARS}
_TEXT_OR_NULL, _NUMBER_OR_NULL = {"type": ["string", "null"]}, {"type": ["number", "null"]}


@dataclass(frozen=True)
class Check:
    """What an add argument may hold (the kinds: the module's docstring)."""

    kind: str
    message: str = ""  # after the field's name; ", got <the value>" follows unless `got` is False
    got: bool = True
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    values: tuple = ()
    fold: bool = False
    chars: str = ""
    pattern: str = ""  # text: a regular expression (Python, PCRE and JavaScript read it alike) in place of chars;
    # intervals, at: how a number written as text looks
    label: str = ""  # a name's word in its messages ("push list"), else the field's name
    type_message: str = ""  # number: the message for a value that is no number (else `message`)


@dataclass(frozen=True)
class Flag:
    """A field's flag of `delayd add`."""

    help: str
    metavar: str | None = None
    type: str | None = None  # a converter of delayd.cli.tasks (float, int, upper, non_negative)
    choices: tuple | None = None
    group: str | None = None  # mutually exclusive with the other flags of its group
    flag: str | None = None  # else --name, with '-' for '_'
    const: Any = None  # a flag without a value that gives the field this (--once: persistent=False)


@dataclass(frozen=True)
class Field:
    """One row of the table: an add argument (`check`), a field the task shows (`shown`), or both."""

    name: str  # Python's keyword, the HTTP and JSONL key, PHP's array key, Node's property (camelCase too)
    doc: str  # its line on the reference page, and OpenAPI's description
    check: Check | None = None  # None: not an add argument
    default: Any = None  # what an add without it means (never written to the spec)
    spec: int | None = None  # its place in the spec JSON (None: not stored there)
    written: str = "set"  # when the spec holds it (the module's docstring)
    omit: tuple = (None,)  # the values `changed` and `with-url` leave out
    requires: tuple[str, ...] = ()  # refused unless one of these is given too ...
    alone: str = ""  # ... saying this after its name
    shown: str | None = None  # what get shows: the Task's attribute of that name (None: not shown)
    option: bool = False  # an add option (when, how), not a field of the task
    flag: Flag | None = None
    schema: dict | None = None  # OpenAPI: the add argument's schema (its description: `doc`)
    output: dict = field(default_factory=lambda: dict(_TEXT_OR_NULL))  # OpenAPI: the schema of what get shows
    page: bool = False  # the dashboard's task page shows it among its plain rows
    column: int = 0  # `delayd ls` shows it in a column this wide


def _f(name: str, doc: str, check: Check | None = None, *, shown: str | None = "=", **rest: Any) -> Field:
    """A row; `shown` "=" (the default) shows the attribute of the field's own name."""
    return Field(name, doc, check, shown=name if shown == "=" else shown, **rest)


_SECONDS_CHECK = Check("number", "must be a number of seconds from 0 to ten years", low=0, high=TEN_YEARS)
FIELDS: tuple[Field, ...] = (
    _f("topic", "Task type, e.g. `order:cancel`: no spaces or control characters.", Check("name"),
       schema=_ref("Name", null=False), output={"type": "string"}),
    _f("id", "The id within the topic (no `:`); an integer is its decimal text.", Check("name"),
       schema=_ref("Id", null=False), output={"type": "string"}),
    _f("key", "`topic:id`, the task's name in logs and in its idempotency key (`topic:id:run`)",
       output={"type": "string"}),
    _f("call", "`package.module:function` to run (it must be in allowed_modules).",
       Check("target", "must look like package.module:function"), spec=0, schema=_ref("Target"),
       flag=Flag("function to call with the task", "MOD:FUNC", group="target")),
    _f("url", "An http(s) URL to request (port 1-65535).", Check("url"), spec=1,
       schema=_ref("Url"),
       flag=Flag("http(s) URL to request", group="target")),
    _f("push", "A Redis list to push the task onto.", Check("name", label="push list"), spec=2,
       schema=_ref("Name"), flag=Flag("Redis list to RPUSH the task's JSON to", "LIST", group="target")),
    _f("method", "Of a url task (any case).", Check("enum", "must be GET or POST", values=("GET", "POST"), fold=True),
       default="GET", spec=7, written="with-url", omit=("GET",),
       schema={"type": "string", "pattern": "^([Gg][Ee][Tt]|[Pp][Oo][Ss][Tt])$"},
       flag=Flag("HTTP method of a url task", type="upper", choices=("GET", "POST"))),
    _f("body", "How a POST sends `params`.", Check("enum", "must be 'form' or 'json'", values=("form", "json")),
       default="form", spec=8, written="changed", omit=("form",), schema={"type": "string", "enum": ["form", "json"]},
       flag=Flag("how a POST sends params (default form)", choices=("form", "json"))),
    _f("params", "Handed to the handler, or sent to the URL (at most params_limit bytes as JSON).", Check("params"),
       default={}, spec=9, written="changed", omit=({},), schema={"type": ["object", "null"]},
       output={"type": ["object", "null"]},
       flag=Flag("JSON object handed to the handler or sent to the URL", "JSON")),
    _f("intervals", "The schedule: the gaps in seconds before each run until success, e.g. `[0, 30, 60]` or "
       "`\"0,30,60\"`.",
       Check("intervals", pattern=DECIMAL), default=[0], spec=10, written="scheduled",
       schema=_ref("Intervals"),
       output={"type": ["array", "null"], "items": {"type": "number"}},
       flag=Flag("runs until success, gaps in seconds, each from the previous run's due time: 0,30,60 runs at "
                 "+0, +30, +90 s (none: see --retries)", "0,30,60", group="schedule")),
    _f("persistent", "false: one run at most (no retries, no repeats)",
       Check("bool", "must be true or false", got=False), default=True, spec=11, written="changed", omit=(True,),
       schema={"type": "boolean"}, output={"type": "boolean"},
       flag=Flag("end as failed after the last interval, or after one run without a schedule (persistent=false)",
                 flag="--once", const=False)),
    _f("priority", "1, 2 or 3 (3 first; claimed 5:3:2 by default, so 1 is never starved)",
       Check("int", "must be 1, 2 or 3", low=1, high=3), default=2, schema={"type": "integer", "enum": [1, 2, 3]},
       output={"type": "integer"}, flag=Flag("1-3, 3 highest (default 2)", type="int", choices=(1, 2, 3))),
    _f("callback", "`module:function` called once after success.",
       Check("target", "must look like package.module:function"), spec=3, schema=_ref("Target"),
       flag=Flag("function called once after success", "MOD:FUNC")),
    _f("timeout", "Seconds this task's handler may run.",
       Check("number", "must be a number of seconds in (0, 86400]", low=0, high=86400, low_open=True), spec=4,
       schema={"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 86400}, output=_NUMBER_OR_NULL,
       flag=Flag("per-run timeout of a url task", "S", type="float")),
    _f("every", "Recurring every S seconds.",
       Check("number", "must be between 1 s and ten years", low=1, high=TEN_YEARS,
             type_message="must be a number of seconds"), spec=5,
       schema={"type": ["number", "null"], "minimum": 1, "maximum": TEN_YEARS}, output=_NUMBER_OR_NULL,
       flag=Flag("recurring: every S seconds (>= 1), whatever the outcome; first run after S unless --delay/--at",
                 "S", type="float", group="schedule")),
    _f("cron", "Recurring on `m h dom mon dow`.", Check("cron"), spec=6, schema=_ref("Cron"),
       flag=Flag("recurring: at the times of 'm h dom mon dow' in --tz", "EXPR", group="schedule")),
    _f("tz", "IANA zone of `cron` (default UTC).", Check("zone"), spec=13, written="changed", omit=(None, "UTC"),
       requires=("cron",), alone="is the zone of a cron schedule: give it with cron",
       schema=_ref("Zone"), flag=Flag("IANA time zone of --cron, e.g. Europe/Berlin (default UTC)", "ZONE")),
    _f("retries", "Retries with backoff (a task without a schedule).",
       Check("int", f"must be an integer from 0 to {10_000}", low=0, high=10_000), spec=12, shown="retry_limit",
       schema={"type": ["integer", "null"], "minimum": 0, "maximum": 10_000}, output={"type": ["integer", "null"]},
       flag=Flag("no schedule: retry a run that neither succeeds nor fails at most N times, with backoff 1, 2, 4 … s "
                 "(default: the daemon's retries, 20; 0 = one run)", "N", type="int", group="schedule")),
    _f("status", "`delayed`, `running`, `ok`, `failed` or `deleted`",
       output={"type": "string", "enum": ["delayed", "running", "ok", "failed", "deleted"]}),
    _f("created_at", "when it was added (Unix seconds, Redis's clock)", output=_NUMBER_OR_NULL),
    _f("due_at", "its next (or last) due time (Unix seconds, Redis's clock)", output=_NUMBER_OR_NULL),
    _f("last_run_at", "when its last run started", output=_NUMBER_OR_NULL),
    _f("last_due_at", "a recurring task: the due time its last run was for", output=_NUMBER_OR_NULL),
    _f("runs", "the number of the current (or last) run, 1-based", output={"type": "integer"}),
    _f("last_error", "the last run's error or answer (`quarantined: …` for a record that cannot be run)"),
    _f("attempts", "the delivery log: the last `attempts_kept` runs, newest last (run, at, ms, outcome, status, error)",
       output={"type": ["array", "null"], "items": {"type": "object", "properties": {
           "run": {"type": "integer"}, "at": _NUMBER_OR_NULL, "ms": _NUMBER_OR_NULL, "outcome": _TEXT_OR_NULL,
           "status": {"type": ["integer", "null"]}, "error": _TEXT_OR_NULL}}}),
    _f("signing_key", "A name of url_signing_keys (url tasks).",
       Check("text", "must be 1-128 letters, digits, '_', '.', ':' or '-'", low=1, high=128,
             chars="A-Za-z0-9_.:-"), spec=14, requires=("url",),
       alone="is for a url task: only URL requests are signed",
       schema={"type": ["string", "null"], "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
       flag=Flag("the url_signing_keys entry that signs a url task's requests (default: url_signing_secret)", "NAME")),
    _f("traceparent", "W3C trace context of the add (else the request's own).",
       Check("text", "must be W3C's 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero)", pattern=TRACEPARENT),
       schema={"type": ["string", "null"], "pattern": TRACEPARENT},
       flag=Flag("the W3C trace context its runs link to (default: $TRACEPARENT, with $TRACESTATE)", "TP")),
    _f("tracestate", "the W3C tracestate that goes with `traceparent` (kept with it in the task's trace context; "
       "one that is not W3C's printable text of at most 512 characters is dropped, as W3C asks)",
       Check("tracestate"), shown=None, schema={},
       flag=Flag("the W3C tracestate going with --traceparent", "TS")),
    _f("trace", "the W3C trace context of the add: its traceparent, then a space and its tracestate (made of them)",
       spec=15, shown=None),
    _f("group", "The tenant the task is for, e.g. `merchant-42`: 1-128 characters, none of them a control character.",
       Check("text", "must be 1-128 characters, none of them a control character", low=1, high=128), spec=16,
       schema={"type": ["string", "null"], "minLength": 1, "maxLength": 128, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"},
       flag=Flag("the tenant the task is for, e.g. merchant-42", "NAME"), page=True, column=16),
    _f("delay", "Seconds from now to the first run.", _SECONDS_CHECK, option=True, shown=None, schema=_SECONDS,
       flag=Flag("first run S seconds from now", "S", type="non_negative", group="when")),
    _f("at", "The first run's time: Unix seconds or ISO 8601.", Check("at", pattern=DECIMAL), option=True, shown=None,
       schema={"anyOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": 100_000_000_000},
                         _ref("Time", null=False), {"type": "null"}]},
       flag=Flag("first run at Unix seconds or an ISO 8601 time", "TIME", group="when")),
    _f("debounce", "Replace a pending run and move it to now + S.",
       _SECONDS_CHECK, option=True, shown=None,
       schema=_SECONDS, flag=Flag("run S seconds after the last such add: a task that has not started yet gets "
                                  "these arguments and is put off to now + S (see --max-wait)", "S",
                                  type="non_negative", group="when")),
    _f("max_wait", "Debounce: never later than this after the first add (>= debounce).",
       _SECONDS_CHECK, option=True, shown=None,
       schema=_SECONDS, flag=Flag("with --debounce: never put the run off more than M seconds after its first add",
                                  "M", type="non_negative")),
    _f("nx", "Add only if the task does not exist.", Check("bool", "must be true or false", got=False),
       option=True, shown=None, schema={"type": "boolean"},
       flag=Flag("only add if the task does not exist", const=True)),
    _f("durable", "Answer only once Redis confirms the write on replicas / disk (else 503).",
       Check("bool", "must be true or false", got=False), option=True, shown=None, schema={"type": "boolean"}),
)

BY_NAME = {f.name: f for f in FIELDS}
# The spec's fields in their order (docs/protocol.md, section 3).
SPEC = tuple(sorted((f for f in FIELDS if f.spec is not None), key=lambda f: f.spec))
SPEC_NAMES = frozenset(f.name for f in SPEC)
# A task's own add arguments (add()'s keywords but topic, id and the options), in the table's order.
ARGUMENTS = tuple(f for f in FIELDS if f.check is not None and not f.option and f.name not in ("topic", "id"))
SHOWN = tuple(f for f in FIELDS if f.shown)  # what get shows (Task.to_dict), in its order


def text_pattern(check: Check) -> str:
    """A `text` check as a regular expression that Python, PCRE (with /u) and JavaScript (with u) read alike."""
    if check.pattern:
        return check.pattern
    chars = check.chars or NO_CONTROLS
    return f"^[{chars}]{{{int(check.low)},{int(check.high)}}}$"


def message(f: Field, got: str | None = None, *, kind_message: str | None = None) -> str:
    """The one line a bad value of `f` gets: its name (or label), its message, and what it got."""
    text = f"{f.check.label or f.name} {kind_message or f.check.message}"
    return f"{text}, got {got}" if f.check.got and got is not None else text
