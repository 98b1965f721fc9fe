"""Request bodies, read only up to a limit: checked from Content-Length before a byte is read and
while a chunked body arrives, and answered 413 beyond it (the login form is read before anyone is
authenticated, a producer's JSON before it is validated)."""
from __future__ import annotations

import urllib.parse

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

MiB = 1024 * 1024
FORM_LIMIT = 64 * 1024       # bytes of a form body (the login form, the action buttons); more answers 413
PARSE_ON_LOOP = 16 * 1024    # a bigger form is parsed in a worker thread, off the event loop


class BodyTooLarge(Exception):
    """A request body over its limit (answered 413)."""

    def __init__(self, limit: int):
        size = f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit // 1024} KiB"
        super().__init__(f"the request body is over {size}")


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, or BodyTooLarge as soon as it is known to exceed `limit` bytes: from
    Content-Length before anything is read, else while a chunked body arrives (at most `limit`
    bytes and one chunk are held)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise BodyTooLarge(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request) -> dict[str, str]:
    """A url-encoded form body (at most FORM_LIMIT bytes, else BodyTooLarge) as a dict, without
    python-multipart; {} for other bodies, which are not read."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    body = await read_body(request, FORM_LIMIT)
    return await run_in_threadpool(parse_form, body) if len(body) > PARSE_ON_LOOP else parse_form(body)


def parse_form(body: bytes) -> dict[str, str]:
    return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
