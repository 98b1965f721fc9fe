"""What the HTTP server answers when the store fails (503), and what it logs.

A caller gets one line saying what is known of its request and what to do; the detail (Redis's host
and port, its version, replica and AOF settings, the embedded Redis's state directory) goes to the
server's log only: a producer holding just the producer token learns nothing of the deployment.
"""
from __future__ import annotations

import logging

from delayd.client.errors import AddInterrupted, DurabilityError, Overtaken

log = logging.getLogger("delayd.web")
LOG_SAYS = "Redis did not answer as asked (the server's log says why)"


def answer(exc: Exception, writing: bool) -> str:
    """The one line for `exc` (a DelaydError or redis-py error of a request that writes when `writing`),
    logged whole first."""
    log.warning("%s the store failed: %s", "writing to" if writing else "reading", exc)
    if isinstance(exc, Overtaken):  # (about the request itself, nothing of the server's)
        return str(exc)
    if isinstance(exc, AddInterrupted):
        return f"{LOG_SAYS}: {exc.known()}; adding again is safe (an add replaces its task)"
    if isinstance(exc, DurabilityError):
        if exc.written is None:
            return ("this Redis cannot confirm a durable write (the server's log says why): nothing was written; "
                    "add without durable, or give Redis a replica (docs/guides/guarantees.md)")
        return (f"{exc.written} task(s) written but not confirmed in time: they may be lost if Redis fails now; "
                "adding them again is safe")
    if writing:
        return f"{LOG_SAYS}: the change may have been made; look, then try again"
    return f"{LOG_SAYS}: try again later"
