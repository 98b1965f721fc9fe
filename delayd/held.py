"""A connection of a client's pool held for its one-at-a-time script calls (a web request's `add`).

redis-py checks a connection out of its pool and back in around every command:
locks, observability counters and event dispatch cost 20-40 µs of an `add` that
takes ~90 µs in all on this machine. Its check for a connection the server closed
(one poll()) is kept. A plain client (not Cluster, not
Sentinel) keeps one connection of its own pool aside instead; a thread that finds
it busy takes redis-py's usual path, so threads never wait for each other here.
Retries are the connection's own policy (redis-py's Retry), and any error or
interruption drops the connection, so a half-read reply is never read as the
next command's.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

import redis


class HeldConnection:
    """`execute_command` for commands whose reply redis-py does not post-process (EVALSHA, EVAL)."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.lock = threading.Lock()
        self.conn: Any = None
        self.pid = 0

    def execute_command(self, *args: Any) -> Any:
        if not self.lock.acquire(blocking=False):
            return self.client.execute_command(*args)
        try:
            if self.conn is None or self.pid != os.getpid():  # never a socket inherited across fork()
                self.conn, self.pid = self.client.connection_pool.get_connection(), os.getpid()
            conn = self.conn
            drop_if_stale(conn)
            packed = conn.pack_command(*args)
            try:
                return conn.retry.call_with_retry(lambda: self._round_trip(conn, packed),
                                                  lambda _error: conn.disconnect())
            except BaseException:
                conn.disconnect()  # reconnects on the next call
                raise
        finally:
            self.lock.release()

    @staticmethod
    def _round_trip(conn: Any, packed: Any) -> Any:
        conn.send_packed_command(packed)
        return conn.read_response()


def drop_if_stale(conn: Any) -> None:
    """Disconnect `conn` if the server closed it while it sat idle (a Redis restart) or it has
    unread data, as the pool's checkout does (one poll()); the next send reconnects."""
    try:
        stale = conn._sock is not None and conn.can_read()
    except (redis.exceptions.ConnectionError, OSError):
        stale = True
    if stale:
        conn.disconnect()


def held(client: Any) -> HeldConnection | None:
    """A HeldConnection for a plain redis.Redis on a plain pool; None for Cluster and Sentinel."""
    if type(client) is redis.Redis and type(client.connection_pool) is redis.ConnectionPool:
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
