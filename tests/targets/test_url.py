"""URL deliveries (delayd.targets.url.engine) against a real stdlib HTTP server on loopback:
encoding, headers, answers, timeouts, the answer cap, pooling."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs

import pytest
from redis_server import free_port, wait_for

import delayd
from delayd import Task


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def url_task(http, path, runs=1, **kw) -> Task:
    task = Task.new(kw.pop("topic", "order:notify"), kw.pop("id", 7), url=http.base + path, **kw)
    task.runs = runs
    return task


@pytest.fixture
def deliver(make_engine):
    return make_engine()


# -- url targets: encoding and headers ------------------------------------------------------

PARAMS = {"order": 5, "name": "x y&z=1", "flag": True, "none": None, "tags": ["a", "b"], "obj": {"k": "v"}}


def test_get_sends_params_as_query_and_keeps_the_url_query(http, deliver):
    outcome = deliver(url_task(http, "/echo?fixed=1", params=PARAMS))
    assert outcome.kind == "ok" and outcome.status == 200
    [req] = http.requests
    assert req["method"] == "GET" and req["body"] == b""
    assert req["query"] == {"fixed": ["1"], "order": ["5"], "name": ["x y&z=1"], "flag": ["true"], "none": [""],
                            "tags": ["a", "b"], "obj": ['{"k":"v"}']}


def test_post_sends_params_form_encoded(http, deliver):
    assert deliver(url_task(http, "/echo", method="POST", params=PARAMS)).kind == "ok"
    [req] = http.requests
    assert req["method"] == "POST" and req["query"] == {}
    assert req["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(req["body"].decode(), keep_blank_values=True) == {
        "order": ["5"], "name": ["x y&z=1"], "flag": ["true"], "none": [""], "tags": ["a", "b"],
        "obj": ['{"k":"v"}']}


def test_post_json_sends_params_as_a_json_body(http, deliver):
    assert deliver(url_task(http, "/echo", method="POST", body="json", params=PARAMS)).kind == "ok"
    [req] = http.requests
    assert req["headers"]["content-type"] == "application/json"
    assert json.loads(req["body"]) == PARAMS


def test_post_without_params_sends_an_empty_form(http, deliver):
    assert deliver(url_task(http, "/echo", method="POST")).kind == "ok"
    assert http.requests[0]["body"] == b""


def test_user_agent_and_idempotency_key(http, deliver):
    deliver(url_task(http, "/echo", runs=3, topic="order:notify", id=5))
    deliver(url_task(http, "/echo", runs=4, topic="order:notify", id=5))
    first, second = http.requests
    assert first["headers"]["user-agent"] == f"delayd/{delayd.__version__}"
    assert first["headers"]["idempotency-key"] == "order:notify:5:3"
    assert second["headers"]["idempotency-key"] == "order:notify:5:4"


def test_non_ascii_identity_is_sent_exactly(http, deliver):
    assert deliver(url_task(http, "/echo", topic="commande", id="été", runs=2)).kind == "ok"
    raw = http.requests[0]["headers"]["idempotency-key"]  # http.server decodes headers as latin-1
    assert raw.encode("latin-1").decode() == "commande:été:2"


def test_cookies_are_never_kept_between_requests(http, deliver):
    assert deliver(url_task(http, "/cookie")).kind == "ok"
    assert deliver(url_task(http, "/echo")).kind == "ok"
    assert "cookie" not in http.requests[1]["headers"]


def test_connections_are_reused(http, deliver):
    for runs in range(1, 6):
        assert deliver(url_task(http, "/echo", runs=runs)).kind == "ok"
    assert len(http.ports) == 5 and len(set(http.ports)) == 1


# -- url targets: answers ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/success", "/padded", "/bom"])
def test_2xx_success_is_ok(http, deliver, path):
    assert deliver(url_task(http, path)).kind == "ok"


def test_2xx_fail_is_failed(http, deliver):
    outcome = deliver(url_task(http, "/fail"))
    assert outcome.kind == "failed" and "fail" in outcome.error


@pytest.mark.parametrize("path, expected", [
    ("/garbage", "HTTP 200: answer is not success or fail: ok, thanks!"),
    ("/empty", "HTTP 200: answer is not success or fail: (empty answer)"),
    ("/fail500", "HTTP 500: fail"),
    ("/nowhere", "HTTP 404: no such path"),
    ("/redirect", "HTTP 302: redirect to /success not followed: moved"),
])
def test_other_answers_retry_with_a_clear_error(http, deliver, path, expected):
    outcome = deliver(url_task(http, path))
    assert (outcome.kind, outcome.error) == ("retry", expected)
    assert outcome.status == int(expected[5:8])


def test_500_error_quotes_the_first_200_characters_on_one_line(http, deliver):
    outcome = deliver(url_task(http, "/error"))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("HTTP 500: internal oops yyy")
    assert "\n" not in outcome.error and len(outcome.error) <= len("HTTP 500: ") + 200
    assert len(http.requests) == 1  # a redirect or an error is not followed or retried here


def test_timeout_retries_within_the_task_timeout(http, deliver):
    start = time.monotonic()
    outcome = deliver(url_task(http, "/hang", timeout=0.5))
    elapsed = time.monotonic() - start
    assert outcome.kind == "retry" and "timeout" in outcome.error and "0.5 s" in outcome.error
    assert 0.4 < elapsed < 3


def test_config_url_timeout_applies_when_the_task_has_none(http, make_engine):
    start = time.monotonic()
    outcome = make_engine(url_timeout=0.5)(url_task(http, "/hang"))
    assert outcome.kind == "retry" and "timeout after 0.5 s" in outcome.error
    assert time.monotonic() - start < 3


def test_a_dribbling_server_cannot_stretch_the_timeout(http, deliver):
    start = time.monotonic()
    outcome = deliver(url_task(http, "/drip", timeout=0.5))  # 100 bytes over 20 s
    assert outcome.kind == "retry" and "timeout" in outcome.error
    assert time.monotonic() - start < 3


def test_a_server_dribbling_its_headers_cannot_stretch_the_timeout(http, deliver):
    start = time.monotonic()
    outcome = deliver(url_task(http, "/drip-head", timeout=0.5))  # headers that never end (20 s)
    assert outcome.kind == "retry" and "timeout after 0.5 s" in outcome.error
    assert time.monotonic() - start < 3


def test_the_timeout_counts_from_the_request_and_is_one_deadline(http, make_engine):
    """The host's only slot is busy for 1.9 s; a request with a 1.5 s timeout waits for it
    (not counted: the timeout counts from the request), then its answer takes 1.9 s: the
    request ends at 1.5 s after it was sent."""
    deliver = make_engine(url_host_concurrency=1)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(deliver, url_task(http, "/slow?seconds=1.9", id=1, timeout=8))
        assert wait_for(lambda: http.requests, 5, message="the first request in")
        start = time.monotonic()
        second = deliver(url_task(http, "/slow?seconds=1.9", id=2, timeout=1.5))
        elapsed = time.monotonic() - start
    assert first.result().kind == "ok"
    assert second.kind == "retry" and "timeout after 1.5 s" in second.error, second
    assert len(http.requests) == 2
    assert 2.5 < elapsed < 4.5  # waited ~1.8 s for the slot, then 1.5 s: not 1.5 s in all, not 3.8 s


def test_the_request_has_no_timeout_of_aiohttp_s_own(deliver):
    """The task's timeout is the request's one deadline: aiohttp's defaults (300 s in all, 30 s to connect)
    would cut a longer one short, a connect at 30 s reported as "timeout after 60 s" (and cost two timers per
    request). Looked at on the session: a real wait past 30 s is too long for the suite."""
    timeout = deliver.engine.session.timeout
    assert (timeout.total, timeout.connect, timeout.sock_connect, timeout.sock_read) == (None, None, None, None)


def test_a_slow_answer_within_the_timeout_is_ok(http, deliver):
    assert deliver(url_task(http, "/slow?seconds=0.3", timeout=2)).kind == "ok"


def test_connection_refused_retries(make_engine):
    deliver = make_engine(url_timeout=2.0)
    start = time.monotonic()
    outcome = deliver(Task.new("t", 1, url=f"http://127.0.0.1:{free_port()}/notify"))
    assert outcome.kind == "retry" and outcome.status is None
    assert outcome.error.startswith("connection failed:") and "refused" in outcome.error.lower()
    assert time.monotonic() - start < 3


def test_a_10_mb_answer_is_not_read_entirely(http, deliver):
    start = time.monotonic()
    outcome = deliver(url_task(http, "/big"))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("HTTP 200: answer larger than 65536 bytes (max_response_bytes)")
    assert time.monotonic() - start < 2


def test_reading_stops_at_the_cap(http, deliver):
    # 1 MB arrives, then the server stalls with 9 MB still due: reading to the end would
    # end in a timeout after 5 s; stopping at the cap answers at once.
    start = time.monotonic()
    outcome = deliver(url_task(http, "/big-then-hang"))
    assert outcome.kind == "retry" and "larger than 65536 bytes" in outcome.error
    assert time.monotonic() - start < 2


def test_the_cap_is_exact(http, make_engine):
    # /long-success answers "success" + 100 spaces (107 bytes).
    assert make_engine(max_response_bytes=107)(url_task(http, "/long-success")).kind == "ok"
    outcome = make_engine(max_response_bytes=106)(url_task(http, "/long-success"))
    assert outcome.kind == "retry" and "larger than 106 bytes" in outcome.error


def test_fifty_concurrent_runs_share_one_pool(http, make_engine):
    deliver = make_engine(url_host_concurrency=100)
    tasks = [url_task(http, "/slow?seconds=0.5", id=n, timeout=8) for n in range(50)]
    start = time.monotonic()
    futures = [deliver.begin(task) for task in tasks]
    outcomes = [f.result(30)[0].kind for f in futures]
    elapsed = time.monotonic() - start
    assert outcomes == ["ok"] * 50
    assert elapsed < 10, f"50 runs took {elapsed:.1f} s: they did not run concurrently"
    assert len(set(http.ports)) <= 50
