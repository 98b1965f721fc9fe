"""The undeclared-key guard of the tests (issue 30): each Lua script of delayd/store, run with a prelude
that refuses any command on a key the call did not pass in KEYS, as Dragonfly and some Cluster proxies
do. Production scripts never carry it: `guard(monkeypatch)` swaps the guarded sources into the
scripts for one test (tests/store/conftest.py does it for every store test).

Every script declares every key it touches (docs/redis-layout.md, "Declared keys"): any other key fails
the call with `undeclared key in NAME.lua: CMD KEY`, so a new script (or a new key in an old one) cannot
slip back. Except the scripts of TAGGED, which build the names of keys under the hash tag of keys they
declare (claim.lua: the records of the members it pops, which it cannot know before the call; add.lua in
its short form: the bucket's keys, each passed key costing Redis on every single add): a key of theirs
passes when its hash tag is one of the declared keys' tags (the rule Redis Cluster routes and checks a
call by), and fails with `key of another hash tag in NAME.lua: CMD KEY` otherwise.
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
# Scripts held to the hash-tag rule instead of the declared keys (see above).
TAGGED = frozenset({"add", "claim"})

def _lua_set(names) -> str:
    return "{" + ", ".join(f"[{name!r}] = true" for name in names) + "}"


def prelude(audit: bool = False) -> str:
    """The guard: a local `redis`, shadowing the real one, whose call and pcall check every key argument against
    the call's KEYS; a script or function names itself first with `redis.guard_script(NAME)`. In the function
    library it is made once, at FUNCTION LOAD, where Redis's `redis` is another table (register_function, no
    call) than the one calls see: it reads the real one, and KEYS, again in each call. `audit`: each undeclared
    key is logged (redis-server's log) instead of refused."""
    refuse = "redis.log(redis.LOG_WARNING, message)" if audit else "error(message, 0)"
    return f"""local redis = (function()
  local script, keys, declared, tags = '?', nil, {{}}, {{}}
  local first, all, none = {_lua_set(FIRST_KEY)}, {_lua_set(ALL_KEYS)}, {_lua_set(NO_KEYS)}
  local tagged = {_lua_set(TAGGED)}
  -- A key's hash tag as Redis Cluster reads it: between the first '{{' and the next '}}' if not empty, else the key.
  local function tag(key)
    return string.match(key, '^[^{{]*{{([^}}]+)}}') or key
  end
  local function check(cmd, ...)
    local name, args = string.upper(cmd), {{...}}
    local last = 1
    if none[name] then return end
    if all[name] then last = #args
    elseif not first[name] then error('key guard: no key positions known for ' .. name, 0) end
    if keys ~= KEYS then
      keys, declared, tags = KEYS, {{}}, {{}}
      for _, key in ipairs(KEYS) do
        declared[key] = true
        tags[tag(key)] = true
      end
    end
    for i = 1, last do
      local key, message = args[i], nil
      if tagged[script] then
        if not tags[tag(tostring(key))] then message = 'key of another hash tag in ' end
      elseif not declared[key] then
        message = 'undeclared key in '
      end
      if message then
        message = message .. script .. '.lua: ' .. name .. ' ' .. tostring(key)
        {refuse}
      end
    end
  end
  local shadow = {{
    register_function = redis.register_function,
    call = function(cmd, ...) check(cmd, ...) return redis.call(cmd, ...) end,
    pcall = function(cmd, ...) check(cmd, ...) return redis.pcall(cmd, ...) end,
  }}
  function shadow.guard_script(name)
    script = name
    setmetatable(shadow, {{__index = redis}})
  end
  return shadow
end)()
"""


# KEY_GUARD=audit: log every undeclared key to redis-server's log instead (the audit of issue 30).
_PRELUDE = prelude(os.environ.get("KEY_GUARD") == "audit")
_NAMED = {name: f"redis.guard_script('{name}')\n" for name in SCRIPTS}
_GUARDED = {name: _PRELUDE + _NAMED[name] + script.source for name, script in SCRIPTS.items()}


def guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every script of SCRIPTS runs guarded until the test ends (calls made in this process: a
    daemon started by the test runs its own, unguarded)."""
    for name, script in SCRIPTS.items():
        monkeypatch.setattr(script, "source", _GUARDED[name])
        monkeypatch.setattr(script, "body", _NAMED[name] + script.body)
        monkeypatch.setattr(script, "sha", hashlib.sha1(_GUARDED[name].encode()).hexdigest())
        monkeypatch.setattr(script, "function", script.function)  # (renamed by the guarded library below)
    # On Redis >= 7 and Valkey the scripts run as functions: the guard goes at the top of the library, where
    # the lib's helpers see it, and each function names itself. The dialects remember names and loads by
    # script name: fresh ones for the test (and for every client, asked again), so no call mixes a guarded
    # name with an unguarded load.
    monkeypatch.setattr(dialect, "LIBRARY", Library(SCRIPTS.values(), _PRELUDE))
    monkeypatch.setattr(dialect, "EVALSHA", dialect.Evalsha())
    monkeypatch.setattr(dialect, "FCALL", dialect.Fcall())
    monkeypatch.setattr(dialect, "_chosen", weakref.WeakKeyDictionary())
