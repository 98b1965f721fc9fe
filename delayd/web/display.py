"""How the dashboard shows what it read from Redis, which may be anything (docs/redis-layout.md,
"Stored data is not trusted"): times that do not fit a calendar, names that are not UTF-8,
numbers JSON cannot hold. Nothing here raises on stored data.

A name that is not UTF-8 arrives as lone surrogates (delayd.store.connection): it is shown with
its bytes as \\xNN escapes, as `delayd ls` shows it, and links carry its own bytes
percent-encoded, so the task page finds the very key.
"""
from __future__ import annotations

import json
import math
import urllib.parse
from typing import Any

from markupsafe import Markup
from starlette.responses import JSONResponse

from delayd.model.checks import split_trace
from delayd.model.clock import time_parts
from delayd.model.task import printable


def quote(text: Any, safe: str = ":") -> str:
    """A URL path segment or query value holding `text`'s own bytes."""
    return urllib.parse.quote(str(text), safe=safe, errors="surrogateescape")


def unquote(text: str) -> str:
    """The inverse of quote: bytes that are not UTF-8 come back as lone surrogates, as Redis names do."""
    return urllib.parse.unquote(text, errors="surrogateescape")


def task_url(topic: str, id: str, *, api: bool = False) -> str:
    return ("/api/tasks/" if api else "/tasks/") + f"{quote(topic)}/{quote(id)}"


def trace_context(trace: str | None, trace_url: str = "") -> dict[str, Any] | None:
    """A task's stored `trace` (docs/protocol.md: traceparent, then a space and its tracestate) as its
    page shows it: the trace id, the span that added it, whether it was sampled, and `link`: `trace_url`
    (web_trace_url) with the trace id in place of {trace_id}. None: the task carries none (a record whose
    trace does not parse is corrupt: delayd.model.record.from_record)."""
    parts = split_trace(trace) if trace else None
    if parts is None:
        return None
    traceparent, tracestate = parts
    trace_id = traceparent[3:35]
    return {"traceparent": traceparent, "tracestate": tracestate, "trace_id": trace_id, "span_id": traceparent[36:52],
            "sampled": bool(int(traceparent[53:55], 16) & 1),
            "link": trace_url.replace("{trace_id}", trace_id) if trace_url else ""}


def shown(value: Any) -> Any:
    """Jinja's finalize: every string printed on a page goes through printable()."""
    return printable(value) if isinstance(value, str) else value


def when(seconds: float | None, tz: str | None = None) -> Markup:
    """A time as clock.local_time words it, each part kept on one line (a narrow column breaks
    between the time and the local time beside it, never inside a date)."""
    first, local = time_parts(seconds, tz)
    html = Markup('<span class="when">{}</span>').format(first)
    return html + Markup(' <span class="when local">({})</span>').format(local) if local else html


def span(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.0f} min" if value < 7200 else f"{value / 3600:.0f} h" if value < 172800 else \
        f"{value / 86400:.0f} days"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def jsonable(value: Any) -> Any:
    """`value` as strict JSON can hold it: names printable, infinities and NaN as null."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {jsonable(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


class Json(JSONResponse):
    """Starlette's JSONResponse for data read from Redis (see jsonable)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(jsonable(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
