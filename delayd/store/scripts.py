"""The Lua scripts (lua/NAME.lua, with the _lib.lua helpers each uses) and how their calls are
sent: by SHA, with NOSCRIPT recovery, one by one or streamed on one connection."""
from __future__ import annotations

import hashlib
from collections import deque
from importlib import resources
from typing import Any, Iterable, Sequence

import redis
from redis.cluster import RedisCluster

from delayd.store import lua_lib, resp
from delayd.store.held import checked_out
from delayd.store.steps import Read, ScriptCall, Send, Steps, run

STREAM_WINDOW = 4  # script calls sent ahead of their replies by stream_steps


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`, run by SHA with a reload on NOSCRIPT.

    Unlike redis-py's Script in a pipeline, this never adds a SCRIPT EXISTS round trip.
    """

    _lib = resources.files(__package__).joinpath("lua/_lib.lua").read_text()

    def __init__(self, name: str):
        self.name = name
        body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()
        self.source = lua_lib.source(self._lib, body)  # with the helpers of _lib.lua it uses
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            # Redis restarted or its script cache was flushed: EVAL loads it again.
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def call_async(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """__call__ on a redis.asyncio client."""
        try:
            return await client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    def many(self, client: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Run `calls` on `client` in one pipelined round trip (`stream` on a connection checked
        out for them), or one call after the other on a Cluster, whose pipeline refuses EVALSHA."""
        if isinstance(client, RedisCluster):
            return [self(client, keys, args) for keys, args in calls]
        with checked_out(client) as conn:
            return self.stream(conn, calls, window=len(calls))

    def head(self, keys: Sequence[Any], args: Sequence[Any]) -> resp.Head:
        """EVALSHA of this script with leading `keys` and `args`, packed once: head.pack(more_keys,
        more_args) is a whole call (see delayd.store.resp)."""
        return resp.Head(self.sha, keys, args)

    def request(self, held: Any, packed: bytes) -> Any:
        """One call packed by head() on `held` (a delayd.store.held.HeldConnection); after NOSCRIPT,
        SCRIPT LOAD and the same call again (the SHA does not change)."""
        try:
            return held.request(packed)
        except redis.exceptions.NoScriptError:
            held.request(resp.pack(("SCRIPT", "LOAD", self.source)))
            return held.request(packed)

    def stream_steps(self, calls: Iterable[bytes], window: int = STREAM_WINDOW,
                     replies: list[Any] | None = None) -> Steps[list[Any]]:
        """Many calls of this script packed by head(), streamed: see `stream_steps`."""
        return stream_steps(((self, call) for call in calls), window, replies)

    def stream(self, conn: Any, calls: Iterable[tuple[Sequence[str], Sequence[Any]]],
               window: int = STREAM_WINDOW, replies: list[Any] | None = None) -> list[Any]:
        """Many calls of this script on `conn`: see `stream`."""
        return stream(conn, (ScriptCall(self, keys, args) for keys, args in calls), window, replies)


def stream_steps(calls: Iterable[tuple[Script, bytes]], window: int = STREAM_WINDOW,
                 replies: list[Any] | None = None) -> Steps[list[Any]]:
    """Run script calls (each a Script and its packed EVALSHA, of any scripts) on one connection
    (the caller's alone), `window` calls ahead of the replies: Redis runs call k while Python
    packs the next ones, where a pipeline packs all, then waits for all. Calls are produced
    lazily. Returns one reply per call.

    `replies`, if given, fills as the calls are answered, in order: after a failure it holds
    the replies of the calls answered before the first unanswered one (an error reply as its
    exception), so that a caller knows what they did.

    A call refused with NOSCRIPT (Redis lost its script cache) is followed at once by a SCRIPT
    LOAD of its script (once per script) and sent again, once; the calls in flight behind it
    are refused too and sent again in their order, so the calls still run in order. After an
    error reply nothing more is sent; the first error is raised once the replies in flight are
    read. Connection errors leave the connection to be dropped.
    """
    replies = [] if replies is None else replies
    sent: list[tuple[Script, bytes]] = []
    answers: dict[int, Any] = {}           # replies read ahead of an earlier call's (sent again)
    pending: deque[int | None] = deque()   # what each reply in flight answers: a call, or a SCRIPT LOAD
    loaded: set[str] = set()
    again: set[int] = set()
    errors: list[Exception] = []

    def read() -> Steps[None]:
        n = pending.popleft()
        try:
            reply = yield Read()
        except redis.exceptions.NoScriptError as exc:
            script = sent[n][0] if n is not None else None
            if n is None or n in again or errors:  # (after an error nothing more is sent)
                errors.append(exc)
                reply = exc
            else:
                if script.name not in loaded:
                    loaded.add(script.name)
                    yield Send(resp.pack(("SCRIPT", "LOAD", script.source)))
                    pending.append(None)
                again.add(n)
                yield Send(sent[n][1])
                pending.append(n)
                return
        except redis.exceptions.ResponseError as exc:
            errors.append(exc)
            reply = exc
        if n is not None:
            answers[n] = reply
            while len(replies) in answers:
                replies.append(answers.pop(len(replies)))

    for call in calls:
        if errors:
            break
        sent.append(call)
        yield Send(call[1])
        pending.append(len(sent) - 1)
        while len(pending) > window:
            yield from read()
    while pending:
        yield from read()
    if errors:
        raise errors[0]
    return replies


def stream(conn: Any, calls: Iterable[ScriptCall], window: int = STREAM_WINDOW,
           replies: list[Any] | None = None) -> list[Any]:
    """stream_steps on a redis-py connection (checked out for the caller alone), the calls
    packed as redis-py packs them."""
    def packed() -> Iterable[tuple[Script, bytes]]:
        for call in calls:
            yield call.script, b"".join(conn.pack_command("EVALSHA", call.script.sha, len(call.keys),
                                                          *call.keys, *call.args))
    return run(conn, stream_steps(packed(), window, replies))


SCRIPTS = {name: Script(name) for name in ("add", "promote", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now",
                                           "browse")}
