"""What the dashboard's buttons and POST /api/... do, through the Client's own methods.

Each function returns a JSON-able dict with a `message` for the page, or raises
ActionError with the HTTP status to answer.
"""
from __future__ import annotations

from typing import Any

from delayd.client.errors import Overtaken
from delayd.client.sync_client import Client
from delayd.model.task import TaskError
from delayd.web import browse

RETRY_BATCH = 200  # failed tasks put back per request of "retry all failed"


class ActionError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def task_action(client: Client, topic: str, id: str, action: str, hard: bool = False) -> dict[str, Any]:
    key = f"{topic}:{id}"
    try:
        if action == "retry":
            if not client.retry(topic, id):
                raise ActionError(404, f"not found: {key}")
            return {"result": "retrying", "message": f"{key} will run again now"}
        if action == "delete":
            if not client.delete(topic, id, hard=hard):
                raise ActionError(404, f"not found: {key}")
            return {"result": "removed" if hard else "deleted", "hard": hard,
                    "message": f"{key} {'removed with every trace' if hard else 'deleted: it never runs again'}"}
        if action == "run":
            if not client.run_now(topic, id):
                raise ActionError(404, f"not found: {key}")
            return {"result": "due_now", "message": f"{key} is due now"}
    except TaskError as exc:
        raise ActionError(409, str(exc)) from None
    raise ActionError(404, f"unknown action {action!r}")


def topic_action(client: Client, topic: str, action: str, cursor: str | None = None) -> dict[str, Any]:
    if action in ("pause", "resume"):
        try:
            (client.pause if action == "pause" else client.resume)(topic)
        except Overtaken as exc:
            raise ActionError(409, str(exc)) from None
        return {"result": f"{action}d", "message": f"topic {topic} {action}d"}
    if action == "retry-failed":
        return retry_failed(client, topic, cursor)
    raise ActionError(404, f"unknown action {action!r}")


def retry_failed(client: Client, topic: str, cursor: str | None = None, batch: int = RETRY_BATCH) -> dict[str, Any]:
    """Put back up to `batch` failed tasks of `topic`, newest failure first; the caller repeats with
    the returned `cursor` until it is None. A task that fails again meanwhile is newer than the
    cursor, so one sweep retries each failure once however fast tasks fail. The ids come from the
    failed index (no record is read) and are retried in one pipelined round trip."""
    try:
        found = browse.find(client.store, "failed", topic, cursor=cursor, limit=batch)
    except browse.BadCursor as exc:
        raise ActionError(400, str(exc)) from None
    # (0: gone meanwhile; -1: no longer failed, retried or deleted meanwhile)
    retried = client.store.retry_many([member for member, _, _ in found.hits]).count(1)
    left = failed_count(client, topic)
    return {"result": "retrying", "retried": retried, "failed_left": left, "cursor": found.cursor,
            "message": f"{retried} failed task{'s' if retried != 1 else ''} of {topic} will run again now"
                       + (f"; {left} failed left" if left else "")}


def failed_count(client: Client, topic: str) -> int:
    """Failed tasks of `topic` within retention, from the counters (one HGET per bucket)."""
    pipe = client.redis.pipeline(transaction=False)
    for keys in client.store.keys:
        pipe.hget(keys.counts, f"failed|{topic}")
    return sum(int(v or 0) for v in pipe.execute())


def topic_names(client: Client) -> list[str]:
    """Topics that hold tasks, from the counters' field names (one HKEYS per bucket), for the
    task list's topic picker: a whole stats() read would scan every bucket's lists for it."""
    pipe = client.redis.pipeline(transaction=False)
    for keys in client.store.keys:
        pipe.hkeys(keys.counts)
    return sorted({field.partition("|")[2] for fields in pipe.execute() for field in fields if "|" in field})
