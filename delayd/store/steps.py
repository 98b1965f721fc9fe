"""Redis operations written once for sync and async code (sans-I/O), and the requests they make.

An operation is a generator: it yields the requests it needs (a `Command`, a `Batch` of commands
in one round trip, a `ScriptCall` of a Lua script, a `Stream` of script calls on one connection),
receives each reply (or has the request's exception raised at the `yield`), and returns its
result. delayd.store.transport runs it, on redis-py or on redis.asyncio: validation, the key
layout and reply decoding exist once, and only the transport talks to Redis.
"""
from __future__ import annotations

from typing import Any, Generator, Iterable, NamedTuple, Sequence, TypeVar

T = TypeVar("T")
Steps = Generator[Any, Any, T]  # yields requests, returns T

STREAM_WINDOW = 4  # script calls of a Stream sent ahead of their replies, by default


class Command(NamedTuple):
    """One Redis command, its reply parsed as redis-py parses it (`options`: e.g. withscores)."""

    args: tuple[Any, ...]
    options: dict[str, Any] = {}


def command(*args: Any, **options: Any) -> Command:
    return Command(args, options)


class Batch(NamedTuple):
    """Commands sent in one round trip (a pipeline, no transaction); the reply is the list of
    their replies, an error reply in its place as an exception (not raised)."""

    commands: list[Command]


class ScriptCall(NamedTuple):
    """One call of a Lua script (delayd.store.scripts.Script). `head`, if given, is the call's
    keys and leading args packed once (Script.head), shared by many calls (add's, per bucket)."""

    script: Any
    keys: Sequence[Any]
    args: Sequence[Any]
    head: Any = None


class Stream(NamedTuple):
    """Script calls run in order on one connection, `window` of them ahead of their replies (None:
    all; Redis runs call k while the next ones are packed), then `then` (a command, e.g. WAIT,
    that must follow them on the same connection). The calls may be produced lazily.

    The reply is a Streamed. After an error reply nothing more is sent and the first error is
    raised once the replies in flight are read; `replies`, if given, fills as calls are answered,
    in order, so that after a failure it holds what the calls answered before it did."""

    calls: Iterable[ScriptCall]
    window: int | None = STREAM_WINDOW
    replies: list[Any] | None = None
    then: tuple[Any, ...] = ()


class Streamed(NamedTuple):
    replies: list[Any]   # one per call
    then: Any = None     # the reply to Stream.then (an error reply as its exception, not raised)


class EachCall(NamedTuple):
    """Streamed.then on Redis Cluster, where each call goes to its slot's master: the replies to
    Stream.then sent after each call on that call's connection."""
    replies: list[Any]


Request = Command | Batch | ScriptCall | Stream
