"""What each page and GET /api/... shows, read from Redis (pages and API share these)."""
from __future__ import annotations

import json
import math
import time
from typing import Any

import redis

from delayd.client.sync_client import Client
from delayd.model.task import STATUSES, Task, TaskError
from delayd.store import connection
from delayd.store.keys import wire
from delayd.web import browse, charts, schedules, series

PAGE_SIZE = 50


def overview(client: Client) -> dict[str, Any]:
    """GET /api/stats: delayd.store.stats as `delayd stats --json` has it, with the live daemons, the
    paused topics and the last hour per minute."""
    stats = client.stats()
    minutes = series.last_hour(client.store)
    return {**stats, "daemons": client.daemons(),
            "last_hour": [{"start": m.start, **m.events} for m in minutes],
            "_charts": charts.hour_charts(minutes)}


def public(data: dict[str, Any]) -> dict[str, Any]:
    """The JSON part of a view (keys starting with _ are for the templates)."""
    return {k: v for k, v in data.items() if not k.startswith("_")}


def task_dict(task: Task) -> dict[str, Any]:
    """A task as `delayd get --json` prints it, with a password in its URL masked."""
    data = task.to_dict()
    if data.get("url"):
        data["url"] = connection.redact(data["url"])
    return data


def listing(client: Client, topic: str, status: str | None, q: str, cursor: str | None,
            limit: int = PAGE_SIZE) -> dict[str, Any]:
    """GET /api/tasks: one page, and the task named exactly topic:q if there is one."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}")
    found = browse.page(client.store, status, topic, q, cursor, limit, default_retries=client.config.retries)
    exact = None
    if topic and q and not cursor:
        try:
            task = client.get(topic, q)
        except TaskError:
            task = None
        if task is not None and (status is None or task.status == status):
            exact = task_dict(task)
    rows = [{"key": r.member, "topic": r.member.rpartition(":")[0], "id": r.member.rpartition(":")[2],
             "status": r.task.status if r.task else r.status, "index": r.status,
             "index_at": r.score / 1000 if math.isfinite(r.score) else None,
             "task": task_dict(r.task) if r.task else None, "corrupt": r.error} for r in found.rows]
    return {"tasks": rows, "cursor": found.cursor, "exact": exact, "examined": found.examined,
            "indexed": found.indexed, "complete": found.cursor is None, "problems": found.problems}


def detail(client: Client, topic: str, id: str) -> dict[str, Any] | None:
    """GET /api/tasks/<topic>/<id>: every field, the raw record and any quarantine reason; None if missing."""
    member = f"{topic}:{id}"
    keys = client.store.keys_for(member)
    try:
        record = client.redis.hgetall(keys.task(member))
    except redis.exceptions.ResponseError:  # WRONGTYPE: a key that is no record
        kind = client.redis.type(keys.task(member))
        return {"topic": topic, "id": id, "key": member, "task": None, "record": {}, "quarantined": None,
                "corrupt": f"the record's key is a {kind}, not a hash", "bucket": keys.bucket, "ttl_s": None}
    if not record:
        return None
    try:
        quarantine = client.redis.hget(keys.quarantine, wire(member))
    except redis.exceptions.ResponseError:
        quarantine = None  # the quarantine hash is not a hash: the scripts set it aside on their next write
    try:
        read = Task.from_record(member, record, client.config.retries)
        task, error, retries = task_dict(read), None, read.describe_retries(time.time())
    except TaskError as exc:
        task, error, retries = None, str(exc), None
    raw = dict(sorted(record.items()))
    if task and task.get("url") and "spec" in raw:
        raw["spec"] = json.dumps({**json.loads(raw["spec"]), "url": task["url"]}, separators=(",", ":"))
    return {"topic": topic, "id": id, "key": member, "task": task, "corrupt": error, "record": raw,
            "quarantined": quarantine, "bucket": keys.bucket, "ttl_s": _ttl(client, keys.task(member)),
            "_retries": retries}


def _ttl(client: Client, key: str) -> float | None:
    ms = client.redis.pttl(key)
    return ms / 1000 if ms and ms > 0 else None


def schedule_list(client: Client, topic: str, q: str, cursor: str | None,
                  limit: int = schedules.PAGE_SIZE) -> dict[str, Any]:
    """GET /api/schedules: one page of recurring tasks, in name order, with their next and last runs."""
    found = schedules.page(client.store, topic, q, cursor, limit)
    paused = schedules.paused_topics(client.store)
    return {"schedules": [schedules.to_dict(row, paused) for row in found.rows], "cursor": found.cursor,
            "problems": found.problems}
