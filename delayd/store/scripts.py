"""The Lua scripts: `lua/NAME.lua`, each linked with the `_lib.lua` helpers it uses, known by
SHA, and packed as EVALSHA calls. Sending them is delayd.store.transport's job."""
from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any, Sequence

from delayd.store import lua_lib, resp

HEADS_KEPT = 64  # packed heads kept per script (a few per bucket: see Script.pack)


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`."""

    _lib = resources.files(__package__).joinpath("lua/_lib.lua").read_text()

    def __init__(self, name: str):
        self.name = name
        body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()
        self.source = lua_lib.source(self._lib, body)  # with the helpers of _lib.lua it uses
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self._heads: dict[tuple[Any, ...], resp.Head] = {}

    def pack(self, keys: Sequence[Any], args: Sequence[Any], fixed: int = 0) -> bytes:
        """EVALSHA of this script with `keys` and `args`, in RESP. The head (keys and the first
        `fixed` args: what every call of a bucket shares, e.g. add's) is packed once and kept."""
        if not fixed:
            return resp.pack_any(("EVALSHA", self.sha, len(keys), *keys, *args))
        shared = (*keys, *args[:fixed])
        head = self._heads.get(shared)
        if head is None:
            if len(self._heads) >= HEADS_KEPT:
                self._heads.clear()
            head = self._heads[shared] = resp.Head("EVALSHA", self.sha, len(keys), *shared)
        return head.pack(args[fixed:])

    def load_command(self) -> bytes:
        """SCRIPT LOAD of this script, in RESP."""
        return resp.pack(("SCRIPT", "LOAD", self.source))


SCRIPTS = {name: Script(name) for name in ("add", "promote", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now",
                                           "browse")}
