"""RESP packing for the add path: a script call's fixed head packed once, each call's own
arguments appended (hiredis's C packer), where redis-py packs every argument anew through
several Python layers. Arguments are str (UTF-8), bytes, int or float, as redis-py sends them.
"""
from __future__ import annotations

from typing import Any, Sequence

import hiredis


def pack(args: Sequence[Any]) -> bytes:
    """One command in RESP (str arguments must be valid UTF-8: see pack_any)."""
    return hiredis.pack_command(tuple(args))


def pack_any(args: Sequence[Any]) -> bytes:
    """pack(), str arguments encoded as redis-py encodes them: a name read from Redis that was not
    UTF-8 (lone surrogates, see delayd.store.connection) goes back as its own bytes."""
    return pack([a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in args])


def _body(packed: bytes) -> bytes:
    """A packed command without its `*N` header: its arguments, each as `$len` and bytes."""
    return packed[packed.index(b"\n") + 1:]


class Head:
    """The leading arguments of a command (`EVALSHA sha numkeys keys...` and the first `covers`
    of its own args), packed once."""

    def __init__(self, command: Sequence[Any], args: Sequence[Any]):
        self.count = len(command) + len(args)
        self.covers = len(args)
        self.body = _body(pack_any((*command, *args)))

    def pack(self, tail: Sequence[Any]) -> bytes:
        """The command: this head followed by `tail`."""
        return b"*%d\r\n%b%b" % (self.count + len(tail), self.body, _body(pack(tail)))
