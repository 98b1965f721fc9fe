"""Task.new and spec_json made from the table of fields (delayd.model.fields) at import, as Python source
compiled once (the way dataclasses makes __init__): a straight line of checks with the fields as keywords and
the task built by position, the cost of the hand-written code they replace (every add pays for both).

Task.new checks topic and id, then that the task has exactly one target, then each add argument by its kind in
the table's order (delayd.model.checks.checker; the kinds written by hand: checks.CUSTOM), then the fields a
field is for, then the rules between fields (checks.between). spec_json writes the spec's fields in their
place, each when its `written` rule says. The made source is kept (`SOURCE`) and shown in tracebacks.
"""
from __future__ import annotations

import dataclasses
import linecache
from typing import Any, Callable

from delayd.model import checks
from delayd.model.fields import ARGUMENTS, SPEC, TARGETS, Field

# Strings in the spec: JSON text; params: the JSON add checked (else encoded); other values by the C encoder.
_STRINGS = frozenset({"name", "target", "url", "text", "enum", "cron", "zone", None})
SOURCE: dict[str, str] = {}  # the made functions' source, by name


def _compile(name: str, source: str, namespace: dict[str, Any]) -> Callable:
    """Function `name` of `source`, its lines registered for tracebacks."""
    filename = f"<delayd.model.make {name}>"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (source made from the table, not input)
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    SOURCE[name] = source
    return namespace[name]


def _default(f: Field) -> Any:
    """The keyword's default in Task.new: the field's own when it is a constant, else None (a fresh
    list or dict is made for the task)."""
    return f.default if isinstance(f.default, (str, int, bool, type(None))) else None


def task_new(task: type, default_params_limit: int) -> Callable:
    """Task.new for dataclass `task`, whose fields are the table's add arguments (but traceparent and
    tracestate: its `trace`), `backoff`, then the record's own."""
    names = [f.name for f in dataclasses.fields(task)]
    missing = {f.name for f in ARGUMENTS} - set(names) - {"traceparent", "tracestate"}
    if missing:
        raise TypeError(f"{task.__name__} has no attribute for the table's field(s) {', '.join(sorted(missing))}")
    namespace: dict[str, Any] = {"checks": checks, "TaskError": checks.TaskError, "LIMIT": default_params_limit}
    keywords = []
    lines = ["    topic = checks.check_topic(topic)", "    id = checks.check_id(id)",
             f"    if {' + '.join(f'(not {name})' for name in TARGETS)} != {len(TARGETS) - 1}:",
             f"        raise TaskError('give exactly one of {', '.join(TARGETS[:-1])} or {TARGETS[-1]}')"]
    for f in ARGUMENTS:
        namespace[f"default_{f.name}"] = default = _default(f)
        keywords.append(f"{f.name}=default_{f.name}")
        if f.check.kind in checks.LABELLED:
            namespace[f"check_{f.name}"] = checks.LABELLED[f.check.kind]
            call = f"check_{f.name}({f.check.label or f.name!r}, {f.name})"
        elif f.check.kind in checks.CUSTOM:
            namespace[f"check_{f.name}"] = checks.CUSTOM[f.check.kind]
            call = f"check_{f.name}({f.name}, params_limit)"
        else:
            namespace[f"check_{f.name}"] = checks.checker(f)
            call = f"check_{f.name}({f.name})"
        if f.check.kind == "params":  # (always: it makes the task's own dict, and the JSON add checked)
            lines.append(f"    {f.name}, params_json = {call}")
        else:
            test = "is not None" if default is None else f"is not default_{f.name}"  # (the default is a good value)
            lines.append(f"    if {f.name} {test}: {f.name} = {call}")
    for f in ARGUMENTS:
        if f.requires:
            absent = " and ".join(f"{name} is None" for name in f.requires)
            refusal = f"{f.name} {f.alone}"
            lines += [f"    if {f.name} is not None and {absent}:", f"        raise TaskError({refusal!r})"]
    lines.append("    tz, backoff, trace = checks.between(intervals, every, cron, tz, retries, persistent, "
                 "traceparent, tracestate)")
    made = {"intervals": "[0] if intervals is None else intervals", "backoff": "backoff", "trace": "trace"}
    given = {"topic", "id", *made, *(f.name for f in ARGUMENTS)}
    last = max(names.index(name) for name in given if name in names)
    if not given.issuperset(names[:last + 1]):
        raise TypeError(f"{task.__name__}: the table's fields come before {set(names[:last + 1]) - given}")
    values = ", ".join(made.get(name, name) for name in names[:last + 1])
    source = (f"def new(cls, topic, id, *, {', '.join(keywords)}, params_limit=LIMIT):\n" + "\n".join(lines)
              + f"\n    return cls({values}, params_json=params_json)\n")
    return _compile("new", source, namespace)


def _written(f: Field) -> str:
    """The test that the spec holds field `f` of `task`."""
    value = f"task.{f.name}"
    if f.written == "set":
        return f"{value} is not None"
    if f.written == "changed":
        return f"{value} not in {f.omit!r}"
    if f.written == "with-url":
        return f"task.url is not None or {value} not in {f.omit!r}"
    if f.written == "scheduled":
        return "not (task.backoff or task.every is not None or task.cron is not None)"
    raise ValueError(f"{f.name}: no spec rule {f.written!r}")


def spec_json(text: Callable[[str], str], value: Callable[[Any], str]) -> Callable:
    """spec_json(task): the spec's fields in their order, each written when its rule says, as `json.dumps`
    with compact separators writes them; `text` encodes a string, `value` any other value."""
    lines = ["    spec = []"]
    for f in SPEC:
        kind = f.check.kind if f.check else None
        encoded = (f"(task.params_json or value(task.{f.name}))" if kind == "params" else
                   f"text(task.{f.name})" if kind in _STRINGS else f"value(task.{f.name})")
        key = f'"{f.name}":'
        lines.append(f"    if {_written(f)}: spec.append({key!r} + {encoded})")
    source = "def spec_json(task):\n" + "\n".join(lines) + "\n    return '{' + ','.join(spec) + '}'\n"
    return _compile("spec_json", source, {"text": text, "value": value})
