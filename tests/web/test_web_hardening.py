"""The dashboard against hostile requests (issue 24), on a real `delayd web` process: bodies
too large to read, forged cursors and cookies, wrong tokens in a row, made-up page messages,
and the session cookie behind a TLS-terminating proxy."""
from __future__ import annotations

import base64
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from daemon_helper import ROOT
from web_helper import TOKEN, Web, logged_in

pytestmark = pytest.mark.system

MiB = 1024 * 1024


def post_unread(port: int, path: str, body: bytes, chunked: bool,
                content_type: str = "application/x-www-form-urlencoded", authorization: str = "") -> bytes:
    """POST `body` (a form unless told), sending only while the server has not answered (it may
    answer before reading it); the head of the answer."""
    if chunked:
        step = 64 * 1024
        body = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step])
                        for i in range(0, len(body), step)) + b"0\r\n\r\n"
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n{auth}"
            f"{framing}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        left = memoryview(body)
        while left:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable or not writable:
                break  # answered (or stuck: the read below says which)
            try:
                left = left[sock.send(left[:256 * 1024]):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(30)
        return sock.recv(65536).partition(b"\r\n\r\n")[0]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_large_login_body_answers_413_unread(web, chunked):
    """Issue 24 #1: 16 MiB to POST /login (read before any authentication) took the process from
    40 MB to 733 MB. It is refused from Content-Length, or at the cap while chunks arrive."""
    process = psutil.Process(web.proc.pid)
    with web.client() as http:  # warm up: the login form has been read and answered once
        assert http.post("/login", data={"token": "wrong", "next": "/"}).status_code == 401
    before = process.memory_info().rss
    body = b"next=/&token=" + b"a" * (16 * MiB)
    for _ in range(3):
        assert post_unread(web.port, "/login", body, chunked).startswith(b"HTTP/1.1 413"), web.errors()
    grown = process.memory_info().rss - before
    assert grown < 4 * MiB, f"the web process grew by {grown / MiB:.1f} MiB"
    logged_in(web)  # a form of normal size still logs in
    assert "Traceback" not in web.errors()


def test_a_large_action_form_answers_413(web, api, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    answer = api.post("/api/tasks/t/1/delete", data={"next": "/", "pad": "x" * (64 * 1024)})
    assert answer.status_code == 413 and "KiB" in answer.json()["error"]
    assert client.get("t", 1).status == "delayed", "nothing done"
    assert api.post("/api/tasks/t/1/delete", data={"pad": "x" * 60_000}).json()["result"] == "deleted"


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# Cursors of another shape than delayd.web.cursors gives (the client's own, base64 JSON, among them): a JSON
# object raised KeyError, deep nesting RecursionError (500) when the API took that one (issue 24 #6).
FORGED = [b64('{"a": 1}'), b64("[" * 5000), b64("[0]"), "not base64!", "a", "%FF", "RUNNING", "running~", "running~1",
          "running~nan~t:1", "delayed~1~a\\b", "delayed~1~\\xfg", "failed~--1~t:1", "done",
          "failed~1~" + "x" * 2048]


def test_forged_cursors_answer_400(web, api, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    for cursor in FORGED:
        for path in ("/api/tasks", "/api/tasks?status=failed", "/tasks", "/api/topics/t/retry-failed"):
            method = api.post if "topics" in path else api.get
            answer = method(path, params={"cursor": cursor}, headers={"Accept": "text/html"})
            assert answer.status_code == 400, (cursor, path, answer.status_code, answer.text[-300:])
            assert "cursor" in answer.text
    for path in ("/api/schedules", "/schedules"):
        assert api.get(path, params={"cursor": "not base64!"}).status_code == 400
    assert api.post("/api/topics/t/retry-failed", params={"cursor": "running"}).status_code == 400, "failed only"
    assert "Traceback" not in web.errors()


def test_every_cursor_of_the_shape_is_a_place(api, client):
    """Issue 47: docs/openapi.json describes the cursor by a pattern, and the server takes every text it matches
    (a schema-valid cursor answered 400 before, as the client's base64 JSON could not be described). A place in
    another status's part of the list is before a status's part (its top) or after it (nothing more)."""
    client.add_many([{"topic": "t", "id": i, "call": "delayd.examples:echo", "delay": 600 + i} for i in range(3)])
    for cursor in ("running", "delayed~0~", "delayed~-inf~t:1", "delayed~1e+300~\\xff\\\\~", "deleted~inf~t:1",
                   "ok~12.5~\u00e9\u00e9", ""):
        assert api.get("/api/tasks", params={"cursor": cursor}).status_code == 200, cursor
    delayed = api.get("/api/tasks", params={"status": "delayed", "cursor": "running~5~x"}).json()["tasks"]
    assert [t["id"] for t in delayed] == ["0", "1", "2"], "a place among running tasks is before the delayed ones"
    after = api.get("/api/tasks", params={"status": "delayed", "cursor": "failed"}).json()
    assert (after["tasks"], after["cursor"], after["complete"]) == ([], None, True), "past the delayed ones"
    first = api.get("/api/tasks", params={"status": "delayed", "limit": 1}).json()
    assert first["cursor"].startswith("delayed~") and first["cursor"].endswith("~t:0"), first["cursor"]
    rest = api.get("/api/tasks", params={"status": "delayed", "cursor": first["cursor"]}).json()
    assert [t["id"] for t in rest["tasks"]] == ["1", "2"]


MALFORMED_COOKIES = ["\u00b2", "\u00b2.", "\u00b2." + "0" * 64, "1.\u00e9", "1." + "\u00e9" * 64, "9" * 5000 + ".ab",
                     "-1." + "0" * 64, "1." + "0" * 64, " 1." + "0" * 64, "1.." + "0" * 64, ".", "", "x" * 10_000]


def session_cookie(value: str) -> dict[str, bytes]:
    """The header of a session cookie, sent as its bytes (latin-1, as the server reads headers)."""
    return {"Cookie": b"delayd_session=" + value.encode("latin-1")}


def test_a_malformed_session_cookie_is_no_session(web):
    """Issue 24 #7: '²'.isdigit() is true and int('²') fails; a non-ASCII MAC made compare_digest raise."""
    with web.client() as http:
        for value in MALFORMED_COOKIES:
            assert http.get("/api/stats", headers=session_cookie(value)).status_code == 401, value
            assert http.get("/", headers=session_cookie(value)).status_code == 303, value
    assert "Traceback" not in web.errors()


def test_changing_the_token_ends_every_session(redis_url):
    """The session MAC is keyed by a hash of the token, so a new token revokes every cookie."""
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as first:
        http, _ = logged_in(first)
        cookie = http.cookies["delayd_session"]
        assert http.get("/api/stats").status_code == 200
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as again, again.client() as http:
        assert http.get("/api/stats", headers=session_cookie(cookie)).status_code == 200, "same token: still valid"
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN + "-new") as second, second.client() as http:
        assert http.get("/api/stats", headers=session_cookie(cookie)).status_code == 401


def test_only_messages_the_server_chose_are_shown(web, client):
    """?msg= was put on every page as given: a link could show made-up text on a trusted page."""
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    http, csrf = logged_in(web)
    made_up = "Your token expired: paste it at evil.example"
    assert made_up not in http.get("/", params={"msg": made_up}).text
    assert made_up not in http.get("/", params={"msg": made_up, "sig": "0" * 64}).text
    answer = http.post("/api/tasks/t/1/run", data={"csrf": csrf, "next": "/tasks/t/1"})
    shown = http.get(answer.headers["location"])
    assert "t:1 is due now" in shown.text
    signature = httpx.URL(answer.headers["location"]).params["sig"]
    assert made_up not in http.get("/", params={"msg": made_up, "sig": signature}).text, "bound to its message"


def login(http: httpx.Client, token: str, client_address: str) -> int:
    return http.post("/login", data={"token": token, "next": "/"},
                     headers={"X-Forwarded-For": client_address}).status_code


def test_wrong_tokens_from_one_address_are_refused_after_a_few(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_FORWARDED_ALLOW_IPS="127.0.0.1") as server, \
            server.client() as http:
        assert [login(http, f"guess-{i}", "203.0.113.5") for i in range(6)] == [401] * 5 + [429]
        refused = http.post("/login", data={"token": TOKEN}, headers={"X-Forwarded-For": "203.0.113.5"})
        assert refused.status_code == 429 and 0 < int(refused.headers["retry-after"]) <= 60, "even the right token"
        assert login(http, TOKEN, "203.0.113.6") == 303, "another address is not held back"
        bearer = [http.get("/api/stats", headers={"Authorization": f"Bearer guess-{i}",
                                                  "X-Forwarded-For": "203.0.113.7"}).status_code for i in range(6)]
        assert bearer == [401] * 5 + [429], "a Bearer token is a guess too"
        assert [login(http, f"guess-{i}", f"2001:db8::{i}") for i in range(6)] == [401] * 5 + [429], \
            "an IPv6 /64 is one"
        assert [login(http, "typo", "203.0.113.8") for i in range(8)] == [401] * 8, "one wrong token counts once"
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as server, server.client() as http:
        statuses = [login(http, f"guess-{i}", f"203.0.113.{i}") for i in range(6)]
        assert statuses == [401] * 5 + [429], "X-Forwarded-For of an untrusted peer is not believed"


def test_the_producer_token_resets_no_count_and_a_bad_producer_holds_back_no_one(redis_url, client):
    task = {"topic": "t", "id": 1, "call": "delayd.examples:echo", "delay": 600}
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_PRODUCER_TOKEN="pr0ducer") as server, \
            server.client() as http:
        def stats(token: str) -> int:
            return http.get("/api/stats", headers={"Authorization": f"Bearer {token}"}).status_code

        def add(token: str) -> int:
            return http.post("/api/tasks", json=task, headers={"Authorization": f"Bearer {token}"}).status_code

        guesses = []
        for round in range(3):  # 4 guesses at the dashboard token, then a good producer request
            guesses += [stats(f"guess-{round}-{i}") for i in range(4)]
            assert add("pr0ducer") == 201
        assert guesses[:5] == [401] * 5 and set(guesses[5:]) == {429}, guesses
        assert [add("stale-token") for _ in range(8)] == [401] * 8, "a misconfigured producer repeats one token"
        assert add("pr0ducer") == 201, "the good producer beside it is not held back"
        assert [add(f"guess-{i}") for i in range(5)] == [401] * 4 + [429], "the stale token and 4 others: 5"
        assert add("pr0ducer") == 429 and add(TOKEN) == 429, "guesses on a producer route hold back that route"
        assert http.post("/login", data={"token": TOKEN}).status_code == 303, "the login form counts on its own"
    assert client.count("t") == 1


def test_the_throttle_keeps_a_bounded_table_that_expires():
    from delayd.web.auth import LoginThrottle
    throttle = LoginThrottle(allowed=2, window=60.0, size=100)
    for i in range(10_000):
        throttle.failed(f"10.0.{i // 256}.{i % 256}", "login", "x", now=1000.0)
    assert len(throttle.failures) == 100
    throttle.failed("192.0.2.1", "login", "a", now=1000.0)
    throttle.failed("192.0.2.1", "login", "a", now=1010.0)
    assert throttle.wait("192.0.2.1", "login", now=1010.0) == 0.0, "the same wrong token counts once"
    throttle.failed("192.0.2.1", "login", "b", now=1030.0)
    assert throttle.wait("192.0.2.1", "login", now=1030.0) == 30.0
    assert throttle.wait("192.0.2.1", "dashboard", now=1030.0) == 0.0, "each kind is counted on its own"
    assert throttle.wait("192.0.2.1", "login", now=1060.0) == 0.0
    throttle.failed("192.0.2.2", "login", "a", now=1061.0)
    assert list(throttle.failures) == ["login 192.0.2.2"], "windows that are over are dropped"
    throttle.failed("::ffff:192.0.2.2", "login", "b", now=1062.0)
    assert throttle.wait("192.0.2.2", "login", now=1062.0) > 0, "an IPv4 client of a dual-stack bind is its IPv4"
    throttle.succeeded("192.0.2.2")
    assert throttle.wait("192.0.2.2", "login", now=1062.0) == 0.0
    assert throttle.key("2001:db8::1") == throttle.key("2001:db8::2") == "2001:db8::/64"


@pytest.mark.parametrize("trusted", ["127.0.0.1", "127.0.0.0/8", "10.0.0.1,::1,127.0.0.5/8", "*"])
def test_the_cookie_is_secure_behind_a_trusted_tls_proxy(redis_url, trusted):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_FORWARDED_ALLOW_IPS=trusted) as server, \
            server.client() as http:
        answer = http.post("/login", data={"token": TOKEN}, headers={"X-Forwarded-Proto": "https"})
        assert answer.status_code == 303 and "secure" in answer.headers["set-cookie"].lower()
        plain = http.post("/login", data={"token": TOKEN}, headers={"X-Forwarded-Proto": "http"})
        assert "secure" not in plain.headers["set-cookie"].lower()


