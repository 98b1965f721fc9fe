"""The redis-py internals that delayd's fast single add leans on, checked before they are used.

redis-py promises none of these, and setup.cfg bounds `redis` from below only: its mapping
of error replies to exceptions (`redis._parsers.BaseParser.parse_error`) and a connection's
socket, retry policy and encoder (`_sock`, `retry`, `encoder`). delayd/store/held.py holds a
connection only for a client whose connections `fit`; any other client takes redis-py's
public path (slower, the same replies), so a release that renames them costs speed, not `add`.
"""
from __future__ import annotations

from typing import Any, Callable

try:
    from redis._parsers import BaseParser

    parse_error: Callable[[str], Exception] | None = BaseParser.parse_error
except (ImportError, AttributeError):
    parse_error = None

_ENCODER_FIELDS = ("encoding", "encoding_errors", "decode_responses")


def fit(pool: Any) -> bool:
    """Whether the connections `pool` makes have everything delayd/store/held.py uses: checked on
    one made as the pool makes them, never connected."""
    if parse_error is None or getattr(pool, "cache", None) is not None:  # (a cache wraps each connection)
        return False
    conn = pool.connection_class(**pool.connection_kwargs)
    encoder = getattr(conn, "encoder", None)
    return (hasattr(conn, "_sock") and callable(getattr(getattr(conn, "retry", None), "call_with_retry", None))
            and all(hasattr(encoder, name) for name in _ENCODER_FIELDS))


def connected(conn: Any) -> bool:
    """Whether `conn` has its socket open; True when this redis-py does not say (its
    can_read() then connects one that is not, as its next command would)."""
    try:
        return conn._sock is not None
    except AttributeError:
        return True
