"""The one road to Redis: the only code that sends requests to it.

Operations are written once as steps (delayd.store.steps). A Transport runs them on a redis-py
client, an AsyncTransport on a redis.asyncio one. Here, and nowhere else:
- a script call goes by SHA (EVALSHA), or as FCALL of delayd's function library where the server
  has functions (delayd.store.dialect, chosen once per client). A call whose script is missing
  (NOSCRIPT: Redis restarted, or its script cache was flushed; `Function not found`: FUNCTION
  FLUSH, a new Cluster node) is sent again once, with its script: as EVAL (or after a FUNCTION
  LOAD) through redis-py's client, or after the load on a connection of our own (calls in flight
  behind it are sent again, in order);
- a Stream of script calls goes on one connection, a window of calls ahead of their replies,
  or one call after the other on Redis Cluster, whose pipeline refuses EVALSHA and whose buckets
  live on several nodes (the only place that tells Cluster apart); there a command that must
  follow the calls on their connection (WAIT) follows each call, on a connection to its node;
- a Client's single script calls go on a connection it keeps aside (delayd.store.held), the
  fast path of a single add; a queue process's main thread keeps one for its streams (`Link`);
- a call or command that a Cluster in motion refused without running it is sent again, with a
  bounded backoff (delayd.store.motion);
- a call refused because the server does not know its verb (FCALL on a Redis 6.2 that replaced a 7
  on the same address) makes the dialect be chosen again (_chosen_again).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import MovedError

from delayd.store import held as held_mod
from delayd.store import resp
from delayd.store.dialect import Dialect, choose_steps, forget
from delayd.store.motion import REFUSALS, patiently, patiently_async
from delayd.store.steps import Batch, Command, EachCall, Request, ScriptCall, Steps, Stream, Streamed

T = TypeVar("T")


def is_cluster(client: Any) -> bool:
    """Whether `client` (redis-py, sync or asyncio) talks to a Redis Cluster."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


class Transport:
    """Runs steps and sends requests on a redis-py client. `hold`: single script calls go on a
    connection kept aside (a plain client only; see delayd.store.held)."""

    def __init__(self, client: Any, hold: bool = False):
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self.held = held_mod.held(client) if hold else None
        self._dialect: Dialect | None = None

    def dialect(self) -> Dialect:
        """How script calls are spelled on this client's server (asked once)."""
        if self._dialect is None:
            self._dialect = self.run(choose_steps(self.client))
        return self._dialect

    def run(self, steps: Steps[T]) -> T:
        """Drive `steps` to its result (_drive never suspends here: done in one send)."""
        async def send(request: Request) -> Any:
            return self.send(request)
        try:
            _drive(steps, send).send(None)
        except StopIteration as done:
            return done.value
        raise RuntimeError("a sync request suspended")  # (unreachable: send never awaits)

    def send(self, request: Request) -> Any:
        """One request's reply."""
        if type(request) is ScriptCall:
            return self.call(request)
        if type(request) is Command:
            return patiently(lambda: self.client.execute_command(*request.args, **request.options))
        if type(request) is Batch:
            return _pipeline(self.client, request).execute(raise_on_error=False)
        return self.stream(request)

    def call(self, call: ScriptCall) -> Any:
        """One script call's reply (an error reply raised)."""
        dialect = self._dialect or self.dialect()
        if self.held is None:
            return patiently(lambda: self._through_redis_py(call, dialect))
        packed = dialect.pack(call)
        try:
            return self.held.request(packed)
        except redis.exceptions.ResponseError as exc:
            if _chosen_again(self, exc):
                return self.call(call)
            if not dialect.missing(exc):
                raise
        self.held.request(dialect.load_command(call.script))
        return self.held.request(packed)

    def _through_redis_py(self, call: ScriptCall, dialect: Dialect) -> Any:
        try:
            return self.client.execute_command(*dialect.command(call))
        except redis.exceptions.ResponseError as exc:
            if _chosen_again(self, exc):
                return self._through_redis_py(call, self.dialect())
            if not dialect.missing(exc):
                raise
        for command in dialect.recovery(call):
            reply = self.client.execute_command(*command)
        return reply

    def stream(self, stream: Stream) -> Streamed:
        """A Stream on a connection of the pool checked out for it (see delayd.store.steps.Stream)."""
        if self.cluster and stream.then:
            return self._each_then(stream)
        if self.cluster:
            return self._one_by_one(stream)
        dialect = self.dialect()
        try:
            with held_mod.checked_out(self.client) as conn:
                return _on_connection(conn, stream, dialect)
        except redis.exceptions.ResponseError as exc:
            _chosen_again(self, exc)
            raise

    def _one_by_one(self, stream: Stream) -> Streamed:
        replies = _one_by_one_replies(stream)
        for call in stream.calls:
            replies.append(self.call(call))
        return Streamed(replies)

    def _each_then(self, stream: Stream) -> Streamed:
        """On Redis Cluster, each call and then `stream.then` on one connection to the call's node
        (WAIT and WAITAOF count their connection's writes); `then` answers with EachCall."""
        replies = _one_by_one_replies(stream)
        confirmations = []
        for call in stream.calls:
            done = patiently(lambda: self._on_node(call, stream.then))
            replies += done.replies
            confirmations.append(done.then)
        return Streamed(replies, EachCall(confirmations))

    def _on_node(self, call: ScriptCall, then: tuple[Any, ...]) -> Streamed:
        """`call`, then `then`, on a connection to the master of the call's slot, as redis-py's map
        says; a MOVED reply or a lost node brings the map up to date (for the call sent again, or the
        next one) before it is raised."""
        nodes, dialect = self.client.nodes_manager, self.dialect()
        try:
            with held_mod.checked_out(self.client.get_node_from_key(call.keys[0]).redis_connection) as conn:
                return _on_connection(conn, Stream([call], window=None, then=then), dialect)
        except MovedError as exc:
            nodes.move_slot(exc)
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            try:
                nodes.initialize()
            except REFUSALS:  # no node answers now: the next call tries again
                pass
            raise

    def link(self) -> "Link":
        return Link(self)


