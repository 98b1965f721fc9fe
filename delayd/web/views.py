"""What each page and GET /api/... shows, read through the AsyncClient (pages and API share these)."""
from __future__ import annotations

import json
import math
import time
from typing import Any

from delayd.client.async_client import AsyncClient
from delayd.client.browse import Page
from delayd.client.schedules import PAGE_SIZE as SCHEDULES_PAGE_SIZE
from delayd.client.schedules import Schedule
from delayd.model.task import STATUSES, Task, TaskError
from delayd.web import charts, cursors

PAGE_SIZE = 50


async def overview(client: AsyncClient) -> dict[str, Any]:
    """GET /api/stats: delayd.store.stats as `delayd stats --json` has it, with the live daemons, the
    paused topics and the last hour per minute."""
    stats = await client.stats()
    minutes = await client.last_hour()
    return {**stats, "daemons": await client.daemons(),
            "last_hour": [{"start": m.start, **m.events} for m in minutes],
            "_charts": charts.hour_charts(minutes)}


def public(data: dict[str, Any]) -> dict[str, Any]:
    """The JSON part of a view (keys starting with _ are for the templates)."""
    return {k: v for k, v in data.items() if not k.startswith("_")}


def task_dict(client: AsyncClient, task: Task) -> dict[str, Any]:
    """A task as `delayd get --json` prints it, with a password in its URL masked."""
    data = task.to_dict()
    if data.get("url"):
        data["url"] = client.redact(data["url"])
    return data


async def listing(client: AsyncClient, topic: str, status: str | None, q: str, cursor: str | None,
                  limit: int = PAGE_SIZE) -> dict[str, Any]:
    """GET /api/tasks: one page, and the task named exactly topic:q if there is one. `cursor` as
    delayd.web.cursors gives it: BadCursor (a ValueError) for another shape."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}")
    where, past = cursors.place(cursor) if cursor else None, False
    if where is not None and status is not None and where.source != (part := cursors.STATUSES.index(status)):
        where, past = None, where.source > part  # another status's part: this one from its top, or nothing more
    found = Page([], None, 0, 0, []) if past else await client.browse(
        status, topic, q, cursors.for_client(where) if where else None, limit)
    exact = None
    if topic and q and not cursor:
        try:
            task = await client.get(topic, q)
        except TaskError:
            task = None
        if task is not None and (status is None or task.status == status):
            exact = task_dict(client, task)
    rows = [{"key": r.member, "topic": r.member.rpartition(":")[0], "id": r.member.rpartition(":")[2],
             "status": r.task.status if r.task else r.status, "index": r.status,
             "index_at": r.score / 1000 if math.isfinite(r.score) else None,
             "task": task_dict(client, r.task) if r.task else None, "corrupt": r.error} for r in found.rows]
    return {"tasks": rows, "cursor": cursors.shown(found.cursor), "exact": exact, "examined": found.examined,
            "indexed": found.indexed, "complete": found.cursor is None, "problems": found.problems}


async def detail(client: AsyncClient, topic: str, id: str) -> dict[str, Any] | None:
    """GET /api/tasks/<topic>/<id>: every field, the raw record and any quarantine reason; None if missing."""
    found = await client.inspect(topic, id)
    if found is None:
        return None
    member = f"{topic}:{id}"
    if found.kind is not None:  # a key that is no record
        return {"topic": topic, "id": id, "key": member, "task": None, "record": {}, "quarantined": None,
                "corrupt": f"the record's key is a {found.kind}, not a hash", "bucket": found.bucket, "ttl_s": None}
    read = found.read
    task = task_dict(client, read.task) if read.task else None
    retries = read.task.describe_retries(time.time()) if read.task else None
    raw = dict(sorted(read.record.items()))
    if task and task.get("url") and "spec" in raw:
        raw["spec"] = json.dumps({**json.loads(raw["spec"]), "url": task["url"]}, separators=(",", ":"))
    return {"topic": topic, "id": id, "key": member, "task": task, "corrupt": read.error, "record": raw,
            "quarantined": found.quarantined, "bucket": found.bucket, "ttl_s": found.ttl_s, "_retries": retries,
            "_trace": read.task.trace if read.task else None}


async def schedule_list(client: AsyncClient, topic: str, q: str, cursor: str | None,
                        limit: int = SCHEDULES_PAGE_SIZE) -> dict[str, Any]:
    """GET /api/schedules: one page of recurring tasks, in name order, with their next and last runs."""
    found = await client.schedules(topic, q, cursor, limit)
    paused = set(await client.paused())
    return {"schedules": [schedule_dict(row, paused) for row in found.rows], "cursor": found.cursor,
            "problems": found.problems}


def schedule_dict(row: Schedule, paused: set[str]) -> dict[str, Any]:
    """A row as GET /api/schedules has it (times in Unix seconds)."""
    topic, _, id = row.member.rpartition(":")
    task = row.task
    data: dict[str, Any] = {"key": row.member, "topic": topic, "id": id, "paused": topic in paused,
                            "status": None, "corrupt": row.error}
    if task is not None:
        data.update(status=task.status, schedule=task.describe_schedule(), every=task.every, cron=task.cron,
                    tz=task.tz, persistent=task.persistent, runs=task.runs,
                    next_due_at=task.due_at if task.status in ("delayed", "running") else None,
                    last_due_at=task.last_due_at, last_run_at=task.last_run_at, last_error=task.last_error)
    return data


async def hosts(client: AsyncClient) -> list[dict[str, Any]]:
    """GET /api/hosts: the URL hosts delivered to in the last day, disabled or with tasks waiting, and their health
    (tasks_waiting: their URL tasks still to be delivered), failing ones first."""
    return [host.to_dict() for host in await client.hosts()]
