"""The dashboard's HTML pages (overview, tasks, a task, schedules, hosts), each rendered from what
views.py reads: a mixin of Dashboard (app.py, which routes to them and gives them `client`, `render`
and `refuse`); and how a request names what it asks for (its raw path's segments, the list
parameters), which the JSON API reads the same way.
"""
from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from delayd.client.async_client import AsyncClient
from delayd.client.browse import BadCursor
from delayd.config import Config
from delayd.web import display, views
from delayd.web.auth import Identity


def raw_path(request: Request) -> str:
    """The path as sent, still percent-encoded (a `/` inside a name is `%2F`)."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("latin-1").partition("?")[0]


def segments(request: Request, prefix: str) -> list[str]:
    """The percent-decoded segments of the raw path after `prefix` ('/tasks/')."""
    return [display.unquote(part) for part in raw_path(request)[len(prefix):].split("/")]


class Pages:
    """The pages of Dashboard (delayd.web.app)."""

    client: AsyncClient
    config: Config
    render: Any
    refuse: Any

    async def page_overview(self, request: Request, who: Identity) -> Response:
        data = await views.overview(self.client)
        return self.render(request, who, "overview.html", {"s": data, "charts": data["_charts"]})

    async def page_tasks(self, request: Request, who: Identity) -> Response:
        params = list_params(request)
        try:
            data = await views.listing(self.client, *params)
        except ValueError as exc:
            return self.refuse(request, 400, str(exc))
        topics = await self.client.topics()
        return self.render(request, who, "tasks.html", {"d": data, "topic": params[0], "status": params[1] or "",
                                                        "q": params[2], "topics": topics})

    async def page_task(self, request: Request, who: Identity) -> Response:
        parts = segments(request, "/tasks/")
        if len(parts) != 2:
            return self.refuse(request, 404, "no such page: tasks are at /tasks/TOPIC/ID")
        data = await views.detail(self.client, *parts)
        if data is None:
            return self.refuse(request, 404, f"not found: {parts[0]}:{parts[1]}")
        trace = display.trace_context(data.get("_trace"), self.config.web_trace_url)
        return self.render(request, who, "task.html", {"t": data, "trace": trace})

    async def page_schedules(self, request: Request, who: Identity) -> Response:
        topic, _, q, cursor = list_params(request)
        try:
            data = await views.schedule_list(self.client, topic, q, cursor)
        except BadCursor as exc:
            return self.refuse(request, 400, str(exc))
        return self.render(request, who, "schedules.html", {"d": data, "topic": topic, "q": q})

    async def page_hosts(self, request: Request, who: Identity) -> Response:
        return self.render(request, who, "hosts.html", {"hosts": await views.hosts(self.client)})


def list_params(request: Request) -> tuple[str, str | None, str, str | None]:
    q = request.query_params
    return q.get("topic", "").strip(), q.get("status") or None, q.get("q", "").strip(), q.get("cursor") or None


def limit_param(request: Request, default: int) -> int:
    """?limit=, clamped to 1..200; ValueError if it is not a whole number in ASCII digits."""
    text = request.query_params.get("limit")
    if text and not (text.isascii() and text.isdigit()):
        raise ValueError(f"limit must be a whole number, got {text!r}")
    return min(200, max(1, int(text))) if text else default
