"""The span of a run (delayd.tracing.start_run, end_run) with the real SDK and its in-memory exporter: linked
to the add's context (not its child) for every run of a one-off task, retries included; for a recurring task
only its first run is, each later one a root with the due time it ran for; a stored trace that does not parse
links nothing; a failed or retried run is an error. (The daemon end to end: tests/daemon/test_traces.py.)"""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from delayd import tracing
from delayd.model.task import Task

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def exported(monkeypatch):
    """delayd.tracing on, with a provider of the test's own (not the process's global one)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("delayd"))
    return exporter


def run_span(exporter: InMemorySpanExporter, task: Task, outcome: str = "ok", error: str = ""):
    tracing.end_run(tracing.start_run(task, now_ms=1_700_000_000_250), outcome, error)
    (span,) = exporter.get_finished_spans()
    exporter.clear()
    return span


def test_each_run_of_a_one_off_task_links_to_its_add(exported):
    task = Task.new("order:cancel", 42, call="a:b", traceparent=TRACEPARENT, tracestate="congo=t61rcWkgMzE")
    task.due_at = 1_700_000_000.0
    for runs in (1, 3):
        task.runs = runs
        span = run_span(exported, task)
        (link,) = span.links
        assert (link.context.trace_id, link.context.span_id) == (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7)
        assert link.context.is_remote and link.context.trace_state.to_header() == "congo=t61rcWkgMzE"
        assert span.parent is None and span.context.trace_id != link.context.trace_id and span.kind == SpanKind.CONSUMER
        assert dict(span.attributes) == {"delayd.topic": "order:cancel", "delayd.id": "42", "delayd.run": runs,
                                         "delayd.lateness_ms": 250, "delayd.due_at": 1_700_000_000.0,
                                         "delayd.outcome": "ok"}


def test_a_recurring_task_links_only_its_first_run(exported):
    task = Task.new("metrics:push", 1, call="a:b", every=60, traceparent=TRACEPARENT)
    task.due_at, task.runs = 1_700_000_000.0, 1
    assert len(run_span(exported, task).links) == 1
    task.runs = 2
    span = run_span(exported, task)
    assert not span.links and span.attributes["delayd.due_at"] == 1_700_000_000.0


def test_a_trace_that_does_not_parse_links_nothing_and_failures_are_errors(exported):
    task = Task.new("t", 1, call="a:b")
    task.trace, task.runs = "00-not-a-traceparent", 1
    span = run_span(exported, task, "failed", "no retries left\nmore")
    assert not span.links
    assert span.status.status_code == StatusCode.ERROR and span.status.description == "no retries left"


def test_the_run_span_is_current_while_its_handler_runs(exported):
    """as_current: a span started inside is the run's child; with None (tracing off) it is not.
    (The daemon's handlers and callbacks: tests/daemon/test_traces.py.)"""
    task = Task.new("t", 1, call="a:b")
    run = tracing.start_run(task, now_ms=1_700_000_000_000)
    with tracing.as_current(run):
        child = tracing._tracer.start_span("handler")
    with tracing.as_current(None):
        root = tracing._tracer.start_span("outside")
    assert child.parent.span_id == run.get_span_context().span_id and root.parent is None


def test_tracing_is_on_only_when_otel_traces_exporter_names_an_exporter():
    assert tracing.exporter_names({}) == []
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "console, otlp"}) == ["console", "otlp"]
    assert tracing.exporter_names({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}) == []
