"""The undeclared-key guard of the tests (issue 30): each Lua script of delayd/store, run with a prelude
that refuses any command on a key the call did not pass in KEYS, as Dragonfly and some Cluster proxies
do. Production scripts never carry it: `guard(monkeypatch)` swaps the guarded sources into the
scripts for one test (tests/store/conftest.py does it for every store test).

Every script declares every key it touches (docs/redis-layout.md, "Declared keys"): any other key fails
the call with `undeclared key in NAME.lua: CMD KEY`, so a new script (or a new key in an old one) cannot
slip back.
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

def _lua_set(names) -> str:
    return "{" + ", ".join(f"[{name!r}] = true" for name in names) + "}"


def prelude(name: str, audit: bool = False) -> str:
    """The guard for script `name`: a local `redis` in front of the script, shadowing the real one,
    whose call and pcall check every key argument against KEYS. `audit`: each undeclared key is logged
    (redis-server's log) instead of refused."""
    refuse = "real.log(real.LOG_WARNING, message)" if audit else "error(message, 0)"
    return f"""local redis = (function(real)
  local declared = {{}}
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
        local message = 'undeclared key in {name}.lua: ' .. name .. ' ' .. tostring(key)
        {refuse}
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
