"""RESP packing for the add path: a script call's fixed parts packed once, each call's own
keys and arguments packed into place (hiredis's C packer), where redis-py packs every argument
anew through several Python layers. Arguments are str (UTF-8), bytes, int or float, as redis-py sends them.
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
    return pack([_encoded(a) for a in args])


def _encoded(arg: Any) -> Any:
    """A str argument as redis-py encodes it (see pack_any); any other as it is."""
    return arg.encode("utf-8", "surrogateescape") if isinstance(arg, str) else arg


def _body(packed: bytes) -> bytes:
    """A packed command without its `*N` header: its arguments, each as `$len` and bytes."""
    return packed[packed.index(b"\n") + 1:]


def lead(verb: str, name: str) -> bytes:
    """The first two arguments of a script call (`EVALSHA sha`, `FCALL name`), packed for Head.pack."""
    return _body(pack((verb, name)))


class Head:
    """A script call (`EVALSHA sha` or `FCALL name`, then numkeys keys... args...) whose leading keys
    and leading args are the same for many calls and each call adds keys after those keys and args after
    those args. The call's start, up to its leading keys, is packed once; the rest (its own keys, the
    leading args, its own args) in one pack per call: a pack costs more per call than per argument."""

    def __init__(self, keys: Sequence[Any], args: Sequence[Any]):
        self.keys, self.key_count = _body(pack_any(keys)), len(keys)
        self.args, self.arg_count = tuple(_encoded(a) for a in args), len(args)
        self._starts: dict[tuple[bytes, int, int], bytes] = {}  # (lead, keys, args counts) -> the call's start

    def pack(self, lead: bytes, keys: Sequence[Any], args: Sequence[Any]) -> bytes:
        """The call led by `lead` (see lead()) with `keys` after the leading keys and `args` after
        the leading args."""
        start = self._starts.get((lead, len(keys), len(args)))
        if start is None:  # up to the leading keys: the same for every call of these counts (bytes %
            numkeys = b"%d" % (self.key_count + len(keys))  # formatting costs more than packing)
            start = self._starts[lead, len(keys), len(args)] = b"*%d\r\n%b$%d\r\n%b\r\n%b" % (
                3 + self.key_count + len(keys) + self.arg_count + len(args), lead, len(numkeys), numkeys,
                self.keys)
        rest = pack((*keys, *self.args, *args))
        return start + rest[rest.index(b"\n") + 1:]
