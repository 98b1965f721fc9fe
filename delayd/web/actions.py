"""What the dashboard's buttons and POST /api/... do, through the AsyncClient's own methods.

Each function returns a JSON-able dict with a `message` for the page, or raises
ActionError with the HTTP status to answer.
"""
from __future__ import annotations

from typing import Any

from delayd.client.async_client import AsyncClient
from delayd.client.browse import BadCursor
from delayd.client.errors import DelaydError, Overtaken, RedisUnavailable
from delayd.model.deletion import CLAIMED
from delayd.model.task import TaskError
from delayd.web import cursors
from delayd.web.params import Limit, Replay


class ActionError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def task_action(client: AsyncClient, topic: str, id: str, action: str, hard: bool = False) -> dict[str, Any]:
    key = f"{topic}:{id}"
    try:
        if action == "retry":
            if not await client.retry(topic, id):
                raise ActionError(404, f"not found: {key}")
            return {"result": "retrying", "message": f"{key} will run again now"}
        if action == "delete":
            answer = await client.delete(topic, id, hard=hard)
            if answer is False:
                raise ActionError(404, f"not found: {key}")
            done = f"{key} {'removed with every trace' if hard else 'deleted: it never runs again'}"
            return {"result": "removed" if hard else "deleted", "hard": hard, "claimed": answer is CLAIMED,
                    "message": f"{done}, but too late for the run already claimed, which may be starting or running"
                    if answer is CLAIMED else done}
        if action == "run":
            if not await client.run_now(topic, id):
                raise ActionError(404, f"not found: {key}")
            return {"result": "due_now", "message": f"{key} is due now"}
    except TaskError as exc:
        raise ActionError(409, str(exc)) from None
    raise ActionError(404, f"unknown action {action!r}")


async def topic_action(client: AsyncClient, topic: str, action: str, cursor: str | None = None) -> dict[str, Any]:
    if action in ("pause", "resume"):
        try:
            await (client.pause if action == "pause" else client.resume)(topic)
        except TaskError as exc:  # a topic no task could have (a control character, ...)
            raise ActionError(400, str(exc)) from None
        except Overtaken as exc:
            raise ActionError(409, str(exc)) from None
        return {"result": f"{action}d", "message": f"topic {topic} {action}d"}
    if action == "retry-failed":
        return await retry_failed(client, topic, cursor)
    raise ActionError(404, f"unknown action {action!r}")


async def host_action(client: AsyncClient, host: str, action: str, replay: Replay | None) -> dict[str, Any]:
    """POST /api/hosts/<host>/{disable,enable,replay} (delayd hosts disable|enable, delayd replay: what
    `replay` says; it streams through the tasks a page at a time while the request waits)."""
    try:
        if action == "replay" and replay is not None:
            since, status, dry_run = replay
            done = await client.replay(host, since, status, dry_run)
            count = done.matched if dry_run else done.requeued
            return {"result": "counted" if dry_run else "replayed", **done._asdict(),
                    "message": f"{'would re-queue' if dry_run else 're-queued'} {count} finished URL task"
                               f"{'s' if count != 1 else ''} of {host} ({done.examined} finished tasks looked at)"}
        if action == "disable":
            changed = await client.disable_host(host)
            return {"result": "disabled", "changed": changed,
                    "message": f"{host} disabled: its due tasks are kept, not sent" if changed
                    else f"{host} was already disabled"}
        if action == "enable":
            moved = await client.enable_host(host)
            return {"result": "enabled", "moved": moved,
                    "message": f"{host} enabled: {moved} task{'s' if moved != 1 else ''} set aside will run, "
                               "in due order"}
    except TaskError as exc:
        raise ActionError(400, str(exc)) from None
    except RedisUnavailable:
        raise  # (a 503 for app.py, without the store's detail)
    except DelaydError as exc:
        raise ActionError(409, str(exc)) from None
    raise ActionError(404, f"unknown action {action!r}")


async def retry_failed(client: AsyncClient, topic: str, cursor: str | None = None) -> dict[str, Any]:
    """Put back a batch of failed tasks of `topic` (AsyncClient.retry_failed); the caller repeats with
    the returned `cursor` until it is None."""
    try:
        done = await client.retry_failed(topic, cursor)
    except BadCursor as exc:
        raise ActionError(400, str(exc)) from None
    retried, left = done.retried, done.failed_left
    return {"result": "retrying", "retried": retried, "failed_left": left, "cursor": cursors.shown(done.cursor),
            "message": f"{retried} failed task{'s' if retried != 1 else ''} of {topic} will run again now"
                       + (f"; {left} failed left" if left else "")}


async def limit_action(client: AsyncClient, topic: str, limit: Limit) -> dict[str, Any]:
    """POST /api/limits/<topic>: set its limit (`rate` N/s|N/m|N/h and/or `concurrency` K) or, with
    `clear`, lift it (delayd limit)."""
    try:
        if limit.clear:
            had = await client.clear_limit(topic)
            return {"result": "cleared" if had else "none",
                    "message": f"limit of {topic} cleared: its held tasks start now" if had
                    else f"{topic} had no limit"}
        await client.set_limit(topic, rate=limit.rate, concurrency=limit.concurrency)
    except TaskError as exc:
        raise ActionError(400, str(exc)) from None
    except RedisUnavailable:
        raise  # (a 503 for app.py, without the store's detail)
    except DelaydError as exc:
        raise ActionError(409, str(exc)) from None
    return {"result": "set", "message": f"{topic} limited to "
            + ", ".join(f"{name} {value}" for name, value in (("rate", limit.rate), ("concurrency", limit.concurrency))
                        if value is not None)}
