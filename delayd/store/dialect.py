"""How a script call is spelled on the server at hand: EVALSHA of the script (Redis 6.2), or FCALL of
its function in delayd's library (Redis >= 7.0 and Valkey: delayd.store.scripts.Library), chosen once
per redis-py client from INFO, and again when a call finds its verb unknown (the server changed kind
under a running process: `forget`).

Functions are why: a script cache is lost when Redis restarts, fails over to a replica or runs
SCRIPT FLUSH, and every process then meets NOSCRIPT; a function library is replicated and persisted
(RDB, AOF) with the data. A call can still find its script missing (NOSCRIPT; `Function not found`
after FUNCTION FLUSH, or on a Cluster node that never had the library): either way the transport
loads it (SCRIPT LOAD of the script; FUNCTION LOAD REPLACE of the library, which redis-py sends to
every Cluster master) and sends the call again, once (delayd.store.transport).
"""
from __future__ import annotations

import re
import weakref
from typing import Any

import redis

from delayd.store import resp
from delayd.store.scripts import LIBRARY, Script
from delayd.store.server_info import version
from delayd.store.steps import ScriptCall, Steps, command

FUNCTIONS_SINCE = (7, 0)  # the first Redis with FUNCTION LOAD and FCALL (Valkey: all of them)


class Dialect:
    """Script calls spelled `VERB NAME numkeys keys... args...` for one kind of server."""

    def __init__(self) -> None:
        self._names: dict[str, tuple[str, str]] = {}  # script name -> (verb, name)
        self._leads: dict[str, bytes] = {}            # script name -> the two packed (resp.lead)

    def spelled(self, script: Script) -> tuple[str, str]:
        """The verb and the name that call `script` (e.g. EVALSHA and its SHA)."""
        raise NotImplementedError

    def missing(self, exc: Exception) -> bool:
        """Whether the error reply `exc` says the server does not have the called script."""
        raise NotImplementedError

    def unknown(self, exc: Exception) -> bool:
        """Whether the error reply `exc` says the server does not know this dialect's verbs: another
        kind of server answers now (see `forget`)."""
        return False

    def load_command(self, script: Script) -> bytes:
        """The command, in RESP, that gives the server `script`."""
        raise NotImplementedError

    def recovery(self, call: ScriptCall) -> list[tuple[Any, ...]]:
        """What redis-py's client sends after `call` was refused as missing: the last reply is the call's."""
        raise NotImplementedError

    def command(self, call: ScriptCall) -> tuple[Any, ...]:
        """`call` as arguments of redis-py's execute_command."""
        verb, name = self._name(call.script)
        return (verb, name, len(call.keys), *call.keys, *call.args)

    def pack(self, call: ScriptCall) -> bytes:
        """`call` in RESP."""
        head = call.head
        if head is None:
            return resp.pack_any(self.command(call))
        lead = self._leads.get(call.script.name)
        if lead is None:
            lead = self._leads[call.script.name] = resp.lead(*self._name(call.script))
        return head.pack(lead, call.keys[head.key_count:], call.args[head.arg_count:])

    def _name(self, script: Script) -> tuple[str, str]:
        spelled = self._names.get(script.name)
        if spelled is None:
            spelled = self._names[script.name] = self.spelled(script)
        return spelled


class Evalsha(Dialect):
    """EVALSHA; a missing script goes again as EVAL (redis-py's client) or after its SCRIPT LOAD."""

    def __init__(self) -> None:
        super().__init__()
        self._loads: dict[str, bytes] = {}

    def spelled(self, script: Script) -> tuple[str, str]:
        return "EVALSHA", script.sha

    def missing(self, exc: Exception) -> bool:
        return isinstance(exc, redis.exceptions.NoScriptError)

    def load_command(self, script: Script) -> bytes:
        load = self._loads.get(script.name)
        if load is None:  # (kept: a stream remembers the loads it sent by their bytes)
            load = self._loads[script.name] = resp.pack(("SCRIPT", "LOAD", script.source))
        return load

    def recovery(self, call: ScriptCall) -> list[tuple[Any, ...]]:
        return [("EVAL", call.script.source, len(call.keys), *call.keys, *call.args)]


class Fcall(Dialect):
    """FCALL (FCALL_RO for the read-only scripts); a missing function loads the whole library."""

    _MISSING = "Function not found"  # (redis-py strips the ERR code)
    _UNKNOWN = re.compile(r"unknown command [`']FCALL", re.IGNORECASE)

    def __init__(self) -> None:
        super().__init__()
        self._load = LIBRARY.load_command()

    def spelled(self, script: Script) -> tuple[str, str]:
        return ("FCALL_RO" if script.read_only else "FCALL"), script.function

    def missing(self, exc: Exception) -> bool:
        return type(exc) is redis.exceptions.ResponseError and str(exc).startswith(self._MISSING)

    def unknown(self, exc: Exception) -> bool:
        """`unknown command 'FCALL'` (6.2 quotes it `FCALL`): a server without functions."""
        return type(exc) is redis.exceptions.ResponseError and self._UNKNOWN.match(str(exc)) is not None

    def load_command(self, script: Script) -> bytes:
        return self._load

    def recovery(self, call: ScriptCall) -> list[tuple[Any, ...]]:
        return [("FUNCTION", "LOAD", "REPLACE", LIBRARY.code), self.command(call)]


EVALSHA = Evalsha()
FCALL = Fcall()

_chosen: "weakref.WeakKeyDictionary[Any, Dialect]" = weakref.WeakKeyDictionary()


def choose(info: dict[str, Any]) -> Dialect:
    """The dialect of a server, from its INFO reply (a Cluster's: one per node; every node must have functions)."""
    infos = [info] if "redis_version" in info else [i for i in info.values() if isinstance(i, dict)]
    if infos and all(version(i) >= FUNCTIONS_SINCE for i in infos):
        return FCALL
    return EVALSHA


def forget(client: Any) -> None:
    """Choose `client`'s dialect again at its next call: the server behind it changed kind (Redis 7
    replaced by 6.2 on the same address, after an outage), as a call refused as `unknown` says."""
    _chosen.pop(client, None)


PROBE = "delayd_probe"  # a function no library defines: FCALL of it answers "Function not found"


def choose_steps(client: Any) -> Steps[Dialect]:
    """The dialect of `client`'s server: asked once per client, then remembered. INFO names the version;
    where it says functions, an FCALL of a function that does not exist must answer "Function not found":
    a server that reports a Redis 7 version without having functions (a Redis-compatible server, a proxy
    that does not route FCALL) or an ACL that refuses FCALL answers otherwise, and gets EVALSHA."""
    dialect = _chosen.get(client)
    if dialect is None:
        try:
            dialect = choose((yield command("INFO", "server")))
            if dialect is FCALL:
                try:
                    yield command("FCALL_RO", PROBE, 0)
                except redis.exceptions.ResponseError as exc:
                    if not FCALL.missing(exc):
                        dialect = EVALSHA
        except redis.exceptions.ResponseError:  # INFO refused (an ACL): EVALSHA works on every server
            dialect = EVALSHA
        _chosen[client] = dialect
    return dialect
