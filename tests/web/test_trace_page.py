"""A task's trace context on its dashboard page (/tasks/TOPIC/ID), over HTTP from a real `delayd web`: the trace id,
the span that added it, the full traceparent and tracestate, escaped; linked to a tracing UI only when
web_trace_url is set; a stored trace that does not parse shown as it is; nothing for a task without one.
(In Chromium: tests/web/test_web_browser.py.)"""
from __future__ import annotations

import json

import pytest
from web_helper import TOKEN, Web

from delayd import config as config_mod
from delayd.store.keys import bucket_of

pytestmark = pytest.mark.system

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACESTATE = "congo=t61rcWkgMzE,x=<b>bold</b>"  # printable ASCII, so a valid tracestate: it must stay text


def page(web: Web, path: str) -> str:
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.get(path, headers={"Accept": "text/html"})
    assert answer.status_code == 200, answer.text[-300:]
    return answer.text


def test_the_task_page_shows_the_trace_escaped_and_no_link_by_default(web, client, r):
    client.add("order:cancel", 1, call="delayd.examples:echo", delay=600, traceparent=TRACEPARENT,
               tracestate=TRACESTATE)
    client.add("order:cancel", 2, call="delayd.examples:echo", delay=600)
    text = page(web, "/tasks/order:cancel/1")
    assert '<section class="card" id="trace">' in text
    assert f'<tr><th>trace id</th><td class="mono">{TRACE_ID}</td></tr>' in text, "no link without web_trace_url"
    assert "<tr><th>added in span</th><td class=\"mono\">00f067aa0ba902b7</td></tr>" in text
    assert f'<tr><th>traceparent</th><td class="mono">{TRACEPARENT}</td></tr>' in text
    assert "congo=t61rcWkgMzE,x=&lt;b&gt;bold&lt;/b&gt;" in text and "<b>bold" not in text
    assert 'id="trace"' not in page(web, "/tasks/order:cancel/2"), "a task without a trace shows no trace card"


def test_web_trace_url_links_the_trace_id(redis_url, client):
    client.add("order:cancel", 3, call="delayd.examples:echo", delay=600, traceparent=TRACEPARENT[:-2] + "00")
    trace_url = "https://jaeger.example/trace/{trace_id}?a=1&b=2"
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_TRACE_URL=trace_url) as web:
        text = page(web, "/tasks/order:cancel/3")
    assert (f'<a href="https://jaeger.example/trace/{TRACE_ID}?a=1&amp;b=2" target="_blank" '
            f'rel="noopener noreferrer">{TRACE_ID}</a>') in text
    assert "00f067aa0ba902b7 (not sampled)" in text and "<tr><th>tracestate</th><td class=\"mono\">-</td></tr>" in text


def test_a_stored_trace_that_does_not_parse_makes_the_record_corrupt(web, client, r):
    """A trace the reader would drop is read as corrupt (delayd.model.record.from_record; the claim sets such a
    record aside, docs/protocol.md section 7): its page says so and shows the stored spec, escaped."""
    client.add("order:cancel", 4, call="delayd.examples:echo", delay=600, traceparent=TRACEPARENT)
    key = f"delayd:{{{bucket_of('order:cancel:4', client.store.buckets)}}}:t:order:cancel:4"
    spec = json.loads(r.hget(key, "spec"))
    r.hset(key, "spec", json.dumps({**spec, "trace": "01-<i>not</i>-a-traceparent"}))
    text = page(web, "/tasks/order:cancel/4")
    assert "<h2>Corrupt record</h2><p>record does not parse: trace is not a W3C trace context</p>" in text
    assert "01-&lt;i&gt;not&lt;/i&gt;-a-traceparent" in text and "trace id" not in text


@pytest.mark.parametrize("url", ["jaeger.example/trace/{trace_id}", "https://jaeger.example/trace/",
                                 "javascript:{trace_id}"])
def test_web_trace_url_must_be_http_with_the_trace_id(url):
    refused = r"^web_trace_url must be an http\(s\) URL with \{trace_id\} in it"
    with pytest.raises(config_mod.ConfigError, match=refused):
        config_mod.load(None, env={"DELAYD_WEB_TRACE_URL": url})
