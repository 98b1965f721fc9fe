"""Run a real `delayd web` process for tests, and a plain HTTP client for it."""
from __future__ import annotations

import os
import subprocess
import tempfile

import httpx
from daemon_helper import DELAYD
from redis_server import free_port, wait_for

TOKEN = "t0ken-for-tests-only"  # the dashboard's web_token in tests
REQUESTS_SENT = "schemathesis_requests"  # a user property of tests/web/test_openapi_fuzz.py's reports


def answers(base: str) -> bool:
    try:
        return httpx.get(base + "/static/app.css", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


class Web:
    """`delayd web --port N` on the test's Redis, with extra DELAYD_* variables."""

    def __init__(self, redis_url: str, *args: str, **env: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DELAYD_REDIS_URL": redis_url, **env}
        self.args = args
        self.proc: subprocess.Popen | None = None
        # stderr goes to a file, not a pipe: nobody reads a pipe while the server runs, and a
        # full one (64 KiB of error logs) would block the server.
        self.stderr = tempfile.TemporaryFile("w+")

    def start(self) -> "Web":
        self.proc = subprocess.Popen([*DELAYD, "web", "--port", str(self.port), *self.args], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr, text=True)
        wait_for(lambda: self.proc.poll() is not None or answers(self.base), 30, message="delayd web answering")
        assert self.proc.poll() is None, self.errors()
        return self

    def errors(self) -> str:
        """What the server wrote to stderr so far (its log: errors and tracebacks)."""
        self.stderr.seek(0)
        return self.stderr.read()

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=10.0, **kwargs)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Web":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def logged_in(web: "Web") -> tuple[httpx.Client, str]:
    """A client with the login cookie (and no Bearer token): (client, csrf token)."""
    http = web.client()
    answer = http.post("/login", data={"token": TOKEN, "next": "/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    csrf = http.get("/api/session").json()["csrf"]
    return http, csrf
