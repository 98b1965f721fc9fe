"""The errors of Client and AsyncClient, and the translation of redis-py's into them."""
from __future__ import annotations

import contextlib
import functools
import inspect
import re
from typing import Any, Iterator

import redis

from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS


class DelaydError(Exception):
    """Base of delayd's own errors (messages are one line, never with a password)."""


class DurabilityError(DelaydError):
    """durable=True cannot be honoured by this Redis (nothing written), or the wait timed out (`written`
    tasks written, not confirmed)."""

    def __init__(self, message: str, written: int | None = None):
        super().__init__(message)
        self.written = written


class Overtaken(DelaydError):
    """A pause or resume of a topic lost to the other, issued meanwhile (the later one to begin wins)."""


class RedisUnavailable(DelaydError):
    """Redis cannot be reached or refused us."""


class AddInterrupted(RedisUnavailable):
    """add_many stopped part-way: Redis refused a batch (OOM, …) or the connection broke. The batches
    before it stay written: `written` of the `total` tasks (at least that many if not `exact`: a
    batch in flight when a connection broke may have been written too). Adding again replaces them."""

    def __init__(self, reason: str, written: int, total: int, exact: bool = True):
        super().__init__(f"{reason} (after {'' if exact else 'at least '}{written} of {total} "
                         f"task{'s' if total != 1 else ''} {'was' if written == 1 else 'were'} written)")
        self.reason, self.written, self.total, self.exact = reason, written, total, exact

    def known(self) -> str:
        """What is known of the write, in words (for a caller who is not shown the reason)."""
        tasks = f"task{'s' if self.total != 1 else ''}"
        if self.exact:
            return f"{self.written} of {self.total} {tasks} {'was' if self.written == 1 else 'were'} written"
        if self.total == 1:
            return "the task may have been written"
        return f"at least {self.written} of {self.total} {tasks} were written, and more may have been"

    def after(self, earlier: int, total: int) -> "AddInterrupted":
        """The same interruption, for a caller that had written `earlier` tasks of `total` before this add."""
        return AddInterrupted(self.reason, earlier + self.written, total, self.exact)


def unavailable(client: Any, exc: Exception) -> RedisUnavailable | None:
    """redis-py's error `exc` as RedisUnavailable naming `client.url`'s host and port, never its
    password; None for an error that is not about Redis being unreachable or refusing."""
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        if client.embedded:
            return RedisUnavailable(f"cannot reach the embedded Redis of state directory {client.config.state_dir}: "
                                    f"{exc} It runs only while the daemon does: start the daemon (delayd start) "
                                    "or set DELAYD_REDIS_URL")
        return RedisUnavailable(f"cannot reach Redis at {connection.where(client.url)}: {exc}")
    if (other := connection.not_redis(client.url, exc)) is not None:
        return RedisUnavailable(other)
    if isinstance(exc, redis.exceptions.ResponseError):
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            return RedisUnavailable(f"Redis at {connection.where(client.url)} refused the credentials")
        # OOM (maxmemory), BUSY, MASTERDOWN, a script error…: one line, no traceback.
        return RedisUnavailable(f"Redis at {connection.where(client.url)} refused the command: {refusal(exc)}")
    if isinstance(exc, redis.exceptions.RedisClusterException):
        return RedisUnavailable(f"Redis Cluster at {connection.where(client.url)}: {exc}")
    return None




def translation(client: Any, exc: Exception) -> Exception:
    """`exc` (one of REDIS_ERRORS) as RedisUnavailable (see `unavailable`), or itself."""
    return unavailable(client, exc) or exc


@contextlib.contextmanager
def translated(client: Any) -> Iterator[None]:
    """redis-py's errors as RedisUnavailable (see `unavailable`)."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise translation(client, exc) from None


def interrupted(client: Any, exc: Exception, replies: list[Any], total: int) -> Exception:
    """add_many's failure `exc` as AddInterrupted, counting what `replies` (add.lua's, read before
    it; None for a call not answered) wrote; `exc` itself if it is not about Redis."""
    error = unavailable(client, exc)
    if error is None:
        return exc
    written = sum(reply for reply in replies if isinstance(reply, int))
    return AddInterrupted(str(error), written, total, exact=isinstance(exc, redis.exceptions.ResponseError))


# Error codes redis-py turns into exception classes, leaving them out of the message. Redis 7+
# and Valkey report a script's refusal under its own code (OOM, …), where 6.2 wrapped it in the
# script error's text; `refusal` gives both the same words.
CODES = ((redis.exceptions.OutOfMemoryError, "OOM"), (redis.exceptions.ReadOnlyError, "READONLY"),
         (redis.exceptions.NoPermissionError, "NOPERM"), (redis.exceptions.ExecAbortError, "EXECABORT"))


def refusal(exc: Exception) -> str:
    """Redis's own reason (`OOM command not allowed …`), also out of a script error's wrapping
    (6.2: "Error running script …: @user_script: 12: -OOM …"; 7+: "… script: SHA, on @user_script:12.")."""
    text = " ".join(str(exc).split())
    inner = re.search(r"-([A-Z]{3,} .*)$", text)
    if inner:
        return inner.group(1)
    text = re.sub(r" script: [0-9a-f]{40}, on @user_script:\d+\.$", "", text)
    code = next((code for cls, code in CODES if isinstance(exc, cls)), "")
    return f"{code} {text}" if code and not text.startswith(code) else text


def redis_errors(method):
    """Turn redis-py connection errors into RedisUnavailable naming host and port
    (for plain methods, generators, coroutines and async generators)."""
    if inspect.isgeneratorfunction(method):
        # A generator's body runs while it is iterated, not when it is called.
        @functools.wraps(method)
        def gen_wrapper(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            with translated(self):
                yield from method(self, *args, **kwargs)
        return gen_wrapper

    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def async_gen_wrapper(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            with translated(self):
                async for item in method(self, *args, **kwargs):
                    yield item
        return async_gen_wrapper

    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def async_wrapper(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            with translated(self):
                return await method(self, *args, **kwargs)
        return async_wrapper

    @functools.wraps(method)
    def wrapper(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        try:  # (not `with translated`: a single add is on the hot path)
            return method(self, *args, **kwargs)
        except REDIS_ERRORS as exc:
            raise translation(self, exc) from None
    return wrapper
