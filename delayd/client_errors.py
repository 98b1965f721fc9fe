"""The errors of Client and AsyncClient, and the translation of redis-py's into them."""
from __future__ import annotations

import contextlib
import functools
import inspect
import re
from typing import Any, Iterator

import redis

from . import connection


class DelaydError(Exception):
    """Base of delayd's own errors (messages are one line, never with a password)."""


class DurabilityError(DelaydError):
    """durable=True cannot be honoured by this Redis (nothing written), or the wait timed out (written)."""


class RedisUnavailable(DelaydError):
    """Redis cannot be reached or refused us."""


@contextlib.contextmanager
def translated(client: Any) -> Iterator[None]:
    """redis-py's errors as RedisUnavailable naming `client.url`'s host and port, never its password."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {connection.where(client.url)}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise RedisUnavailable(f"Redis at {connection.where(client.url)} refused the credentials") from None
        # OOM (maxmemory), BUSY, MASTERDOWN, a script error…: one line, no traceback.
        raise RedisUnavailable(f"Redis at {connection.where(client.url)} refused the command: "
                               f"{refusal(exc)}") from None
    except redis.exceptions.RedisClusterException as exc:
        raise RedisUnavailable(f"Redis Cluster at {connection.where(client.url)}: {exc}") from None


def refusal(exc: Exception) -> str:
    """Redis's own reason (`OOM command not allowed …`), also out of a script error's wrapping."""
    text = " ".join(str(exc).split())
    inner = re.search(r"-([A-Z]{3,} .*)$", text)  # "Error running script …: @user_script: 12: -OOM …"
    return inner.group(1) if inner else text


def redis_errors(method):
    """Turn redis-py connection errors into RedisUnavailable naming host and port
    (for plain methods, generators and coroutines)."""
    if inspect.isgeneratorfunction(method):
        # A generator's body runs while it is iterated, not when it is called.
        @functools.wraps(method)
        def gen_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with translated(self):
                yield from method(self, *args, **kwargs)
        return gen_wrapper

    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def async_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with translated(self):
                return await method(self, *args, **kwargs)
        return async_wrapper

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with translated(self):
            return method(self, *args, **kwargs)
    return wrapper
