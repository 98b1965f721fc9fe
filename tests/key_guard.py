"""The undeclared-key guard of the tests (issue 30): each Lua script of delayd/store, run with a prelude
that refuses any command on a key the call did not pass in KEYS, as Dragonfly and some Cluster proxies
do. Production scripts never carry it: `guard(monkeypatch)` swaps the guarded sources into the
scripts for one test (tests/store/conftest.py does it for every store test).

`KNOWN` lists the keys scripts still derive inside Lua, by script: a pattern each, with the reason it
is not declared yet. A key outside it fails the call with `undeclared key in NAME.lua: CMD KEY`, so a
new script (or a new key in an old one) cannot slip back; taking an entry out shows where it is used.
"""
from __future__ import annotations

import hashlib
import os
import weakref

import pytest

from delayd.store import dialect
from delayd.store.scripts import SCRIPTS, Library

# Which arguments of each command the scripts send are keys (COMMAND GETKEYS): the first, all
# (DEL, EXISTS), none (TIME; PUBLISH names a channel). A command missing
# here fails the call, so the table grows with the scripts.
FIRST_KEY = ("DUMP GET SET TYPE PERSIST PEXPIRE HDEL HEXISTS HGET HGETALL HINCRBY HKEYS HLEN HMGET HSET HSETNX "
             "LPOP LPUSH LRANGE RPUSH SADD SMEMBERS SREM ZADD ZCARD ZCOUNT ZRANGE ZRANGEBYSCORE ZREM "
             "ZREMRANGEBYRANK ZREMRANGEBYSCORE ZSCORE ZRANK ZREVRANK ZREVRANGE ZREVRANGEBYSCORE").split()
ALL_KEYS = ("DEL", "EXISTS")
NO_KEYS = ("TIME", "PUBLISH")

# Keys still derived inside the scripts (Lua patterns, matched against the key), by script. Each is a
# data-dependent key the caller cannot name before the call: see docs/redis-layout.md.
TASK = ("}:t:", "a task record whose member the script pops from an index (`P{N}:t:<member>`)")
PARKED = ("}:paused:", "a paused topic's parked set, the topic read from the `paused` hash or a popped member")
HELD = ("}:limited:", "a limited topic's held set, the topic read from `limited` or a popped member")
LIMITS = ("{limits}:", "the limits' keys (`P{limits}:conf`, per topic `tat:`, `run:`, `where:`), topics read "
          "from `conf` or popped members; another slot (single Redis only)")
KNOWN: dict[str, tuple[tuple[str, str], ...]] = {
    "claim": (TASK, PARKED, HELD, LIMITS),
}


def _lua_set(names) -> str:
    return "{" + ", ".join(f"[{name!r}] = true" for name in names) + "}"


def prelude(name: str, audit: bool = False) -> str:
    """The guard for script `name`: a local `redis` in front of the script, shadowing the real one,
    whose call and pcall check every key argument against KEYS (and the script's KNOWN patterns).
    `audit`: no KNOWN patterns, and each undeclared key is logged (redis-server's log) instead."""
    allowed = "" if audit else ", ".join(repr(pattern) for pattern, _ in KNOWN.get(name, ()))
    refuse = "real.log(real.LOG_WARNING, message)" if audit else "error(message, 0)"
    return f"""local redis = (function(real)
  local declared, allowed = {{}}, {{{allowed}}}
  for _, key in ipairs(KEYS) do declared[key] = true end
  local first, all, none = {_lua_set(FIRST_KEY)}, {_lua_set(ALL_KEYS)}, {_lua_set(NO_KEYS)}
  local function check(cmd, ...)
    local name, args = string.upper(cmd), {{...}}
    local last = 1
    if none[name] then return end
    if all[name] then last = #args
    elseif not first[name] then error('key guard: no key positions known for ' .. name, 0) end
    for i = 1, last do
      local key = args[i]
      if not declared[key] then
        local known = false
        for _, pattern in ipairs(allowed) do
          if string.find(key, pattern) then known = true break end
        end
        if not known then
          local message = 'undeclared key in {name}.lua: ' .. name .. ' ' .. tostring(key)
          {refuse}
        end
      end
    end
  end
  return setmetatable({{
    call = function(cmd, ...) check(cmd, ...) return real.call(cmd, ...) end,
    pcall = function(cmd, ...) check(cmd, ...) return real.pcall(cmd, ...) end,
  }}, {{__index = real}})
end)(redis)
"""


# KEY_GUARD=audit: log every undeclared key to redis-server's log instead (the audit of issue 30).
_GUARDED = {name: prelude(name, os.environ.get("KEY_GUARD") == "audit") + script.source
            for name, script in SCRIPTS.items()}


def guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every script of SCRIPTS runs guarded until the test ends (calls made in this process: a
    daemon started by the test runs its own, unguarded)."""
    for name, script in SCRIPTS.items():
        monkeypatch.setattr(script, "source", _GUARDED[name])
        monkeypatch.setattr(script, "sha", hashlib.sha1(_GUARDED[name].encode()).hexdigest())
        monkeypatch.setattr(script, "function", script.function)  # (renamed by the guarded library below)
    # On Redis >= 7 and Valkey the scripts run as functions: the library is made of the guarded sources
    # too. The dialects remember names and loads by script name: fresh ones for the test (and for
    # every client, asked again), so no call mixes a guarded name with an unguarded load.
    monkeypatch.setattr(dialect, "LIBRARY", Library(SCRIPTS.values()))
    monkeypatch.setattr(dialect, "EVALSHA", dialect.Evalsha())
    monkeypatch.setattr(dialect, "FCALL", dialect.Fcall())
    monkeypatch.setattr(dialect, "_chosen", weakref.WeakKeyDictionary())
