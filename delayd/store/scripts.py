"""The Lua scripts: `lua/NAME.lua`, each linked with the `_lib.lua` (and `_limits.lua`, `_take.lua`) helpers it
uses, known by SHA (EVALSHA), and the same sources wrapped as one function library (FCALL, Redis >= 7
and Valkey). How a call is spelled and sent is delayd.store.dialect's and delayd.store.transport's job."""
from __future__ import annotations

import hashlib
from importlib import resources
from typing import Iterable

from delayd.store import lua_lib, resp

# Scripts that write nothing: their functions are flagged `no-writes` and called with FCALL_RO, which
# a replica serves and an out-of-memory server still runs.
READ_ONLY = frozenset({"browse", "stats"})
# Scripts that run on a server out of memory (maxmemory, noeviction): a delete is how an operator frees
# memory, so its function is flagged `allow-oom` (a soft delete's few writes may then go over the limit).
# EVALSHA (6.2) refuses a script only at a first write that needs memory, which delete's first writes
# (HDEL, ZREM) do not; a function without the flag is refused whole before it starts.
ALLOW_OOM = frozenset({"delete"})


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`."""

    # The helpers: _lib.lua, and after them the limits' (_limits.lua) and the taking ones (_take.lua), as one lib.
    _lib = "".join(resources.files(__package__).joinpath(f"lua/{name}").read_text()
                   for name in ("_lib.lua", "_limits.lua", "_take.lua"))

    def __init__(self, name: str):
        self.name = name
        body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()
        self.source = lua_lib.source(self._lib, body)  # with the helpers of _lib.lua it uses
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self.read_only = name in READ_ONLY
        self.function = ""  # its name in the function library (set by Library)

    def head(self, keys: list, args: list) -> resp.Head:
        """The start of calls of this script with these leading `keys` and `args`, packed once
        (a ScriptCall's `head`: add's, per bucket)."""
        return resp.Head(keys, args)


class Library:
    """The scripts as one function library (`FUNCTION LOAD`), named after a hash of their sources and flags:
    `delayd_<hash>`, its functions `delayd_<hash>_<script>`. Function names are global to a server,
    so two delayd builds sharing a Redis each call their own scripts, and builds whose scripts are
    the same share one library. A library no build uses any more stays until `FUNCTION DELETE`."""

    def __init__(self, scripts: Iterable[Script]):
        scripts = sorted(scripts, key=lambda s: s.name)
        digest = hashlib.sha1("".join(f"{s.name}\0{s.source}\0{_flags(s)}\0" for s in scripts).encode()).hexdigest()
        self.name = f"delayd_{digest[:16]}"
        for script in scripts:
            script.function = f"{self.name}_{script.name}"
        self.code = f"#!lua name={self.name}\n" + "".join(_registration(s) for s in scripts)

    def load_command(self) -> bytes:
        """FUNCTION LOAD REPLACE of the library, in RESP (REPLACE: processes that load it at the same
        time, after a FUNCTION FLUSH, all succeed)."""
        return resp.pack(("FUNCTION", "LOAD", "REPLACE", self.code))


def _flags(script: Script) -> str:
    """The function's flags, as Lua table items (part of the library's name: a change loads a new library)."""
    return "'no-writes'" if script.read_only else "'allow-oom'" if script.name in ALLOW_OOM else ""


def _registration(script: Script) -> str:
    """The script's source as the body of a registered function (KEYS and ARGV its arguments)."""
    return (f"redis.register_function{{function_name='{script.function}', flags={{{_flags(script)}}}, "
            f"callback=function(KEYS, ARGV)\n{script.source}\nend}}\n")


SCRIPTS = {name: Script(name) for name in ("add", "promote", "take", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now", "limit",
                                           "browse", "hosts", "host_switch", "aside")}
LIBRARY = Library(SCRIPTS.values())
