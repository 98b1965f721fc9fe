"""A queue process's own connection for its main thread: one round trip per loop turn.

The main thread's script calls of a turn (finishes, lease renewals, claims) go out
together and their replies are read together (store.stream): a turn costs one round
trip, not one per bucket and kind, and none of redis-py's per-command pool checkout.
The handlers' threads keep using the client's pool. Redis Cluster (whose buckets live
on several nodes) gets the calls one by one, as before.
"""
from __future__ import annotations

from typing import Any, Sequence

from delayd.store.held import drop_if_stale
from delayd.store.scripts import stream
from delayd.store.steps import ScriptCall


class Link:
    def __init__(self, client: Any):
        self.client = client
        self.pool = getattr(client, "connection_pool", None)  # None: a RedisCluster
        self.conn: Any = None

    def run(self, calls: Sequence[ScriptCall], replies: list[Any]) -> None:
        """Run `calls`, their replies read into `replies`; raises the first error (a reply or
        the connection's) once the replies before it are there. Nothing is sent after an
        error reply; after a connection error the effects of the calls without a reply are
        unknown (and the connection is dropped)."""
        if self.pool is None:
            for call in calls:
                replies.append(call.call(self.client))
            return
        if self.conn is None:
            self.conn = self.pool.get_connection()  # kept: the main thread's alone
        drop_if_stale(self.conn)
        try:
            stream(self.conn, calls, window=len(calls), replies=replies)
        except BaseException:
            self.conn.disconnect()  # a half-read reply must never be read as the next call's
            raise