class Link:
    """A connection kept for one thread's streams: the queue process's main thread sends each
    turn's finishes, lease renewals and claims together, one round trip per turn."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.conn: Any = None

    def run(self, calls: Sequence[ScriptCall], replies: list[Any]) -> None:
        """Run `calls`, their replies read into `replies`; raises the first error (a reply or the
        connection's) once the replies before it are there. After a connection error the effects
        of the calls without a reply are unknown (and the connection is dropped)."""
        stream = Stream(calls, window=None, replies=replies)
        if self.transport.cluster:
            self.transport._one_by_one(stream)
            return
        dialect, answered = self.transport.dialect(), len(replies)
        if self.conn is None:
            self.conn = self.transport.client.connection_pool.get_connection()  # the thread's alone
        held_mod.drop_if_stale(self.conn)
        try:
            _on_connection(self.conn, stream, dialect)
        except BaseException as exc:
            self.conn.disconnect()  # a half-read reply must never be read as the next call's
            if not _chosen_again(self.transport, exc):
                raise
        else:
            return
        del replies[answered:]  # (every call was refused: none ran)
        self.run(calls, replies)


class AsyncTransport:
    """Transport's requests on a redis.asyncio client."""

    def __init__(self, client: Any):
        self.client = client
        self.cluster = isinstance(client, AsyncRedisCluster)
        self._dialect: Dialect | None = None

    async def dialect(self) -> Dialect:
        if self._dialect is None:
            self._dialect = await self.run(choose_steps(self.client))
        return self._dialect

    async def run(self, steps: Steps[T]) -> T:
        return await _drive(steps, self.send)

    async def send(self, request: Request) -> Any:
        if type(request) is ScriptCall:
            return await self.call(request)
        if type(request) is Command:
            return await patiently_async(lambda: self.client.execute_command(*request.args, **request.options))
        if type(request) is Batch:
            return await _pipeline(self.client, request).execute(raise_on_error=False)
        return await self.stream(request)

    async def call(self, call: ScriptCall) -> Any:
        dialect = self._dialect or await self.dialect()
        return await patiently_async(lambda: self._through_redis_py(call, dialect))

    async def _through_redis_py(self, call: ScriptCall, dialect: Dialect) -> Any:
        try:
            return await self.client.execute_command(*dialect.command(call))
        except redis.exceptions.ResponseError as exc:
            if _chosen_again(self, exc):
                return await self._through_redis_py(call, await self.dialect())
            if not dialect.missing(exc):
                raise
        for command in dialect.recovery(call):
            reply = await self.client.execute_command(*command)
        return reply

    async def stream(self, stream: Stream) -> Streamed:
        if self.cluster and stream.then:
            return await self._each_then(stream)
        if self.cluster:
            replies = _one_by_one_replies(stream)
            for call in stream.calls:
                replies.append(await self.call(call))
            return Streamed(replies)
        dialect = await self.dialect()
        pool = self.client.connection_pool
        conn = await pool.get_connection()
        try:
            return await _drive(_stream_steps(stream, dialect), lambda request: request(conn))
        except BaseException as exc:
            await conn.disconnect()  # dropped rather than returned with replies in flight
            _chosen_again(self, exc)
            raise
        finally:
            await pool.release(conn)

    async def _each_then(self, stream: Stream) -> Streamed:
        """Transport._each_then, awaitable."""
        replies = _one_by_one_replies(stream)
        confirmations = []
        for call in stream.calls:
            done = await patiently_async(lambda: self._on_node(call, stream.then))
            replies += done.replies
            confirmations.append(done.then)
        return Streamed(replies, EachCall(confirmations))

    async def _on_node(self, call: ScriptCall, then: tuple[Any, ...]) -> Streamed:
        """Transport._on_node, awaitable."""
        dialect = await self.dialect()
        nodes = self.client.nodes_manager
        node = self.client.get_node_from_key(call.keys[0])
        conn = node.acquire_connection()
        try:
            steps = _stream_steps(Stream([call], window=None, then=then), dialect)
            return await _drive(steps, lambda request: request(conn))
        except MovedError as exc:
            await nodes.move_slot(exc)
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            await conn.disconnect()
            try:
                await nodes.initialize()
            except REFUSALS:  # no node answers now: the next call tries again
                pass
            raise
        except BaseException:
            await conn.disconnect()  # a half-read reply must never be read as the next call's
            raise
        finally:
            node.release(conn)


# -- a server that changed kind under a running process (Redis 7 replaced by 6.2 on one address) --
def _chosen_again(transport: "Transport | AsyncTransport", exc: BaseException) -> bool:
    """Whether `exc` refused a script call's verb as unknown (FCALL on a server without functions
    now); if so, the transport's dialect is chosen again at its next call (delayd.store.dialect.forget).
    No call ran then: a single call and a Link's calls are sent again here, once; a Stream's error is
    raised (its calls may be made as they are sent), and its caller's next try goes in the new dialect."""
    dialect = transport._dialect
    if dialect is None or not dialect.unknown(exc):
        return False
    forget(transport.client)
    transport._dialect = None
    return True


def _one_by_one_replies(stream: Stream) -> list[Any]:
    """The list a Stream sent one call at a time (Redis Cluster) answers into."""
    return [] if stream.replies is None else stream.replies


def _pipeline(client: Any, batch: Batch) -> Any:
    pipe = client.pipeline(transaction=False)
    for c in batch.commands:
        pipe.execute_command(*c.args, **c.options)
    return pipe


async def _drive(steps: Steps[T], send: Callable[[Any], Awaitable[Any]]) -> T:
    """Send each request of `steps`, its reply (or its exception) back into `steps`."""
    reply: Any = None
    resume = steps.send
    while True:
        try:
            request = resume(reply)
        except StopIteration as done:
            return done.value
        try:
            reply, resume = await send(request), steps.send
        except Exception as exc:  # raised inside the operation, which may handle it
            reply, resume = exc, steps.throw


def _on_connection(conn: Any, stream: Stream, dialect: Dialect) -> Streamed:
    """A Stream on a redis-py connection checked out for it."""
    async def send(request: Callable[[Any], Any]) -> Any:
        return request(conn)
    try:
        _drive(_stream_steps(stream, dialect), send).send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("a sync request suspended")


def _send(packed: bytes) -> Callable[[Any], Any]:
    """A request of _stream_steps: send `packed` on the connection (sync or async)."""
    return lambda conn: conn.send_packed_command([packed])  # (a list of chunks: bytes alone would be iterated)


def _read(conn: Any) -> Any:
    """A request of _stream_steps: the connection's next reply (an error reply raised)."""
    return conn.read_response()


def _stream_steps(stream: Stream, dialect: Dialect) -> Steps[Streamed]:
    """A Stream as sends and reads on one connection (see delayd.store.steps.Stream).

    A call refused because its script is missing (NOSCRIPT, `Function not found`) is followed at
    once by the load of its script (SCRIPT LOAD, once per script; FUNCTION LOAD, once) and sent
    again, once; the calls in flight behind it are refused too and sent again in their order, so
    the calls still run in order. Connection errors leave the connection to be dropped.
    """
    window = stream.window
    replies = [] if stream.replies is None else stream.replies
    sent: list[tuple[ScriptCall, bytes]] = []
    answers: dict[int, Any] = {}           # replies read ahead of an earlier call's (sent again)
    pending: deque[int | None] = deque()   # what each reply in flight answers: a call, or a SCRIPT LOAD
    loaded: set[bytes] = set()              # the loads sent
    again: set[int] = set()
    errors: list[Exception] = []

    def read() -> Steps[None]:
        n = pending.popleft()
        try:
            reply = yield _read
        except redis.exceptions.ResponseError as exc:
            if n is None or n in again or errors or not dialect.missing(exc):  # (after an error nothing more is sent)
                errors.append(exc)
                reply = exc
            else:
                load = dialect.load_command(sent[n][0].script)
                if load not in loaded:
                    loaded.add(load)
                    yield _send(load)
                    pending.append(None)
                again.add(n)
                yield _send(sent[n][1])
                pending.append(n)
                return
        if n is not None:
            answers[n] = reply
            while len(replies) in answers:
                replies.append(answers.pop(len(replies)))

    for call in stream.calls:
        if errors:
            break
        packed = dialect.pack(call)
        sent.append((call, packed))
        yield _send(packed)
        pending.append(len(sent) - 1)
        while window is not None and len(pending) > window:
            yield from read()
    while pending:
        yield from read()
    if errors:
        raise errors[0]
    then = None
    if stream.then:
        yield _send(resp.pack(stream.then))
        try:
            then = yield _read
        except redis.exceptions.ResponseError as exc:  # e.g. WAITAOF on a Redis whose AOF was turned off
            then = exc
    return Streamed(replies, then)

