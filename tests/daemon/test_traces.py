"""Traces across processes (delayd.tracing), with the real OpenTelemetry SDK: a client process adds a URL
task inside a span of its own (the SDK's in-memory exporter tells the test that span's ids); a real daemon
with OTEL_TRACES_EXPORTER=console runs it and writes its spans to spans.jsonl, one per line; the real local HTTP server
receives `traceparent`. The run span `delayd.run` links to the client's span and is a root of its own; the
request is its child and is what the merchant's traceparent names. With tracing off (no OTEL_TRACES_EXPORTER)
the stored record is what it always was and no process of the daemon, nor the client, loads opentelemetry."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from redis_server import wait_for

from delayd import Client
from delayd.store.keys import bucket_of

CLIENT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from delayd import Client

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with trace.get_tracer("shop").start_as_current_span("checkout"):
    Client.from_url(sys.argv[1]).add("order:notify", 5, url=sys.argv[2], method="POST", params={"order": 5})
(span,) = exporter.get_finished_spans()
print(json.dumps({"trace_id": f"0x{span.context.trace_id:032x}", "span_id": f"0x{span.context.span_id:016x}"}))
"""
NOT_INSTALLED = """
import sys


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NotInstalled())
"""
UNTRACED = """
import sys
from delayd import Client
Client.from_url(sys.argv[1]).add("order:notify", 6, url=sys.argv[2], method="POST", params={"order": 6})
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def spans_in(text: str) -> list[dict]:
    """The spans the console exporter printed (one JSON object each) among whatever else is in `text`."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        if isinstance(value, dict) and "context" in value:
            found.append(value)
        at = end
    return found


def test_a_trace_goes_from_the_client_through_the_run_to_the_merchant(daemon_factory, redis_url, http):
    d = daemon_factory(redis_url, buckets=2, queues=1, OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="100",
                       OTEL_SERVICE_NAME="delayd-test")
    added = subprocess.run([sys.executable, "-c", CLIENT, redis_url, f"{http.base}/success"], capture_output=True,
                           text=True, timeout=60, check=True)
    client_span = json.loads(added.stdout)
    client = Client.from_url(redis_url)
    wait_for(lambda: (t := client.get("order:notify", 5)) and t.status == "ok", 20, message="the URL run ended ok")
    d.signal(signal.SIGTERM)  # the queue process exports what it holds as it stops
    assert d.wait() == 0
    assert spans_in(d.proc.stdout.read() + d.log()) == [], "spans go to their own file, not among the log's lines"
    lines = (d.state_dir / "spans.jsonl").read_text().splitlines()
    spans = [json.loads(line) for line in lines]  # one span per line
    (run,) = [s for s in spans if s["name"] == "delayd.run"]
    (request,) = [s for s in spans if s["name"] == "POST"]
    assert run["parent_id"] is None and run["kind"] == "SpanKind.CONSUMER"
    assert [link["context"] for link in run["links"]] == [{**client_span, "trace_state": "[]"}]
    assert run["context"]["trace_id"] != client_span["trace_id"]  # a trace of its own, linked
    assert run["resource"]["attributes"]["service.name"] == "delayd-test"
    attributes = run["attributes"]
    assert {k: attributes[k] for k in ("delayd.topic", "delayd.id", "delayd.run", "delayd.outcome")} == {
        "delayd.topic": "order:notify", "delayd.id": "5", "delayd.run": 1, "delayd.outcome": "ok"}
    assert 0 <= attributes["delayd.lateness_ms"] < 20000
    assert request["parent_id"] == run["context"]["span_id"] and request["kind"] == "SpanKind.CLIENT"
    assert request["context"]["trace_id"] == run["context"]["trace_id"]
    assert request["attributes"]["http.response.status_code"] == 200
    (sent,) = [q for q in http.requests if q["path"] == "/success"]
    trace_id, span_id = request["context"]["trace_id"][2:], request["context"]["span_id"][2:]
    version, sent_trace, sent_span, flags = sent["headers"]["traceparent"].split("-")
    assert (version, sent_trace, sent_span) == ("00", trace_id, span_id) and int(flags, 16) & 1, "sampled"


