"""The dashboard's HTTP surface: pages, the JSON API, login, and the rules every request passes.

Pages are rendered on the server by Jinja2 with autoescaping on, and every response
carries a Content-Security-Policy that allows only this server's own script and
style files: a `<script>` stored in a task's topic, id, params or error is shown as
text and could not run even if it reached the page unescaped.

Task and topic names may hold any character but spaces and control characters
(`/` too), so links percent-encode each path segment and the routes split the raw
path themselves (`segments`).

A request body is read only up to its limit (bodies.py), answered 413 beyond it. The
producer API (producers.py: POST /api/tasks, DELETE /api/tasks/TOPIC/ID) passes the same
rules, and its own token (producer_token) passes nothing else (producer_route).
"""
from __future__ import annotations

import contextlib
import json
import math
import urllib.parse
from importlib import resources
from typing import Any, AsyncIterator, Awaitable, Callable

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from delayd.client.async_client import AsyncClient
from delayd.client.browse import BadCursor
from delayd.client.errors import REDIS_ERRORS, DelaydError
from delayd.config import Config
from delayd.model.fields import SHOWN
from delayd.model.task import STATUSES, printable
from delayd.version import __version__
from delayd.web import actions, display, outage, params, producers, views
from delayd.web.auth import (
    COOKIE,
    SESSION_S,
    Auth,
    Identity,
    LoginThrottle,
    host_of,
    is_loopback,
)
from delayd.web.bodies import BodyTooLarge, read_body, read_form
from delayd.web.pages import Pages, Segments, list_params, raw_path, segments

HERE = resources.files(__package__)
OPENAPI_PATH = "/api/openapi.json"  # the HTTP API's OpenAPI document (delayd/web/openapi.json, docs/openapi.json)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
FAILURES = (DelaydError, *REDIS_ERRORS)
WRITES = ("POST", "DELETE")  # methods that change something: web_readonly, CSRF for cookie sessions


def producer_route(request: Request) -> bool:
    """What the producer token may do: POST /api/tasks, DELETE and GET /api/tasks/TOPIC/ID, and read the
    API's description (GET /api/openapi.json)."""
    path, method = raw_path(request), request.method
    if path == "/api/tasks":
        return method == "POST"
    if path == OPENAPI_PATH:
        return method == "GET"
    return method in ("GET", "DELETE") and path.startswith("/api/tasks/") and path.count("/") == 4


def local_next(value: str | None) -> str:
    """A redirect target that stays on this server."""
    return value if value and value.startswith("/") and not value.startswith("//") and "\\" not in value else "/"


