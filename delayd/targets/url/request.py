"""What one run of a URL task sends: method, URL, headers and body (SPEC section 6).

GET sends `params` as the query; POST as a form body, or JSON with `body="json"`.
Every request carries `Idempotency-Key: <topic>:<id>:<run>` and the User-Agent.
"""
from __future__ import annotations

import json
from typing import Any, NamedTuple
from urllib.parse import urlencode, urlsplit, urlunsplit

from delayd.model.task import Task
from delayd.version import __version__

USER_AGENT = f"delayd/{__version__}"


class Request(NamedTuple):
    method: str
    url: str          # already encoded: sent exactly as written
    headers: dict[str, str]
    body: bytes


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def form_items(params: dict) -> list[tuple[str, str]]:
    """`params` as (key, value) pairs for a query or a form body.

    Scalars are sent as text (True -> "true", None -> ""), a list of scalars as the key
    repeated, anything nested as compact JSON text.
    """
    items: list[tuple[str, str]] = []
    for key, value in params.items():
        if isinstance(value, list) and all(v is None or isinstance(v, (str, int, float)) for v in value):
            items.extend((str(key), _scalar(v)) for v in value)
        elif isinstance(value, (dict, list)):
            items.append((str(key), json.dumps(value, separators=(",", ":"), ensure_ascii=False)))
        else:
            items.append((str(key), _scalar(value)))
    return items


def with_query(url: str, items: list[tuple[str, str]]) -> str:
    """`url` with `items` appended to the query it already has (kept as written)."""
    if not items:
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(items)) if q)
    return urlunsplit(parts._replace(query=query, fragment=""))


def build(task: Task) -> Request:
    """The request of this run of `task` (task.runs is the run's number)."""
    headers = {"Idempotency-Key": f"{task.topic}:{task.id}:{task.runs}"}
    if task.method == "GET":
        return Request("GET", with_query(task.url or "", form_items(task.params)), headers, b"")
    if task.body == "json":
        body = json.dumps(task.params, separators=(",", ":"), ensure_ascii=False).encode()
        headers["Content-Type"] = "application/json"
    else:
        body = urlencode(form_items(task.params)).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    return Request(task.method, task.url or "", headers, body)

