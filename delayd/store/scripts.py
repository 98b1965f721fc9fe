"""The Lua scripts: `lua/NAME.lua`, each linked with the `_lib.lua` (and `_limits.lua`) helpers it
uses, known by SHA, and packed as EVALSHA calls. Sending them is delayd.store.transport's job."""
from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any, Sequence

from delayd.store import lua_lib, resp


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`."""

    # The helpers: _lib.lua, and the limits' helpers after them (_limits.lua), as one lib.
    _lib = "".join(resources.files(__package__).joinpath(f"lua/{name}").read_text()
                   for name in ("_lib.lua", "_limits.lua"))

    def __init__(self, name: str):
        self.name = name
        body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()
        self.source = lua_lib.source(self._lib, body)  # with the helpers of _lib.lua it uses
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def head(self, keys: Sequence[Any], args: Sequence[Any]) -> resp.Head:
        """The start of calls of this script with these leading `keys` and `args`, packed once
        (a ScriptCall's `head`: add's, per bucket)."""
        return resp.Head(self.sha, keys, args)

    def pack(self, keys: Sequence[Any], args: Sequence[Any], head: resp.Head | None = None) -> bytes:
        """EVALSHA of this script with `keys` and `args`, in RESP (`head`: their start, packed)."""
        if head is not None:
            return head.pack(keys[head.key_count:], args[head.arg_count:])
        return resp.pack_any(("EVALSHA", self.sha, len(keys), *keys, *args))

    def load_command(self) -> bytes:
        """SCRIPT LOAD of this script, in RESP."""
        return resp.pack(("SCRIPT", "LOAD", self.source))


SCRIPTS = {name: Script(name) for name in ("add", "promote", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now", "limit",
                                           "browse", "hosts", "host_switch", "aside")}