class Dashboard(Pages):
    """The Starlette application and what its handlers share."""

    def __init__(self, config: Config, client: AsyncClient | None = None):
        self.config = config
        self.client = client or AsyncClient(config=config)
        self.auth = Auth(config.web_token, config.producer_token)
        self.throttle = LoginThrottle()
        self.commit = producers.GroupCommit(self.client)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                                      autoescape=True, undefined=jinja2.StrictUndefined, finalize=display.shown)
        self.env.globals.update(task_url=display.task_url, statuses=STATUSES, version=__version__,
                                readonly=config.web_readonly, page_size=views.PAGE_SIZE,
                                page_fields=[f.name for f in SHOWN if f.page])
        self.env.filters.update(when=display.when, seconds=display.span, ms=display.ms, seg=display.quote,
                                urlencode=lambda text: display.quote(text, safe=""))
        self.env.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
        guarded = self.guarded
        self.app = Starlette(routes=[
            Route("/", guarded(self.page_overview)),
            Route("/tasks", guarded(self.page_tasks)),
            Route("/tasks/{rest:path}", guarded(self.page_task)),
            Route("/schedules", guarded(self.page_schedules)),
            Route("/hosts", guarded(self.page_hosts)),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/favicon.ico", favicon),
            Route("/api/session", guarded(self.api_session)),
            Route(OPENAPI_PATH, guarded(self.api_openapi)),
            Route("/api/stats", guarded(self.api_stats)),
            Route("/api/tasks", guarded(self.api_tasks), methods=["GET", "POST"]),
            Segments("/api/tasks/", 2, guarded(self.api_task), methods=["GET", "DELETE"]),
            Segments("/api/tasks/", 3, guarded(self.api_task_action), methods=["POST"]),
            Route("/api/schedules", guarded(self.api_schedules)),
            Route("/api/hosts", guarded(self.api_hosts)),
            Route("/api/hosts/{rest:path}", guarded(self.api_host), methods=["POST"]),
            Route("/api/topics/{rest:path}", guarded(self.api_topic), methods=["POST"]),
            Route("/api/limits/{rest:path}", guarded(self.api_limit), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ], lifespan=self.lifespan, exception_handlers={HTTPException: self.no_route})
        self.app.add_middleware(_Headers)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.client.close()

    # -- the rules every request passes -----------------------------------------------
    def guarded(self, handler: Callable[[Request, Identity], Awaitable[Response]]) -> Callable:
        async def endpoint(request: Request) -> Response:
            api = request.url.path.startswith("/api/")
            if not self.auth.token and not is_loopback(host_of(request.headers.get("host", ""))):
                return self.refuse(request, 403, "without web_token this dashboard answers loopback host names only")
            authorization = request.headers.get("authorization")
            kind = "producer" if producer_route(request) else "dashboard"
            if authorization and (wait := self.throttle.wait(_address(request), kind)):
                return self.too_many_tries(request, wait)
            who = self.auth.identify(authorization, request.cookies.get(COOKIE))
            if authorization and who is None:
                self.throttle.failed(_address(request), kind, authorization)
            elif authorization and not who.producer:
                self.throttle.succeeded(_address(request))
            if who is None:
                if api or request.method != "GET":
                    return self.refuse(request, 401, "a valid token is needed (Authorization: Bearer TOKEN)",
                                       {"WWW-Authenticate": "Bearer"})
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse("/login?" + urllib.parse.urlencode({"next": target}), 303)
            if who.producer and not producer_route(request):
                return self.refuse(request, 403, "the producer token allows only POST /api/tasks, DELETE "
                                                 "and GET /api/tasks/TOPIC/ID, and GET " + OPENAPI_PATH)
            if who.how == "open" and request.method in WRITES and producer_route(request) \
                    and not request.headers.get("x-csrf-token"):  # (a producer, not this dashboard's page)
                return self.refuse(request, 401, "a producer sends its token: Authorization: Bearer TOKEN" + (
                    "" if self.auth.producer_token else " (set DELAYD_PRODUCER_TOKEN on this server)"),
                    {"WWW-Authenticate": "Bearer"})
            if request.method in WRITES:
                if self.config.web_readonly and not who.producer:
                    return self.refuse(request, 403, "this dashboard is read-only (web_readonly)")
                try:
                    form = await read_form(request)
                except BodyTooLarge as exc:
                    return self.refuse(request, 413, str(exc))
                request.state.form = form
                given = request.headers.get("x-csrf-token") or form.get("csrf")
                if who.needs_csrf and not self.auth.csrf_valid(given, request.cookies.get(COOKIE)):
                    return self.refuse(request, 403, "missing or wrong CSRF token; reload the page and try again")
            try:
                return await handler(request, who)
            except params.BadParam as exc:
                return self.refuse(request, 400, str(exc))
            except FAILURES as exc:
                return self.refuse(request, 503, outage.answer(exc, request.method in WRITES))
        return endpoint

    def refuse(self, request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        if request.url.path.startswith("/api/") or not _wants_html(request):
            return display.Json({"error": message}, status, headers=headers)
        return self.render(request, None, "error.html", {"status": status, "message": message}, status, headers)

    async def no_route(self, request: Request, exc: HTTPException) -> Response:
        """Starlette's own answers (no route matched, a method not routed) in this server's error shape."""
        return self.refuse(request, exc.status_code, f"{exc.detail}: {request.method} {request.url.path!r}",
                           dict(exc.headers or {}))

    def too_many_tries(self, request: Request, wait: float) -> Response:
        seconds = str(math.ceil(wait))
        return self.refuse(request, 429, f"too many wrong tokens from this address: try again in {seconds} s",
                           {"Retry-After": seconds})

    def flash(self, request: Request) -> str:
        """The page's message (?msg=), shown only when this server signed it (?sig=, see act): a
        link cannot put words of its own on a trusted page."""
        message = request.query_params.get("msg", "")
        return message if message and self.auth.flash_valid(message, request.query_params.get("sig", "")) else ""

    def render(self, request: Request, who: Identity | None, name: str, context: dict[str, Any],
               status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
        cookie = request.cookies.get(COOKIE)
        body = self.env.get_template(name).render(
            **context, request_path=request.url.path, query=request.query_params, who=who,
            csrf=self.auth.csrf_for(cookie) if who is not None and who.needs_csrf else "",
            logged_in=who is not None and who.how == "cookie", flash=self.flash(request))
        return HTMLResponse(body, status, headers=headers)

    # -- login ------------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        target = local_next(request.query_params.get("next"))
        if not self.auth.token:
            return RedirectResponse(target, 303)
        if request.method == "GET":
            return self.render(request, None, "login.html", {"next": target, "wrong": False})
        if wait := self.throttle.wait(_address(request), "login"):
            return self.too_many_tries(request, wait)
        try:
            form = await read_form(request)
        except BodyTooLarge as exc:
            return self.refuse(request, 413, str(exc))
        target = local_next(form.get("next") or target)
        if not self.auth.token_matches(form.get("token", "")):
            self.throttle.failed(_address(request), "login", form.get("token", ""))
            return self.render(request, None, "login.html", {"next": target, "wrong": True}, 401)
        self.throttle.succeeded(_address(request))
        response = RedirectResponse(target, 303)
        response.set_cookie(COOKIE, self.auth.new_session(), max_age=SESSION_S, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login" if self.auth.token else "/", 303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # -- API --------------------------------------------------------------------------
    async def api_session(self, request: Request, who: Identity) -> Response:
        """How this request is authorised, the CSRF token a cookie session must send, and read-only."""
        csrf = self.auth.csrf_for(request.cookies.get(COOKIE)) if who.needs_csrf else None
        return display.Json({"auth": who.how, "csrf": csrf, "readonly": self.config.web_readonly,
                             "version": __version__})

    async def api_openapi(self, request: Request, who: Identity) -> Response:
        """The OpenAPI 3.1 document of this API, as the package ships it."""
        return Response((HERE / "openapi.json").read_bytes(), media_type="application/json")

    async def api_stats(self, request: Request, who: Identity) -> Response:
        return display.Json(views.public(await views.overview(self.client)))

    async def api_tasks(self, request: Request, who: Identity) -> Response:
        if request.method == "POST":
            return await self.api_add(request)
        try:
            return display.Json(await views.listing(self.client, *list_params(request), page_size(request)))
        except ValueError as exc:  # (a status or cursor views.listing refuses)
            return self.refuse(request, 400, str(exc))

    async def api_hosts(self, request: Request, who: Identity) -> Response:
        return display.Json({"hosts": await views.hosts(self.client)})

    async def api_schedules(self, request: Request, who: Identity) -> Response:
        topic, _, q, cursor = list_params(request)
        try:
            return display.Json(await views.schedule_list(self.client, topic, q, cursor, page_size(request)))
        except BadCursor as exc:
            return self.refuse(request, 400, str(exc))

    async def api_add(self, request: Request) -> Response:
        """POST /api/tasks (producers.py)."""
        if not producers.is_json(request.headers.get("content-type", "")):
            return self.refuse(request, 415, "POST /api/tasks takes JSON: send Content-Type: application/json")
        try:
            body = await read_body(request, producers.MAX_BODY)
        except BodyTooLarge as exc:
            return self.refuse(request, 413, str(exc))
        try:
            return display.Json(*await producers.add(self.client, body, self.commit,
                                                     producers.incoming_trace(request.headers)))
        except producers.BadInput as exc:
            return display.Json(exc.answer(), exc.status)

    async def api_task(self, request: Request, who: Identity) -> Response:
        """GET and DELETE /api/tasks/TOPIC/ID."""
        topic, id = segments(request, "/api/tasks/")
        if request.method == "GET":
            if who.producer:  # a producer reads what `delayd get --json` prints, not the dashboard's view
                return display.Json(*await producers.get(self.client, topic, id))
            data = await views.detail(self.client, topic, id)
            return display.Json(data) if data else self.refuse(request, 404, f"not found: {topic}:{id}")
        hard = params.given(request, "hard", params.flag, False, form=False)
        return display.Json(*await producers.delete(self.client, topic, id, hard=hard))

    async def api_task_action(self, request: Request, who: Identity) -> Response:
        """POST /api/tasks/TOPIC/ID/{run,retry,delete}."""
        hard = params.given(request, "hard", params.flag, False)
        return await self.act(request, actions.task_action, self.client, *segments(request, "/api/tasks/"), hard=hard)

    async def api_topic(self, request: Request, who: Identity) -> Response:
        parts = segments(request, "/api/topics/")
        if len(parts) != 2:
            return self.refuse(request, 404, "use POST /api/topics/TOPIC/{pause,resume,retry-failed}")
        cursor = params.given(request, "cursor", params.failed_cursor, None)
        return await self.act(request, actions.topic_action, self.client, *parts, cursor=cursor)

    async def api_host(self, request: Request, who: Identity) -> Response:
        """POST /api/hosts/HOST/{disable,enable,replay}: what the form body says (HOST empty: its `host`)."""
        parts = segments(request, "/api/hosts/")
        named = params.given(request, "host", params.host, "", query=False)
        replay = params.replay(request) if parts[-1] == "replay" else None
        if len(parts) != 2 or not (parts[0] or named):
            return self.refuse(request, 404, "use POST /api/hosts/HOST/{disable,enable,replay} (HOST percent-encoded; "
                                             "replay with since=TIME, status=failed|ok|all, dry_run=1)")
        host = params.host("host", parts[0]) if parts[0] else named
        return await self.act(request, actions.host_action, self.client, host, parts[1], replay)

    async def api_limit(self, request: Request, who: Identity) -> Response:
        """POST /api/limits/TOPIC: what the form body says (TOPIC empty: its `topic`, as the overview's form)."""
        parts = segments(request, "/api/limits/")
        named = params.given(request, "topic", params.topic, "", query=False)
        limit = params.limit(request)
        if len(parts) != 1 or not (parts[0] or named):
            return self.refuse(request, 404,
                               "use POST /api/limits/TOPIC with rate=N/s and/or concurrency=K, or clear=1")
        return await self.act(request, actions.limit_action, self.client, parts[0] or named, limit)

    async def act(self, request: Request, action: Callable[..., Awaitable[dict[str, Any]]], *args: Any,
                  **kwargs: Any) -> Response:
        """Run an action; a form post is sent back to its page with the outcome, an API call gets JSON."""
        try:
            result = await action(*args, **kwargs)
        except actions.ActionError as exc:
            return self.refuse(request, exc.status, str(exc))
        if "next" in request.state.form:
            target = local_next(request.state.form["next"])
            joiner = "&" if "?" in target else "?"
            message = printable(result["message"])
            return RedirectResponse(target + joiner + urllib.parse.urlencode(
                {"msg": message, "sig": self.auth.flash_signature(message)}), 303)
        return display.Json(result)


async def favicon(request: Request) -> Response:
    """The browser's tab icon, asked for on every page (the login page too), so served without auth."""
    return FileResponse(str(HERE / "static" / "favicon.ico"), media_type="image/x-icon",
                        headers={"Cache-Control": "max-age=86400"})


class _Headers:
    """Adds SECURITY_HEADERS to every response (pure ASGI middleware)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.lower().encode() not in present:
                        headers.append((name.lower().encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)
        await self.app(scope, receive, send_with_headers)


def page_size(request: Request) -> int:
    """?limit= of a list: 1 to 200 rows (default PAGE_SIZE); BadParam for another value."""
    return params.given(request, "limit", lambda name, text: params.whole(name, text, 1, 200), views.PAGE_SIZE)


def _address(request: Request) -> str | None:
    """The client's address: the peer's, or the one a trusted proxy forwarded (web_forwarded_allow_ips)."""
    return request.client.host if request.client else None


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def create(config: Config) -> Starlette:
    """The ASGI application for `config`."""
    return Dashboard(config).app
