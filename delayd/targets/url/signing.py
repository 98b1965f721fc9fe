"""Standard Webhooks signatures (the scheme Svix uses), for url_signing_secret.

The secret is read exactly as the standardwebhooks libraries read it: an optional
`whsec_` prefix, then base64 (padding optional), so that a receiver verifies with the
very string the daemon was given. Unlike the libraries, text that is not base64 is
refused (they would silently drop the characters outside the alphabet).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

from delayd.model.task import Task

PREFIX = "whsec_"
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class SecretError(ValueError):
    """A signing secret that is not base64 (with or without whsec_). Never quotes the secret."""


def key_of(secret: str) -> bytes:
    """The HMAC key of a configured secret; SecretError if it is not (non-empty) base64."""
    text = secret[len(PREFIX):] if secret.startswith(PREFIX) else secret
    if not _BASE64.fullmatch(text):
        raise SecretError("url_signing_secret must be base64 (optionally prefixed whsec_), "
                          "as Standard Webhooks secrets are")
    try:
        key = base64.b64decode(text + "==")  # as the libraries do: padding may be left out
    except (binascii.Error, ValueError):
        raise SecretError("url_signing_secret is not valid base64") from None
    if not key:
        raise SecretError("url_signing_secret decodes to no bytes")
    return key


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
