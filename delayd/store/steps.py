"""Redis operations written once for the sync Client and the AsyncClient (sans-I/O).

An operation is a generator: it yields the Redis requests it needs (a `Command`, a `Batch`
of commands in one round trip, a `ScriptCall` of a store.Script, or `Send`/`Read` on a
checked-out connection), receives each reply (or has the request's exception
raised at the `yield`), and returns its result. `run` drives it on a redis-py client,
`run_async` on a redis.asyncio one: validation, key layout and reply decoding exist once.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, NamedTuple, Sequence, TypeVar

T = TypeVar("T")
Steps = Generator[Any, Any, T]  # yields Command | ScriptCall, returns T


class Command(NamedTuple):
    """One Redis command, its reply parsed as redis-py parses it (`options`: e.g. withscores)."""

    args: tuple[Any, ...]
    options: dict[str, Any] = {}

    def call(self, client: Any) -> Any:
        return client.execute_command(*self.args, **self.options)

    async def call_async(self, client: Any) -> Any:
        return await client.execute_command(*self.args, **self.options)


def command(*args: Any, **options: Any) -> Command:
    return Command(args, options)


class ScriptCall(NamedTuple):
    """One call of a store.Script (EVALSHA, EVAL on NOSCRIPT)."""

    script: Any
    keys: Sequence[Any]
    args: Sequence[Any]

    def call(self, client: Any) -> Any:
        return self.script(client, self.keys, self.args)

    async def call_async(self, client: Any) -> Any:
        return await self.script.call_async(client, self.keys, self.args)


class Batch(NamedTuple):
    """Commands sent in one round trip (a pipeline, no transaction); the reply is the list of
    their replies, an error reply in its place as an exception (not raised)."""

    commands: list[Command]

    def _pipeline(self, client: Any) -> Any:
        pipe = client.pipeline(transaction=False)
        for c in self.commands:
            pipe.execute_command(*c.args, **c.options)
        return pipe

    def call(self, client: Any) -> Any:
        return self._pipeline(client).execute(raise_on_error=False)

    async def call_async(self, client: Any) -> Any:
        return await self._pipeline(client).execute(raise_on_error=False)


class Send(NamedTuple):
    """Send one packed command (delayd.store.resp) on a connection the caller has checked out; its
    reply is read by a later Read: several requests can be in flight (store.stream_steps)."""

    packed: bytes

    def call(self, conn: Any) -> None:
        conn.send_packed_command([self.packed])  # (a list of chunks: bytes alone would be iterated)

    async def call_async(self, conn: Any) -> None:
        await conn.send_packed_command([self.packed])


class Read(NamedTuple):
    """Read the next reply on that connection (an error reply is raised at the yield)."""

    def call(self, conn: Any) -> Any:
        return conn.read_response()

    async def call_async(self, conn: Any) -> Any:
        return await conn.read_response()


def run(client: Any, steps: Steps[T]) -> T:
    """Drive `steps` on a redis-py client (drive() never suspends there: done in one send)."""
    async def call(request: Any) -> Any:
        return request.call(client)
    try:
        drive(steps, call).send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("a sync request suspended")  # (unreachable: call never awaits)


async def run_async(client: Any, steps: Steps[T]) -> T:
    """Drive `steps` on a redis.asyncio client."""
    return await drive(steps, lambda request: request.call_async(client))


async def drive(steps: Steps[T], call: Callable[[Any], Awaitable[Any]]) -> T:
    """Send each request of `steps` to `call`, its reply (or its exception) back into `steps`."""
    reply: Any = None
    resume = steps.send
    while True:
        try:
            request = resume(reply)
        except StopIteration as done:
            return done.value
        try:
            reply, resume = await call(request), steps.send
        except Exception as exc:  # raised inside the operation, which may handle it
            reply, resume = exc, steps.throw