def test_the_forwarded_scheme_of_an_untrusted_peer_is_ignored(redis_url):
    for env in ({}, {"DELAYD_WEB_FORWARDED_ALLOW_IPS": "10.0.0.0/8"}):
        with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, **env) as server, server.client() as http:
            answer = http.post("/login", data={"token": TOKEN}, headers={"X-Forwarded-Proto": "https"})
            assert answer.status_code == 303 and "secure" not in answer.headers["set-cookie"].lower()


def test_a_bad_forwarded_allow_ips_refuses_to_start(redis_url):
    from delayd import config
    with pytest.raises(config.ConfigError, match="web_forwarded_allow_ips: 'proxy.example' is not an IP"):
        config.load(env={"DELAYD_WEB_FORWARDED_ALLOW_IPS": "10.0.0.1,proxy.example"})


@pytest.mark.parametrize("ci", ["true", ""])
def test_under_ci_a_missing_browser_fails_the_browser_tests(tmp_path, ci):
    env = {**os.environ, "CI": ci, "DELAYD_CHROMIUM": str(tmp_path / "no-chromium"), "PATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(Path(__file__).with_name("test_web_browser.py"))], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    if ci:
        assert result.returncode != 0 and "CI=true and no chromium" in result.stdout, result.stdout
    else:
        assert "1 skipped" in result.stdout and "error" not in result.stdout, result.stdout
    assert "export CI=true" in (ROOT / ".ci" / "run").read_text()
