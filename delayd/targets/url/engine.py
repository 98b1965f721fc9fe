"""The event loop of a queue process: URL deliveries (and async targets) on one thread.

`Engine.start(tickets, done)` runs each URL task's run on the loop (one wake-up of the
loop per batch) and calls `done(ticket, (Outcome, callback error))` on the loop's
thread when a run ends (None when it was cancelled). A delivery first waits for a slot on its host (`hosts`: per-host
cap and circuit breaker; an open circuit answers at once with a `defer` outcome), and
only then sends: the ticket's `started` and `deadline` are set at that moment, so the
task timeout counts from the request, not from the claim. The request itself has one
total deadline (task timeout or url_timeout) for connecting, sending and reading, so a
server that dribbles its answer cannot stretch it. aiohttp's session pools connections
per host; redirects are never followed, cookies never kept.

The cap of `url_concurrency` requests in flight is kept in one place: `room()`, which
the queue asks before it claims URL tasks. Tasks waiting for a saturated host are not
in flight (they hold back no other host), but at most url_concurrency of them are taken
on, so a process holds fewer than 2 x url_concurrency URL tasks.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import time
from typing import Any, Callable, Protocol

import aiohttp
from yarl import URL

from delayd import config as config_mod
from delayd import tracing
from delayd.config import Config
from delayd.model.origin import origin
from delayd.model.task import Task
from delayd.targets.handlers import Outcome, Runner, clip, describe_exception
from delayd.targets.url import answer, guard, proxy, request, signing
from delayd.targets.url.health import Health
from delayd.targets.url.hosts import Hosts

GRACE = 5.0  # seconds past a request's own deadline before the queue gives up on it (a backstop)
DNS_TTL = 10.0  # seconds a host name's addresses are kept (the connector's cache, the guard's)


class Ticket(Protocol):
    """What the queue hands over: the task, and what the engine sets on it."""

    task: Task
    limit: float      # seconds the whole run (request and callback) may take once sent
    started: float    # monotonic time the request was sent
    deadline: float   # started + limit: past it, the queue abandons the run
    delivery: asyncio.Task | None  # the run on the loop (set there): what cancel() cancels
    span: Any         # the run's span (delayd.tracing), its request's parent; None with tracing off


Done = Callable[[Any, tuple[Outcome, str] | None], None]


class Engine:
    def __init__(self, config: Config, runner: Runner | None = None):
        self.config = config
        self.runner = runner
        # The secrets that sign a task's requests: the default key's (url_signing_secret; none: unsigned),
        # or those of its signing_key (url_signing_keys, newest first; reread by a reload's new processes).
        self.default_keys = [config_mod.signing_key(config.url_signing_secret)] if config.url_signing_secret else []
        self.named_keys = {name: [config_mod.signing_key(secret) for secret in secrets]
                           for name, secrets in config.url_signing_keys}
        self.hosts = Hosts(int(config.url_host_concurrency), int(config.url_breaker_failures),
                           float(config.url_breaker_cooldown))
        self.health = Health()  # each request's outcome per host, until the queue reports it (delayd hosts)
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, config.concurrency), thread_name_prefix="url-callback"))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="url-loop")
        self.thread.start()
        self.proxies = proxy.Proxies.from_env()
        self.guard: guard.Guard | None = None  # url_deny_private (made on the loop, by _open)
        self.size = int(config.url_concurrency)
        self.given = 0  # tickets started (written by the caller's thread only) …
        self.ended = 0  # … and runs ended (the loop's thread only): given - ended are in hand
        self.session = asyncio.run_coroutine_threadsafe(self._open(), self.loop).result()
        if runner is not None:
            runner.loop = self.loop

    async def _open(self) -> aiohttp.ClientSession:
        if self.config.url_deny_private:
            self.guard = guard.Guard(self.proxies.hosts, DNS_TTL)
        # No connection limit of aiohttp's own: room() and the host caps bound what is in flight. No timeout of
        # its own either: a request's one deadline is _request's (its defaults, 300 s in all and 30 s to connect,
        # would cut a longer task timeout short, and cost two timers per request).
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=DNS_TTL,
                                         resolver=self.guard.resolver if self.guard is not None else None)
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                     headers={"User-Agent": request.USER_AGENT}, timeout=aiohttp.ClientTimeout())

    # -- the caller's thread (one thread: the queue's main thread) ---------------------------
    @property
    def in_hand(self) -> int:
        """Runs started and not ended yet (in flight, waiting for their host, or about to start)."""
        return self.given - self.ended

    def room(self) -> int:
        """URL tasks to take on now: url_concurrency less the runs in flight; tasks waiting for
        a saturated host do not count, but no more are taken while url_concurrency wait."""
        waiting = self.hosts.held
        return 0 if waiting >= self.size else max(0, self.size - (self.in_hand - waiting))

    def start(self, tickets: list[Ticket], done: Done) -> None:
        """Run each ticket's run on the loop; `done(ticket, (Outcome, callback error))` is called
        on the loop's thread when it ends, `done(ticket, None)` if it was cancelled (always after
        `in_hand` stopped counting it)."""
        self.given += len(tickets)
        self.loop.call_soon_threadsafe(self._start, tickets, done)

    def cancel(self, ticket: Ticket) -> None:
        """Give up `ticket`'s run (its host slot is released): `done(ticket, None)`, or its result
        if it ended first."""
        self.loop.call_soon_threadsafe(self._cancel, ticket)

    def close(self, timeout: float = 5.0) -> None:
        """Close the session and stop the loop (runs still going are cancelled)."""
        if not self.loop.is_running():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

    async def _close(self) -> None:
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await self.session.close()

    # -- the loop -----------------------------------------------------------------------
    def _start(self, tickets: list[Ticket], done: Done) -> None:
        for ticket in tickets:
            ticket.delivery = self.loop.create_task(self._deliver(ticket))
            ticket.delivery.add_done_callback(functools.partial(self._ended, ticket, done))

    def _cancel(self, ticket: Ticket) -> None:
        if ticket.delivery is not None:  # (None: it ended meanwhile)
            ticket.delivery.cancel()

    def _ended(self, ticket: Ticket, done: Done, delivery: asyncio.Task) -> None:
        self.ended += 1
        ticket.delivery = None
        if delivery.cancelled():
            done(ticket, None)
            return
        exc = delivery.exception()
        done(ticket, delivery.result() if exc is None else
             (Outcome("retry", f"internal error in delayd: {describe_exception(exc)}"), ""))

    async def _deliver(self, ticket: Ticket) -> tuple[Outcome, str]:
        task = ticket.task
        if task.signing_key is not None and task.signing_key not in self.named_keys:
            return Outcome("retry", f"signing key {task.signing_key!r} is not in url_signing_keys: not sent "
                                    "(add it to the config and reload)"), ""
        try:
            host = origin(task.url or "")
        except ValueError as exc:  # (a URL stored past the add gate)
            return Outcome("failed", f"url cannot be sent: {exc}"), ""
        wait = await self.hosts.acquire(host)
        if wait is not None:
            return Outcome("defer", f"circuit open for {host}: not sent, deferred {wait:.3g} s to the probe",
                           wait=wait), ""
        reachable: bool | None = None
        try:
            ticket.started = time.monotonic()
            ticket.deadline = ticket.started + ticket.limit + GRACE
            if ticket.span is None:
                outcome, reachable = await self._request(task)
            else:
                outcome, reachable = await self._traced(task, ticket.span)
        finally:
            self.hosts.release(host, reachable)
        self.health.record(host, outcome.kind == "ok", outcome.error, self.hosts.open_for(host))
        callback_error = ""
        if outcome.kind == "ok" and task.callback and self.runner is not None:
            with tracing.as_current(ticket.span):  # (to_thread copies this task's context to its thread)
                callback_error = await asyncio.to_thread(self.runner.run_callback, task)
        return outcome, callback_error

    async def _traced(self, task: Task, run_span: Any) -> tuple[Outcome, bool | None]:
        """_request in a child span of the run's, whose context the request carries (`traceparent`)."""
        req = request.build(task)
        with tracing.request_span(run_span, req.method, task.url or "", req.headers) as span:
            outcome, reachable = await self._request(task, req)
            if outcome.status:
                span.set_attribute("http.response.status_code", outcome.status)
            return outcome, reachable

    async def _request(self, task: Task, req: request.Request | None = None) -> tuple[Outcome, bool | None]:
        """One request (`req`, or the task's): (outcome, whether the host answered: True, False, or None unknown)."""
        timeout = float(task.timeout or self.config.url_timeout)
        cap = int(self.config.max_response_bytes)
        req = req or request.build(task)
        headers = req.headers
        keys = self.default_keys if task.signing_key is None else self.named_keys[task.signing_key]
        if keys:
            headers.update(signing.headers(keys, signing.message_id(task), int(time.time()), req.body))
        answered = False
        try:
            async with asyncio.timeout(timeout):
                url = URL(req.url, encoded=True)
                via = self.proxies.for_url(url)
                if self.guard is not None:
                    await self.guard.check(url, proxied=bool(via))
                async with self.session.request(req.method, url, data=req.body or None, headers=headers,
                                                allow_redirects=False, **via) as resp:
                    answered = True
                    body, over = await _read(resp, cap)
        except guard.Refused as exc:
            return Outcome("failed", f"refused: {exc}"), None
        except guard.Unresolved as exc:
            return Outcome("retry", f"connection failed: {exc}"), False
        except TimeoutError:
            phase = "reading the answer" if answered else "waiting for the answer"
            return Outcome("retry", f"timeout after {timeout:g} s {phase}"), answered
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.__cause__, guard.Refused) or isinstance(exc.os_error, guard.Refused):
                return Outcome("failed", f"refused: {exc.__cause__ or exc.os_error}"), None
            return Outcome("retry", f"connection failed: {_why(exc)}"), False
        except aiohttp.ClientConnectionError as exc:  # reset, disconnected before an answer
            return Outcome("retry", f"request failed: {type(exc).__name__}: {clip(str(exc))}"), answered
        except aiohttp.ClientError as exc:  # a malformed answer, an invalid URL…
            return Outcome("retry", f"request failed: {type(exc).__name__}: {clip(str(exc))}"), True
        except Exception as exc:  # a bug here must cost a retry, not the loop
            return Outcome("retry", f"internal error in delayd: {describe_exception(exc)}"), None
        ra = 0.0
        if resp.status in answer.RETRY_AFTER_STATUSES:
            ra = answer.retry_after(resp.headers.get("Retry-After"), float(self.config.url_retry_after_max))
        return answer.classify(resp.status, bytes(body), over, cap, resp.headers.get("Location", ""), ra), True


def _why(exc: aiohttp.ClientConnectorError) -> str:
    """`host:port: Connection refused` (the errno's text where there is one)."""
    errno = getattr(exc.os_error, "errno", None)
    reason = os.strerror(errno) if isinstance(errno, int) and errno > 0 else clip(str(exc.os_error) or str(exc))
    return f"{exc.host}:{exc.port}: {reason}"


async def _read(resp: aiohttp.ClientResponse, cap: int) -> tuple[bytearray, bool]:
    """At most `cap` bytes of the answer, and whether there was more."""
    body = bytearray()
    while len(body) <= cap:
        chunk = await resp.content.read(cap + 1 - len(body))
        if not chunk:
            break
        body += chunk
    over = len(body) > cap
    del body[cap:]
    return body, over

