"""The Lua scripts: `lua/NAME.lua`, each linked with the helpers it uses of the lib (`_lib.lua` and the other
`_*.lua` files, LIB_FILES), known by SHA (EVALSHA), and one function library of them (FCALL, Redis >= 7 and
Valkey): the helpers made once at its load, each function the script's own body. How a call is spelled and sent is
delayd.store.dialect's and delayd.store.transport's job."""
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
# The helpers, read as one lib in this order (a definition uses only those above it): _lib.lua, the counts'
# (_counts.lua), the limits' (_limits.lua), the table of task fields' (_fields.lua, written by scripts/build-clients
# from delayd/model/fields.py), add's gate (its refusal and checks of text, _gate_text.lua; of JSON that cjson and
# Python read alike, _gate_json.lua; the gate proper, _gate.lua), then promote's tick (_tick.lua) and its four jobs.
LIB_FILES = ("_lib.lua", "_counts.lua", "_limits.lua", "_fields.lua", "_gate_text.lua", "_gate_json.lua", "_gate.lua",
             "_tick.lua", "_due.lua", "_release.lua", "_reap.lua", "_trim.lua")


class Script:
    """One Lua script from `delayd/store/lua/NAME.lua`."""

    _lib = "".join(resources.files(__package__).joinpath(f"lua/{name}").read_text() for name in LIB_FILES)

    def __init__(self, name: str):
        self.name = name
        self.body = resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()  # (the library's)
        self.source = lua_lib.source(self._lib, self.body)  # with the lib's helpers it uses (EVALSHA)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self.read_only = name in READ_ONLY
        self.function = ""  # its name in the function library (set by Library)

    def head(self, keys: list, args: list) -> resp.Head:
        """The start of calls of this script with these leading `keys` and `args`, packed once
        (a ScriptCall's `head`: add's, per bucket)."""
        return resp.Head(keys, args)


class Library:
    """The scripts as one function library (`FUNCTION LOAD`): at its top the lib's helpers, made once when it
    loads (delayd.store.lua_lib.library_top), then each script registered with its own body as the function
    (lua_lib.callback). Named after a hash of its code: `delayd_<hash>`, its functions
    `delayd_<hash>_<script>`. Function names are global to a server, so two delayd builds sharing a Redis
    each call their own scripts, and builds whose library is the same share one. A library no build uses
    any more stays until `FUNCTION DELETE`. `prelude`: Lua run at the top before the helpers (the tests'
    key guard)."""

    def __init__(self, scripts: Iterable[Script], prelude: str = ""):
        scripts = sorted(scripts, key=lambda s: s.name)
        defs = lua_lib.definitions(Script._lib)
        top = lua_lib.library_top(defs, prelude)
        callbacks = {s.name: lua_lib.callback(defs, s.body) for s in scripts}

        def code(name: str) -> str:
            return f"#!lua name={name}\n{top}" + "".join(
                _registration(f"{name}_{s.name}", _flags(s), callbacks[s.name]) for s in scripts)
        self.name = f"delayd_{hashlib.sha1(code('delayd').encode()).hexdigest()[:16]}"
        for script in scripts:
            script.function = f"{self.name}_{script.name}"
        self.code = code(self.name)

    def load_command(self) -> bytes:
        """FUNCTION LOAD REPLACE of the library, in RESP (REPLACE: processes that load it at the same
        time, after a FUNCTION FLUSH, all succeed)."""
        return resp.pack(("FUNCTION", "LOAD", "REPLACE", self.code))


def _flags(script: Script) -> str:
    """The function's flags, as Lua table items (part of the library's name: a change loads a new library)."""
    return "'no-writes'" if script.read_only else "'allow-oom'" if script.name in ALLOW_OOM else ""


def _registration(function: str, flags: str, callback: str) -> str:
    """A registered function whose code is `callback` (lua_lib.callback: its arguments keys and argv)."""
    return (f"redis.register_function{{function_name='{function}', flags={{{flags}}}, "
            f"callback=function(keys, argv)\n{callback}\nend}}\n")


SCRIPTS = {name: Script(name) for name in ("add", "promote", "claim", "finish", "renew", "delete", "retry",
                                           "stats", "register", "pause", "park", "resume", "run_now", "limit",
                                           "browse", "hosts", "host_switch", "aside")}
LIBRARY = Library(SCRIPTS.values())