def test_a_handler_and_its_callback_run_in_the_run_span(daemon_factory, redis_url, http):
    """A handler's own span (sync in a pool thread, async on the event loop) and its callback's are children of
    the run's span, as is a URL run's callback's (tests/handlers_fixture.py: traced, traced_async, traced_callback)."""
    d = daemon_factory(redis_url, buckets=2, queues=1, OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="100",
                       DELAYD_ALLOWED_MODULES="handlers_fixture")
    client = Client.from_url(redis_url)
    callback = "handlers_fixture:traced_callback"
    client.add("h", "sync", call="handlers_fixture:traced", callback=callback)
    client.add("h", "async", call="handlers_fixture:traced_async", callback=callback)
    client.add("h", "url", url=f"{http.base}/success", callback=callback)
    wait_for(lambda: all((t := client.get("h", id)) and t.status == "ok" for id in ("sync", "async", "url")), 20,
             message="the three runs ended ok")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    spans = spans_in((d.state_dir / "spans.jsonl").read_text())
    runs = {s["attributes"]["delayd.id"]: s["context"] for s in spans if s["name"] == "delayd.run"}
    parents = {s["name"]: (s["context"]["trace_id"], s["parent_id"]) for s in spans if s["name"] != "delayd.run"}
    for name, id in [("handler h:sync", "sync"), ("handler h:async", "async"), ("callback h:sync", "sync"),
                     ("callback h:async", "async"), ("callback h:url", "url")]:
        assert parents.get(name) == (runs[id]["trace_id"], runs[id]["span_id"]), name


def test_tracing_off_sets_up_nothing_and_sends_no_traceparent(daemon_factory, redis_url, http, r, tmp_path):
    """OTEL_TRACES_EXPORTER unset, the SDK installed: the record as it always was, no traceparent sent, and the
    SDK's tracing never loaded in the queue process (redis-py itself loads OpenTelemetry's metrics, when installed)."""
    modules = run_untraced(daemon_factory, redis_url, http, r, tmp_path, OTEL_TRACES_EXPORTER="")
    assert not [m for m in modules if m.startswith("opentelemetry.sdk.trace")]


def test_without_opentelemetry_installed_nothing_changes(daemon_factory, redis_url, http, r, tmp_path):
    """OpenTelemetry made unimportable (a sitecustomize on PYTHONPATH refuses it, as a missing package is): the
    client adds and the daemon runs as ever, loading none of it; OTEL_TRACES_EXPORTER then costs one warning."""
    absent = tmp_path / "absent"
    absent.mkdir()
    (absent / "sitecustomize.py").write_text(NOT_INSTALLED)
    path = f"{absent}:{Path(__file__).parent.parent}"
    modules = run_untraced(daemon_factory, redis_url, http, r, tmp_path, OTEL_TRACES_EXPORTER="console",
                           PYTHONPATH=path)
    assert modules == []
    assert "event=tracing_unavailable" in (tmp_path / "d0" / "delayd.log").read_text()


def run_untraced(daemon_factory, redis_url: str, http, r, tmp_path, **env: str) -> list[str]:
    """Add a URL task from a client process (of `env`'s PYTHONPATH) and run it in a daemon of `env`: check the
    stored spec and that no traceparent went out; return the opentelemetry modules of the queue process."""
    out = tmp_path / "modules.json"
    daemon_factory(redis_url, buckets=2, queues=1, DELAYD_ALLOWED_MODULES="handlers_fixture", **env)
    added = subprocess.run([sys.executable, "-c", UNTRACED, redis_url, f"{http.base}/success"], capture_output=True,
                           text=True, timeout=60, check=True, env={**os.environ, **env})
    if "PYTHONPATH" in env:
        assert added.stdout.strip() == "[]", "the client loaded opentelemetry"
    key = f"delayd:{{{bucket_of('order:notify:6', 2)}}}:t:order:notify:6"
    assert r.hget(key, "spec") == f'{{"url":"{http.base}/success","method":"POST","params":{{"order":6}}}}'
    client = Client.from_url(redis_url)
    client.add("probe", 1, call="handlers_fixture:otel_modules", params={"path": str(out)})
    wait_for(lambda: (t := client.get("order:notify", 6)) and t.status == "ok" and out.exists(), 20,
             message="both runs ended")
    (sent,) = [q for q in http.requests if q["path"] == "/success"]
    assert "traceparent" not in sent["headers"]
    return json.loads(out.read_text())
