"""OpenTelemetry traces: the one module of delayd that touches OpenTelemetry, which is optional
(`pip install 'delayd[otel]'`) and imported only when used, so that without it nothing changes.

- An add carries the W3C trace context current where it is called (`current`) as the task's `trace`
  (delayd.model.task.trace_of): read only when the application itself has loaded OpenTelemetry's API,
  as it has when it has a current span; delayd imports nothing to find out.
- A queue process traces when its environment says so (`setup`: OTEL_TRACES_EXPORTER names an
  exporter and the SDK is installed; every other setting is the SDK's own OTEL_* variables). Each
  run is then a span `delayd.run` (`start_run`, `end_run`), the root of a trace of its own that links
  to the add's context: a run may come hours after its add, or be one of thousands claimed together,
  as the messaging conventions' consumers are, so it is not made a child of a request long finished.
  A recurring task links only its first run to its add; each later run is a root with the due time it
  ran for. A URL run's request is a child span of the run (`request_span`), whose context goes to
  the merchant as `traceparent` (and `tracestate`).
- While a run's handler and its callback run, the run's span is the current one (`as_current`) in the
  thread, or the asyncio task, that runs them (an async handler's task copies the context of the thread
  that waits for it): spans the handler starts, and the calls an instrumentation traces, are its
  children, as Celery's and BullMQ's instrumentations make a job's own spans.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

from delayd.model.checks import split_trace
from delayd.model.task import Task
from delayd.version import __version__

EXPORTERS = "opentelemetry_traces_exporter"  # the entry-point group exporters register their names in
_tracer: Any = None  # this process's Tracer once setup() turned tracing on; None: off
_NOTHING = contextlib.nullcontext()


def exporter_names(env: Mapping[str, str] = os.environ) -> list[str]:
    """The span exporters the environment asks for: OTEL_TRACES_EXPORTER's names ('none' is none),
    unless OTEL_SDK_DISABLED is true. None named: tracing is off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = (name.strip() for name in env.get("OTEL_TRACES_EXPORTER", "").split(","))
    return [name for name in names if name and name != "none"]


def current() -> tuple[str, str] | None:
    """The current span's (traceparent, tracestate), or None: no valid current span, or a process
    that never loaded OpenTelemetry's API (which then has no span)."""
    api, contexts = sys.modules.get("opentelemetry.trace"), sys.modules.get("opentelemetry.context")
    # (an empty context holds no span: the usual case where a library, e.g. redis-py, loaded the API)
    if api is None or contexts is None or not contexts.get_current():
        return None
    context = api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return _traceparent(context), context.trace_state.to_header()


def setup(spans_file: str | os.PathLike | None = None) -> str | None:
    """In a queue process (after the fork): trace if the environment asks for it. Returns why not when
    it asks and cannot be obeyed (a line for the log), else None. The `console` exporter writes each span
    as one line of JSON to `spans_file` (appended to by every queue process; stdout when None), not
    indented onto stdout, which a daemonized master shares with its log."""
    global _tracer
    names = exporter_names()
    if not names:
        return None
    try:
        from importlib.metadata import entry_points

        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        return f"OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not installed (delayd[otel]): {exc}"
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "delayd"}))
    provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
    missing = []
    for name in names:
        found = list(entry_points(group=EXPORTERS, name=name))
        if not found and name == "otlp":  # (registered by the gRPC exporter; delayd[otlp] brings OTLP/HTTP)
            found = list(entry_points(group=EXPORTERS, name="otlp_proto_http"))
        if found and name == "console" and spans_file is not None:
            lines = open(spans_file, "a", buffering=1, encoding="utf-8")  # (one write per line: O_APPEND keeps
            exporter = found[0].load()(out=lines, formatter=_one_line)  # the queue processes' lines whole)
            provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* settings
        elif found:
            provider.add_span_processor(BatchSpanProcessor(found[0].load()()))
        else:
            missing.append(name)
    if len(missing) == len(names):
        return f"no span exporter named {', '.join(missing)} is installed: tracing is off"
    trace.set_tracer_provider(provider)  # also the handlers' own spans, in this process
    _tracer = provider.get_tracer("delayd", __version__)
    return f"no span exporter named {', '.join(missing)} is installed" if missing else None


def _one_line(span: Any) -> str:
    return span.to_json(indent=None) + "\n"


def shutdown() -> None:
    """Export the spans not sent yet (a stopping queue process)."""
    if _tracer is not None:
        from opentelemetry import trace
        provider = trace.get_tracer_provider()
        if hasattr(provider, "shutdown"):
            provider.shutdown()


def start_run(task: Task, now_ms: int) -> Any:
    """The span of the run of `task` claimed at `now_ms` (Redis's clock), or None with tracing off."""
    if _tracer is None:
        return None
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind
    added = _linked(task.trace) if task.trace and (task.runs <= 1 or not task.recurring) else None
    due_ms = round(task.due_at * 1000) if task.due_at is not None else now_ms
    return _tracer.start_span("delayd.run", context=Context(), kind=SpanKind.CONSUMER,
                              links=[Link(added)] if added is not None else (),
                              attributes={"delayd.topic": task.topic, "delayd.id": task.id, "delayd.run": task.runs,
                                          "delayd.lateness_ms": max(0, now_ms - due_ms),
                                          "delayd.due_at": due_ms / 1000})


def end_run(span: Any, outcome: str, error: str) -> None:
    """End a run's span with its outcome (ok, retry, failed, defer); retry and failed are errors."""
    from opentelemetry.trace import StatusCode
    span.set_attribute("delayd.outcome", outcome)
    if outcome in ("retry", "failed"):
        span.set_status(StatusCode.ERROR, error.splitlines()[0][:300] if error else outcome)
    span.end()


@contextlib.contextmanager
def request_span(run_span: Any, method: str, url: str, headers: dict[str, str]) -> Iterator[Any]:
    """A URL run's request as a child span of its run's, whose context `headers` carries to the server."""
    from opentelemetry.trace import SpanKind, set_span_in_context
    parts = urlsplit(url)
    span = _tracer.start_span(method, context=set_span_in_context(run_span), kind=SpanKind.CLIENT, attributes={
        "http.request.method": method, "server.address": parts.hostname or "",
        "url.full": f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"})
    context = span.get_span_context()
    headers["traceparent"] = _traceparent(context)
    if context.trace_state:
        headers["tracestate"] = context.trace_state.to_header()
    try:
        yield span
    finally:
        span.end()


def as_current(run_span: Any) -> contextlib.AbstractContextManager[Any]:
    """The run's span as the current span of this thread's (or asyncio task's) context meanwhile;
    with tracing off (no span) nothing."""
    return _NOTHING if run_span is None else _attached(run_span)


@contextlib.contextmanager
def _attached(run_span: Any) -> Iterator[None]:
    from opentelemetry import context
    from opentelemetry.trace import set_span_in_context
    token = context.attach(set_span_in_context(run_span))
    try:
        yield
    finally:
        context.detach(token)


def _traceparent(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _linked(trace: str) -> Any:
    """The SpanContext a task's stored `trace` names, or None when it does not parse."""
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState
    parts = split_trace(trace)
    if parts is None:
        return None
    traceparent, tracestate = parts
    state = TraceState.from_header([tracestate]) if tracestate else None
    return SpanContext(int(traceparent[3:35], 16), int(traceparent[36:52], 16), is_remote=True,
                       trace_flags=TraceFlags(int(traceparent[53:55], 16)), trace_state=state)
