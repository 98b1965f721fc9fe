"""Standard Webhooks signatures (the scheme Svix uses), for url_signing_secret and url_signing_keys.

A key is a secret as config.signing_key reads it (as the standardwebhooks libraries do). A named key
in rotation has several secrets: each signs, one `v1,` signature per secret in the one header, so a
receiver verifying with either the old or the new secret accepts the request.
"""
from __future__ import annotations

import base64
import hashlib
import hmac

from delayd.model.task import Task


def message_id(task: Task) -> str:
    """`topic:id`, the same for every retry of a notification; `topic:id:run` for a recurring
    task, whose runs are separate messages."""
    return f"{task.topic}:{task.id}:{task.runs}" if task.recurring else f"{task.topic}:{task.id}"


def headers(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """webhook-id, webhook-timestamp and webhook-signature (one `v1,<sig>` per key, space-separated)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    signatures = ("v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in keys)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": " ".join(signatures)}
