"""One run of a task (delayd.handlers): call, url and push targets, against real servers.

URL tests talk to a real stdlib HTTP server on loopback; push tests to the real
redis-server of conftest.py. `handlers_fixture` (in tests/) provides call targets.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import delayd
from delayd import Task
from delayd.config import Config
from delayd.handlers import Outcome, Runner, outcome_of
from redis_server import free_port, wait_for

BIG = 10 * 1024 * 1024


# -- a real HTTP server --------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 50 clients connect at once in the concurrency test


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so that connection reuse is visible

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: bytes | str, headers: dict | None = None) -> None:
        body = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_POST = do_GET

    def _route(self):
        srv = self.server
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with srv.lock:
            srv.requests.append({"method": self.command, "path": parts.path, "query": query, "body": body,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
            srv.ports.append(self.client_address[1])
        path = parts.path
        seconds = float(query.get("seconds", ["0.3"])[0])
        if path in ("/success", "/echo"):
            self._answer(200, "success")
        elif path == "/padded":
            self._answer(200, "  SUCCESS \r\n")
        elif path == "/bom":
            self._answer(200, "\ufeffsuccess\n")
        elif path == "/fail":
            self._answer(200, "FAIL\n")
        elif path == "/garbage":
            self._answer(200, "ok, thanks!")
        elif path == "/empty":
            self._answer(200, "")
        elif path == "/error":
            self._answer(500, "internal oops\n" + "y" * 1000)
        elif path == "/fail500":
            self._answer(500, "fail")
        elif path == "/redirect":
            self._answer(302, "moved", {"Location": "/success"})
        elif path == "/cookie":
            self._answer(200, "success", {"Set-Cookie": "session=s3cret; Path=/"})
        elif path == "/long-success":
            self._answer(200, "success" + " " * 100)
        elif path == "/hang":
            srv.stop.wait(10)  # far past any timeout used below
            self._answer(200, "success")
        elif path == "/slow":
            srv.stop.wait(seconds)
            self._answer(200, "success")
        elif path == "/drip":  # a byte every 0.2 s: no single read ever times out
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b" ")
                if srv.stop.wait(0.2):
                    break
        elif path == "/drip-head":  # the status line, then a header byte every 0.2 s: no read times out
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(100):
                self.wfile.write(b"x")
                if srv.stop.wait(0.2):
                    break
            self.close_connection = True
        elif path in ("/big", "/big-then-hang"):
            self.send_response(200)
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            chunk = b"x" * 65536
            limit = BIG if path == "/big" else 1024 * 1024
            for _ in range(limit // len(chunk)):
                self.wfile.write(chunk)
            if path == "/big-then-hang":  # the rest never comes: reading it all would hang
                srv.stop.wait(10)
            self.close_connection = True
        else:
            self._answer(404, "no such path")


@pytest.fixture
def http():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.lock, srv.stop, srv.requests, srv.ports = threading.Lock(), threading.Event(), [], []
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.stop.set()
    srv.shutdown()
    srv.server_close()
    thread.join(5)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def make_runner():
    runners = []

    def make(redis_client=None, **options) -> Runner:
        config = Config(**{"allowed_modules": ("handlers_fixture",), "url_timeout": 5.0, **options})
        runner = Runner(config, redis_client)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


@pytest.fixture
def runner(make_runner) -> Runner:
    return make_runner()


def url_task(http, path, runs=1, **kw) -> Task:
    task = Task.new(kw.pop("topic", "order:notify"), kw.pop("id", 7), url=http.base + path, **kw)
    task.runs = runs
    return task


def call_task(target, runs=1, **kw) -> Task:
    task = Task.new(kw.pop("topic", "order:cancel"), kw.pop("id", 42), call=target, **kw)
    task.runs = runs
    return task


# -- outcome_of ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["success", "SUCCESS ", " Success\n", True])
def test_outcome_of_success(value):
    assert outcome_of(value) == Outcome("ok")


@pytest.mark.parametrize("value", ["fail", "FAIL", " Fail \n", False])
def test_outcome_of_fail(value):
    assert outcome_of(value).kind == "failed"


@pytest.mark.parametrize("value, shown", [
    (None, "None"), (1, "1"), (0, "0"), ({}, "{}"), ([], "[]"), ("retry", "'retry'"), ("", "''"),
    ("successful", "'successful'"), (1.0, "1.0"), (b"success", "b'success'"), ({"ok": True}, "{'ok': True}"),
])
def test_outcome_of_anything_else_retries_and_names_the_value(value, shown):
    outcome = outcome_of(value)
    assert outcome.kind == "retry"
    assert f"returned {shown}" in outcome.error


def test_outcome_of_truncates_a_huge_value():
    outcome = outcome_of("z" * 100_000)
    assert outcome.kind == "retry" and len(outcome.error) < 400


def test_outcome_of_survives_a_broken_repr():
    class Nasty:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert outcome_of(Nasty()).kind == "retry"


# -- url targets: encoding and headers ------------------------------------------------------

PARAMS = {"order": 5, "name": "x y&z=1", "flag": True, "none": None, "tags": ["a", "b"], "obj": {"k": "v"}}


def test_get_sends_params_as_query_and_keeps_the_url_query(http, runner):
    outcome = runner.run(url_task(http, "/echo?fixed=1", params=PARAMS))
    assert outcome == Outcome("ok")
    [req] = http.requests
    assert req["method"] == "GET" and req["body"] == b""
    assert req["query"] == {"fixed": ["1"], "order": ["5"], "name": ["x y&z=1"], "flag": ["true"], "none": [""],
                            "tags": ["a", "b"], "obj": ['{"k":"v"}']}


def test_post_sends_params_form_encoded(http, runner):
    assert runner.run(url_task(http, "/echo", method="POST", params=PARAMS)).kind == "ok"
    [req] = http.requests
    assert req["method"] == "POST" and req["query"] == {}
    assert req["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(req["body"].decode(), keep_blank_values=True) == {
        "order": ["5"], "name": ["x y&z=1"], "flag": ["true"], "none": [""], "tags": ["a", "b"],
        "obj": ['{"k":"v"}']}


def test_post_json_sends_params_as_a_json_body(http, runner):
    assert runner.run(url_task(http, "/echo", method="POST", body="json", params=PARAMS)).kind == "ok"
    [req] = http.requests
    assert req["headers"]["content-type"] == "application/json"
    assert json.loads(req["body"]) == PARAMS


def test_post_without_params_sends_an_empty_form(http, runner):
    assert runner.run(url_task(http, "/echo", method="POST")).kind == "ok"
    assert http.requests[0]["body"] == b""


def test_user_agent_and_idempotency_key(http, runner):
    runner.run(url_task(http, "/echo", runs=3, topic="order:notify", id=5))
    runner.run(url_task(http, "/echo", runs=4, topic="order:notify", id=5))
    first, second = http.requests
    assert first["headers"]["user-agent"] == f"delayd/{delayd.__version__}"
    assert first["headers"]["idempotency-key"] == "order:notify:5:3"
    assert second["headers"]["idempotency-key"] == "order:notify:5:4"


def test_non_ascii_identity_is_sent_exactly(http, runner):
    assert runner.run(url_task(http, "/echo", topic="commande", id="été", runs=2)).kind == "ok"
    raw = http.requests[0]["headers"]["idempotency-key"]  # http.server decodes headers as latin-1
    assert raw.encode("latin-1").decode() == "commande:été:2"


def test_cookies_are_never_kept_between_requests(http, runner):
    assert runner.run(url_task(http, "/cookie")).kind == "ok"
    assert runner.run(url_task(http, "/echo")).kind == "ok"
    assert "cookie" not in http.requests[1]["headers"]


def test_connections_are_reused(http, runner):
    for runs in range(1, 6):
        assert runner.run(url_task(http, "/echo", runs=runs)).kind == "ok"
    assert len(http.ports) == 5 and len(set(http.ports)) == 1


# -- url targets: answers ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/success", "/padded", "/bom"])
def test_2xx_success_is_ok(http, runner, path):
    assert runner.run(url_task(http, path)) == Outcome("ok")


def test_2xx_fail_is_failed(http, runner):
    outcome = runner.run(url_task(http, "/fail"))
    assert outcome.kind == "failed" and "fail" in outcome.error


@pytest.mark.parametrize("path, expected", [
    ("/garbage", "HTTP 200: answer is not success or fail: ok, thanks!"),
    ("/empty", "HTTP 200: answer is not success or fail: (empty answer)"),
    ("/fail500", "HTTP 500: fail"),
    ("/nowhere", "HTTP 404: no such path"),
    ("/redirect", "HTTP 302: redirect to /success not followed: moved"),
])
def test_other_answers_retry_with_a_clear_error(http, runner, path, expected):
    assert runner.run(url_task(http, path)) == Outcome("retry", expected)


def test_500_error_quotes_the_first_200_characters_on_one_line(http, runner):
    outcome = runner.run(url_task(http, "/error"))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("HTTP 500: internal oops yyy")
    assert "\n" not in outcome.error and len(outcome.error) <= len("HTTP 500: ") + 200
    assert len(http.requests) == 1  # a redirect or an error is not followed or retried here


def test_timeout_retries_within_the_task_timeout(http, runner):
    start = time.monotonic()
    outcome = runner.run(url_task(http, "/hang", timeout=0.5))
    elapsed = time.monotonic() - start
    assert outcome.kind == "retry" and "timeout" in outcome.error and "0.5 s" in outcome.error
    assert 0.4 < elapsed < 3


def test_config_url_timeout_applies_when_the_task_has_none(http, make_runner):
    start = time.monotonic()
    outcome = make_runner(url_timeout=0.5).run(url_task(http, "/hang"))
    assert outcome.kind == "retry" and "timeout after 0.5 s" in outcome.error
    assert time.monotonic() - start < 3


def test_a_dribbling_server_cannot_stretch_the_timeout(http, runner):
    start = time.monotonic()
    outcome = runner.run(url_task(http, "/drip", timeout=0.5))  # 100 bytes over 20 s
    assert outcome.kind == "retry" and "timeout" in outcome.error
    assert time.monotonic() - start < 3


def test_a_server_dribbling_its_headers_cannot_stretch_the_timeout(http, runner):
    start = time.monotonic()
    outcome = runner.run(url_task(http, "/drip-head", timeout=0.5))  # headers that never end (20 s)
    assert outcome.kind == "retry" and "timeout after 0.5 s" in outcome.error
    assert time.monotonic() - start < 3


def test_the_timeout_is_one_deadline_for_pool_wait_connect_and_answer(http, make_runner):
    """The only connection is busy for 1.9 s; a request with a 2 s timeout waits 1.9 s for
    it, then 1.9 s for its answer: each phase within 2 s, 3.8 s in all. It must end at 2 s."""
    runner = make_runner(concurrency=1)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(runner.run, url_task(http, "/slow?seconds=1.9", id=1, timeout=8))
        assert wait_for(lambda: http.requests, 5, message="the first request in")
        start = time.monotonic()
        second = runner.run(url_task(http, "/slow?seconds=1.9", id=2, timeout=2))
        elapsed = time.monotonic() - start
    assert first.result() == Outcome("ok")
    assert second.kind == "retry" and "timeout after 2 s" in second.error, second
    assert elapsed < 3.2  # 2 s and a margin for a busy machine, well short of 3.8 s


def test_a_slow_answer_within_the_timeout_is_ok(http, runner):
    assert runner.run(url_task(http, "/slow?seconds=0.3", timeout=2)) == Outcome("ok")


def test_connection_refused_retries():
    config = Config(url_timeout=2.0)
    with Runner(config, None) as runner:
        start = time.monotonic()
        outcome = runner.run(Task.new("t", 1, url=f"http://127.0.0.1:{free_port()}/notify"))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("connection failed:") and "refused" in outcome.error.lower()
    assert time.monotonic() - start < 3


def test_a_10_mb_answer_is_not_read_entirely(http, runner):
    start = time.monotonic()
    outcome = runner.run(url_task(http, "/big"))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("HTTP 200: answer larger than 65536 bytes (max_response_bytes)")
    assert time.monotonic() - start < 2


def test_reading_stops_at_the_cap(http, runner):
    # 1 MB arrives, then the server stalls with 9 MB still due: reading to the end would
    # end in a timeout after 5 s; stopping at the cap answers at once.
    start = time.monotonic()
    outcome = runner.run(url_task(http, "/big-then-hang"))
    assert outcome.kind == "retry" and "larger than 65536 bytes" in outcome.error
    assert time.monotonic() - start < 2


def test_the_cap_is_exact(http, make_runner):
    # /long-success answers "success" + 100 spaces (107 bytes).
    assert make_runner(max_response_bytes=107).run(url_task(http, "/long-success")).kind == "ok"
    outcome = make_runner(max_response_bytes=106).run(url_task(http, "/long-success"))
    assert outcome.kind == "retry" and "larger than 106 bytes" in outcome.error


def test_fifty_concurrent_runs_share_one_pool(http, runner):
    tasks = [url_task(http, "/slow?seconds=0.5", id=n, timeout=8) for n in range(50)]
    start = time.monotonic()
    with ThreadPoolExecutor(50) as pool:
        outcomes = list(pool.map(runner.run, tasks))
    elapsed = time.monotonic() - start
    assert outcomes == [Outcome("ok")] * 50
    assert elapsed < 10, f"50 runs took {elapsed:.1f} s: they did not run concurrently"
    assert len(set(http.ports)) <= runner.config.concurrency  # the pool is bounded (32)


def test_run_after_close_retries_instead_of_raising(http, make_runner):
    runner = make_runner()
    runner.close()
    outcome = runner.run(url_task(http, "/success"))
    assert outcome.kind == "retry" and "closed" in outcome.error


# -- call targets --------------------------------------------------------------------------

def test_allowed_call_runs_with_the_task(runner, tmp_path):
    mark = tmp_path / "mark"
    assert runner.run(call_task("handlers_fixture:touch", runs=2, params={"path": str(mark)})) == Outcome("ok")
    assert mark.read_text() == "order:cancel:42:2\n"


def test_call_outside_the_allowlist_never_executes(make_runner, tmp_path):
    mark = tmp_path / "mark"
    runner = make_runner(allowed_modules=("delayd.examples",))
    outcome = runner.run(call_task("handlers_fixture:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed"
    assert "'handlers_fixture' of 'handlers_fixture:touch' is not allowed" in outcome.error
    assert "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES" in outcome.error
    assert not mark.exists()


def test_allowlist_is_a_module_prefix_not_a_string_prefix(runner, tmp_path):
    mark = tmp_path / "mark"
    outcome = runner.run(call_task("handlers_fixture_evil:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed" and "DELAYD_ALLOWED_MODULES" in outcome.error
    assert not mark.exists()
    assert "handlers_fixture_evil" not in sys.modules  # not even imported


def test_empty_allowlist_refuses_everything(make_runner, tmp_path):
    mark = tmp_path / "mark"
    outcome = make_runner(allowed_modules=()).run(call_task("handlers_fixture:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed" and not mark.exists()


@pytest.mark.parametrize("target", ["handlers_fixture:os.remove", "handlers_fixture:__builtins__",
                                    "handlers_fixture:touch.__globals__"])
def test_a_target_cannot_reach_out_of_its_module(runner, target):
    outcome = runner.run(call_task(target))
    assert outcome.kind == "failed" and outcome.error.startswith("call refused:")


def test_the_default_allowlist_runs_the_examples():
    with Runner(Config(), None) as runner:
        assert runner.run(call_task("delayd.examples:noop")) == Outcome("ok")


@pytest.mark.parametrize("target, expected", [
    ("no_such_pkg.tasks:run", "cannot import module 'no_such_pkg.tasks' of 'no_such_pkg.tasks:run': "
                              "ModuleNotFoundError: No module named 'no_such_pkg'"),
    ("handlers_fixture:missing", "module 'handlers_fixture' has no attribute 'missing'"),
    ("handlers_fixture:NOT_CALLABLE", "'handlers_fixture:NOT_CALLABLE' is not callable (it is a int)"),
])
def test_a_target_that_cannot_be_loaded_retries(make_runner, target, expected):
    runner = make_runner(allowed_modules=("handlers_fixture", "no_such_pkg"))
    outcome = runner.run(call_task(target))
    assert outcome.kind == "retry"
    assert outcome.error.startswith(expected)


def test_a_raising_handler_retries_with_type_message_and_last_frames(runner):
    outcome = runner.run(call_task("handlers_fixture:explode", id=7))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("ValueError: bad order 7 | last frames: handlers_fixture.py:")
    assert "in level3" in outcome.error and "in level4" in outcome.error and "in level5" in outcome.error
    assert "in level2" not in outcome.error and "handlers.py" not in outcome.error
    assert 'raise ValueError(f"bad order {task.id}")' in outcome.error
    assert "\n" not in outcome.error


def test_a_huge_exception_message_is_cut(runner):
    outcome = runner.run(call_task("handlers_fixture:huge_error"))
    assert outcome.kind == "retry" and outcome.error.startswith("ValueError: xxx")
    assert len(outcome.error) < 1000 and "\n" not in outcome.error


def test_a_handler_calling_sys_exit_retries(runner):
    outcome = runner.run(call_task("handlers_fixture:exits"))
    assert outcome.kind == "retry" and outcome.error.startswith("SystemExit: 3")


@pytest.mark.parametrize("value, kind", [
    ("success", "ok"), ("SUCCESS ", "ok"), (True, "ok"), ("fail", "failed"), (False, "failed"),
    (None, "retry"), (1, "retry"), ("maybe", "retry"), ({}, "retry"), ([], "retry"), (0.5, "retry"),
])
def test_handler_return_values(runner, value, kind):
    outcome = runner.run(call_task("handlers_fixture:returns", params={"value": value}))
    assert outcome.kind == kind
    if kind == "retry":
        assert repr(value) in outcome.error


def test_odd_handlers(runner):
    assert runner.run(call_task("handlers_fixture:returns_set")) == Outcome(
        "retry", "handler returned {1, 2}; expected 'success' or True, 'fail' or False")
    assert runner.run(call_task("handlers_fixture:HANDLER")) == Outcome("ok")  # a callable object
    outcome = runner.run(call_task("handlers_fixture:coroutine"))
    assert outcome.kind == "retry" and "async def" in outcome.error


def test_many_threads_resolve_and_run_the_same_target(runner, tmp_path):
    mark = tmp_path / "mark"
    tasks = [call_task("handlers_fixture:touch", id=n, params={"path": str(mark)}) for n in range(40)]
    with ThreadPoolExecutor(20) as pool:
        assert list(pool.map(runner.run, tasks)) == [Outcome("ok")] * 40
    assert sorted(mark.read_text().split()) == sorted(f"order:cancel:{n}:1" for n in range(40))


# -- examples --------------------------------------------------------------------------------

def test_examples(make_runner, redis_url, r):
    runner = make_runner(allowed_modules=("delayd.examples",))

    def run(name, runs=1, **params):
        return runner.run(call_task(f"delayd.examples:{name}", runs=runs, params=params)).kind

    assert run("echo", a=1) == "ok" and run("cancel_order", order=5) == "ok" and run("noop") == "ok"
    assert [run("flaky", runs=n) for n in (1, 2, 3, 4)] == ["retry", "retry", "ok", "ok"]
    assert run("flaky", runs=1, succeed_on=1) == "ok"
    assert run("slow", seconds=0.01) == "ok" and run("fail") == "failed"
    outcome = runner.run(call_task("delayd.examples:boom"))
    assert outcome.kind == "retry" and outcome.error.startswith("RuntimeError: boom")
    assert run("record", runs=3, redis=redis_url, list="proof") == "ok"
    assert run("record", runs=4, redis=redis_url, list="proof") == "ok"
    assert r.lrange("proof", 0, -1) == ["order:cancel:42:3", "order:cancel:42:4"]
    # A default-allowed example must not be a way to reach another host's Redis.
    assert run("record", redis="redis://10.0.0.1:6379/0", list="proof") == "failed"


# -- push targets ----------------------------------------------------------------------------

def test_push_rpushes_the_task_as_json(make_runner, r):
    runner = make_runner(redis_client=r)
    first = Task.new("report", 1, push="results", params={"n": 1})
    first.runs = 1
    second = Task.new("report", 2, push="results")
    assert runner.run(first) == Outcome("ok") and runner.run(second) == Outcome("ok")
    values = r.lrange("results", 0, -1)  # the name as given: no prefix
    assert values == [first.to_json(), second.to_json()]
    assert json.loads(values[0]) == first.to_dict() and json.loads(values[0])["key"] == "report:1"


def test_push_to_a_key_of_another_type_retries(make_runner, r):
    r.set("results", "a string")
    outcome = make_runner(redis_client=r).run(Task.new("report", 1, push="results"))
    assert outcome.kind == "retry" and "WRONGTYPE" in outcome.error and "'results'" in outcome.error


def test_push_with_redis_down_retries(make_runner):
    dead = redis.Redis(port=free_port(), socket_connect_timeout=1, decode_responses=True,
                       retry=Retry(NoBackoff(), 0))  # fail at once instead of backing off
    outcome = make_runner(redis_client=dead).run(Task.new("report", 1, push="results"))
    dead.close()
    assert outcome.kind == "retry" and outcome.error.startswith("Redis error pushing to 'results': ConnectionError")


# -- callbacks -------------------------------------------------------------------------------

def test_callback_runs_once_with_the_task(runner, tmp_path):
    mark = tmp_path / "mark"
    task = call_task("handlers_fixture:returns", runs=2, callback="handlers_fixture:touch",
                     params={"value": "success", "path": str(mark)})
    assert runner.run(task) == Outcome("ok")
    assert mark.exists() is False  # run() does not call the callback; the queue worker does
    assert runner.run_callback(task) == ""
    assert mark.read_text() == "order:cancel:42:2\n"


def test_no_callback_is_no_error(runner):
    assert runner.run_callback(call_task("handlers_fixture:noop")) == ""


def test_a_raising_callback_returns_its_error(runner):
    error = runner.run_callback(call_task("handlers_fixture:touch", id=9, callback="handlers_fixture:explode"))
    assert error.startswith("callback failed: ValueError: bad order 9 | last frames:")


def test_a_refused_callback_never_runs(runner, tmp_path):
    mark = tmp_path / "mark"
    task = call_task("handlers_fixture:touch", callback="handlers_fixture_evil:touch", params={"path": str(mark)})
    error = runner.run_callback(task)
    assert error.startswith("callback refused: module 'handlers_fixture_evil'")
    assert "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES" in error
    assert not mark.exists()


def test_a_callback_that_cannot_be_imported(runner):
    error = runner.run_callback(call_task("handlers_fixture:touch", callback="handlers_fixture:missing"))
    assert error.startswith("callback failed: module 'handlers_fixture' has no attribute 'missing'")


def test_run_never_raises_on_a_task_without_target(runner):
    task = Task(topic="t", id="1")  # built directly, bypassing validation
    assert runner.run(task) == Outcome("failed", "task has no call, url or push target")
