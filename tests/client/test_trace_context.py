"""The trace context an add carries (delayd.tracing.current, docs/protocol.md's `trace`): taken from the
caller's current OpenTelemetry span by Client and AsyncClient, with its tracestate; an explicit traceparent
wins; none without a current span. Spans from the real SDK (a TracerProvider of the test's own, not the
process's global one)."""
from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState, set_span_in_context

from delayd import AsyncClient, Client
from delayd.store.keys import bucket_of

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
tracer = TracerProvider().get_tracer("shop")


def spec(r, client: Client, topic: str, id: int) -> str:
    return r.hget(f"delayd:{{{bucket_of(f'{topic}:{id}', client.store.buckets)}}}:t:{topic}:{id}", "spec")


def traceparent_of(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def test_the_current_span_goes_with_the_add(redis_url, r):
    client = Client.from_url(redis_url)
    client.add("t", 1, call="a:b")  # no current span: the record as it always was
    assert spec(r, client, "t", 1) == '{"call":"a:b"}'
    upstream = SpanContext(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, is_remote=True,
                           trace_flags=TraceFlags(1), trace_state=TraceState([("congo", "t61rcWkgMzE")]))
    with tracer.start_as_current_span("checkout", context=set_span_in_context(NonRecordingSpan(upstream))) as span:
        client.add("t", 2, call="a:b")
        client.add_many([{"topic": "t", "id": 3, "call": "a:b"}])
        client.add("t", 4, call="a:b", traceparent=TRACEPARENT)  # given: it wins (without the current tracestate)
    carried = f"{traceparent_of(span)} congo=t61rcWkgMzE"
    assert [client.get("t", i).trace for i in (2, 3, 4)] == [carried, carried, TRACEPARENT]
    assert spec(r, client, "t", 2) == f'{{"call":"a:b","trace":"{carried}"}}'
    assert client.get("t", 2).to_dict()["traceparent"] == traceparent_of(span)


def test_the_async_client_takes_the_current_span_too(redis_url):
    async def add() -> str:
        with tracer.start_as_current_span("checkout") as span:
            async with AsyncClient.from_url(redis_url) as client:
                await client.add("t", 5, call="a:b")
                assert (await client.get("t", 5)).trace == traceparent_of(span)
        return traceparent_of(span)
    assert asyncio.run(add()).startswith("00-")


@pytest.mark.parametrize("bad", [TRACEPARENT.upper(), TRACEPARENT[:-1], 7, "00-" + "0" * 32 + TRACEPARENT[35:]])
def test_a_bad_traceparent_is_refused_and_nothing_written(redis_url, r, bad):
    from delayd.model.task import TaskError
    with pytest.raises(TaskError, match=r"^traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex> \(lowercase, ids "):
        Client.from_url(redis_url).add("t", 1, call="a:b", traceparent=bad)
    assert not r.keys("*:t:*")
