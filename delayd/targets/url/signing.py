"""Standard Webhooks signatures (the scheme Svix uses), for url_signing_secret.

The key is the secret as config.signing_key reads it (as the standardwebhooks libraries do).
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


def headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """webhook-id, webhook-timestamp and webhook-signature for one request."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": "v1," + base64.b64encode(digest).decode()}
