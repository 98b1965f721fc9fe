"""A connection of a client's pool held for its one-at-a-time script calls (a web request's `add`).

redis-py checks a connection out of its pool and back in around every command and reads the
reply through several layers, which costs more than the round trip itself. A plain client (not
Cluster, not Sentinel) keeps one connection of its pool aside instead and sends requests packed
by the caller (delayd.store.dialect) on its socket, reading replies with a hiredis reader of its
own; redis-py still opens the connection (AUTH, SELECT, TLS, client name) and owns its retry
policy. A thread that finds the held connection busy takes redis-py's usual path. Without the
redis-py internals this needs (delayd.store.redis_internals) no connection is held.

A socket the server closed while idle (a Redis restart) is replaced before use; any error drops
the connection, so a half-read reply is never read as the next request's. On Linux the kernel
enforces redis-py's socket timeout (SO_SNDTIMEO/SO_RCVTIMEO), sparing Python a poll per send
and receive (BENCHMARKS.md has the figures).
"""
from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import sys
import threading
from typing import Any, Iterator

import hiredis
import redis

from delayd.store import redis_internals

READ_SIZE = 65536

_forks = 0  # forks this process descends from: a held socket is used in the process it was made in


def _forked() -> None:
    global _forks
    _forks += 1


# (Counted by a fork hook: os.getpid() would be a system call per request.)
os.register_at_fork(after_in_child=_forked)


class HeldConnection:
    """Round trips of packed requests whose replies redis-py does not post-process
    (EVALSHA, FCALL, SCRIPT LOAD, FUNCTION LOAD): replies are decoded as the client decodes them."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.lock = threading.Lock()
        self.conn: Any = None
        self.forks = -1  # _forks when conn was taken
        self.sock: Any = None  # conn's socket when the reader and poller below were made for it
        self.reader: Any = None
        self.poller: Any = None

    def request(self, packed: bytes) -> Any:
        """Send one packed command, return its reply (raise an error reply as redis-py does)."""
        if not self.lock.acquire(blocking=False):
            return _pooled_request(self.client, packed)
        try:
            if self.conn is None or self.forks != _forks:  # never a socket inherited across fork()
                self.conn, self.forks, self.sock = self.client.connection_pool.get_connection(), _forks, None
            conn = self.conn
            try:
                return conn.retry.call_with_retry(lambda: self._round_trip(conn, packed),
                                                  lambda _error: conn.disconnect())
            except BaseException:
                conn.disconnect()  # reconnects on the next call
                raise
        finally:
            self.lock.release()

    def _round_trip(self, conn: Any, packed: bytes) -> Any:
        sock = self._socket(conn)
        reader = self.reader
        try:
            sock.sendall(packed)
            reply = reader.gets()
            while reply is False:
                data = sock.recv(READ_SIZE)
                if not data:
                    raise redis.exceptions.ConnectionError("Connection closed by server.")
                reader.feed(data)
                reply = reader.gets()
        except (socket.timeout, BlockingIOError):  # (BlockingIOError: the kernel's timeout, see _kernel_timeouts)
            raise redis.exceptions.TimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise redis.exceptions.ConnectionError(f"Error while talking to Redis: {exc}") from None
        if isinstance(reply, redis.exceptions.RedisError):
            raise reply
        return reply

    def _socket(self, conn: Any) -> Any:
        """conn's socket, (re)connected if redis-py dropped it or the server closed it while idle."""
        if self.sock is not None and (conn._sock is not self.sock or self.poller.poll(0)):
            conn.disconnect()  # readable while idle: closed by the server, or stray data
            self.sock = None
        if self.sock is None:
            conn.connect()  # redis-py's handshake: AUTH, SELECT, TLS...
            encoder = conn.encoder
            self.reader = hiredis.Reader(protocolError=redis.exceptions.InvalidResponse,
                                         replyError=redis_internals.parse_error, errors=encoder.encoding_errors,
                                         **({"encoding": encoder.encoding} if encoder.decode_responses else {}))
            self.poller = select.poll()
            self.poller.register(conn._sock, select.POLLIN)
            self.sock = conn._sock
            _kernel_timeouts(self.sock)
        return self.sock


def _kernel_timeouts(sock: Any) -> None:
    """A plain socket with a timeout, on Linux: blocking, the kernel timing out sends and receives."""
    timeout = sock.gettimeout()
    if sys.platform != "linux" or type(sock) is not socket.socket or not timeout:
        return
    seconds = int(timeout)
    timeval = struct.pack("ll", seconds, int((timeout - seconds) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.settimeout(None)


def _pooled_request(client: redis.Redis, packed: bytes) -> Any:
    """request() on a connection of the pool (the held one is busy in another thread)."""
    with checked_out(client) as conn:
        conn.send_packed_command([packed])  # (a list of chunks)
        return conn.read_response()


def drop_if_stale(conn: Any) -> None:
    """Disconnect `conn` if the server closed it while it sat idle (a Redis restart) or it has
    unread data, as the pool's checkout does (one poll()); the next send reconnects."""
    try:
        stale = redis_internals.connected(conn) and conn.can_read()
    except (redis.exceptions.ConnectionError, OSError):
        stale = True
    if stale:
        conn.disconnect()


def held(client: Any) -> HeldConnection | None:
    """A HeldConnection for a plain redis.Redis on a plain pool; None for Cluster and Sentinel,
    and where this redis-py lacks the internals it uses (see delayd.store.redis_internals)."""
    if (type(client) is redis.Redis and type(client.connection_pool) is redis.ConnectionPool
            and redis_internals.fit(client.connection_pool)):
        return HeldConnection(client)
    return None


@contextlib.contextmanager
def checked_out(client: Any) -> Iterator[Any]:
    """A connection of `client`'s pool for the caller alone (several commands in flight on it);
    dropped rather than returned to the pool if anything fails while it is out."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        yield conn
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
