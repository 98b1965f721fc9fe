"""URL test helpers: a real stdlib HTTP server on loopback (the `http` fixture), a real
forwarding HTTP proxy (the `proxy` fixture), and engines that deliver a task and return
its Outcome (the `make_engine` fixture)."""
from __future__ import annotations

import concurrent.futures
import contextlib
import email.utils
import math
import socket
import threading
import time
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.abc import AbstractResolver

from delayd import Task
from delayd.config import Config
from delayd.targets.handlers import Outcome, Runner
from delayd.targets.url.engine import Engine

BIG = 10 * 1024 * 1024

# Paths answered the same way every time: (status, body[, headers]).
FIXED_ANSWERS: dict[str, tuple] = {
    "/success": (200, "success"),
    "/echo": (200, "success"),
    "/padded": (200, "  SUCCESS \r\n"),
    "/bom": (200, "\ufeffsuccess\n"),
    "/fail": (200, "FAIL\n"),
    "/garbage": (200, "ok, thanks!"),
    "/empty": (200, ""),
    "/error": (500, "internal oops\n" + "y" * 1000),
    "/fail500": (500, "fail"),
    "/redirect": (302, "moved", {"Location": "/success"}),
    "/cookie": (200, "success", {"Set-Cookie": "session=s3cret; Path=/"}),
    "/long-success": (200, "success" + " " * 100),
}


class Ticket:
    """What the queue hands the engine (delayd.targets.url.engine.Ticket)."""

    def __init__(self, task: Task, limit: float = 60.0):
        self.task, self.limit, self.started, self.deadline = task, limit, 0.0, math.inf
        self.delivery = self.span = None


def begin(engine: Engine, task: Task) -> concurrent.futures.Future:
    """Start `task`'s run on `engine`: a Future of (Outcome, callback error)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    engine.start([Ticket(task)], lambda ticket, result: future.set_result(result))
    return future


@pytest.fixture
def make_engine():
    """make_engine(**config options) -> deliver(task) -> Outcome (callback errors: deliver.full;
    deliver.begin(task): a Future of both, without waiting)."""
    engines = []

    def make(**options):
        config = Config(**{"allowed_modules": ("handlers_fixture",), "url_timeout": 5.0, **options})
        engine = Engine(config, Runner(config, None))
        engines.append(engine)

        def deliver(task: Task) -> Outcome:
            return begin(engine, task).result(60)[0]

        deliver.engine = engine
        deliver.begin = lambda task: begin(engine, task)
        deliver.full = lambda task: begin(engine, task).result(60)
        return deliver

    yield make
    for engine in engines:
        engine.close()


# -- a real HTTP server --------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 50 clients connect at once in the concurrency test

    def process_request(self, request, client_address):
        """Remember the connection, so that a stop closes it (a kept-alive one would go on being served)."""
        with self.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


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
                                 "headers": {k.lower(): v for k, v in self.headers.items()}, "t": time.time()})
            srv.ports.append(self.client_address[1])
        path = parts.path
        seconds = float(query.get("seconds", ["0.3"])[0])
        if path in FIXED_ANSWERS:
            self._answer(*FIXED_ANSWERS[path])
        elif path == "/flaky":  # 500 until the run (Idempotency-Key's last part) reaches ?succeed_on=N
            run = int(self.headers.get("Idempotency-Key", "::0").rpartition(":")[2] or 0)
            self._answer(*((200, "success") if run >= int(query["succeed_on"][0]) else (500, "not yet")))
        elif path == "/hang":
            srv.stop.wait(10)  # far past any timeout used below
            self._answer(200, "success")
        elif path == "/slow":
            srv.stop.wait(seconds)
            self._answer(200, "success")
        elif path == "/busy":  # like /slow, counting the requests in flight at once (srv.peak)
            with srv.lock:
                srv.active += 1
                srv.peak = max(srv.peak, srv.active)
            srv.stop.wait(seconds)
            with srv.lock:
                srv.active -= 1
            self._answer(200, "success")
        elif path == "/429":  # Retry-After as given (sent UTF-8): ?after=SECONDS or ?after=date:SECONDS (an HTTP date)
            after = query["after"][0]
            if after.startswith("date:"):
                after = email.utils.formatdate(time.time() + float(after[5:]), usegmt=True)
            self._answer(int(query.get("status", ["429"])[0]), "slow down",
                         {"Retry-After": after.encode().decode("latin-1")})  # (send_header writes latin-1)
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


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler], port: int = 0):
    """A _Server with `handler` on 127.0.0.1 (on `port`, 0: a free one) in a thread: requests,
    lock, stop, base URL."""
    srv = _Server(("127.0.0.1", port), handler)
    srv.lock, srv.stop, srv.requests, srv.ports, srv.connections = threading.Lock(), threading.Event(), [], [], set()
    srv.active = srv.peak = 0
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.stop.set()
        srv.shutdown()
        srv.server_close()
        srv.close_connections()
        thread.join(5)


@pytest.fixture
def http():
    with _serving(_Handler) as srv:
        yield srv


# -- a real forwarding proxy -------------------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "content-length"}


class _ProxyHandler(BaseHTTPRequestHandler):
    """A forwarding HTTP proxy: an absolute-form request (`GET http://host:port/path`) is sent on
    to that host and port, or to the address `server.routes` maps `host:port` to (a public
    address standing for a local server), and its answer relayed. Requests seen: server.requests."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        target = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        with srv.lock:
            srv.requests.append(self.path)
        host, port = srv.routes.get(f"{target.hostname}:{target.port or 80}", (target.hostname, target.port or 80))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = HTTPConnection(host, port, timeout=10)
        try:
            upstream.request(self.command, target.path + (f"?{target.query}" if target.query else ""),
                             body=body, headers=headers)
            answer = upstream.getresponse()
            status, answer_headers, data = answer.status, answer.getheaders(), answer.read()
        except OSError as exc:
            status, answer_headers, data = 502, [], f"proxy: {exc}".encode()
        finally:
            upstream.close()
        self.send_response(status)
        for name, value in answer_headers:
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET


@pytest.fixture
def proxy():
    """A forwarding proxy on 127.0.0.1 (proxy.base); proxy.routes: {"host:port": (address, port)}."""
    with _serving(_ProxyHandler) as srv:
        srv.routes = {}
        yield srv


class StaticNames(AbstractResolver):
    """A name service answering from a dict (name -> addresses), as a hosts file would: the one
    way to give a test name an address of the test's choosing (NAT64, a public one) without
    root. Put in place of the guard's resolver (engine.guard.resolver.inner); names looked up
    are in `lookups`."""

    def __init__(self, names: dict[str, list[str]]):
        self.names, self.lookups = names, []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list:
        self.lookups.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [{"hostname": host, "host": address, "port": port, "proto": 0,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                 "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV} for address in self.names[host]]

    async def close(self) -> None:
        pass
