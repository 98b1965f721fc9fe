"""The function library (FCALL: Redis >= 7, Valkey): the lib's helpers made once, at its top, when it loads,
and each function only its script's body; the lib's per-call state made afresh by every call, so nothing a
call leaves, even one that failed half-way, reaches the next. (On Redis 6.2 each EVALSHA runs its whole
source: the same tests hold there trivially.)"""
from __future__ import annotations

import pytest
import redis
from store_helper import claim, promote_all

from delayd.store import dialect, lua_lib
from delayd.store.replies import Finish
from delayd.store.scripts import SCRIPTS, Script
from delayd.store.steps import ScriptCall
from delayd.store.transport import Transport


def test_the_library_makes_each_helper_once_and_runs_only_the_scripts_bodies_per_call():
    """Every lib definition appears once in the library, above the first function; each function's code
    is the script's body behind the lines that set a call's KEYS, ARGV and per-call state (no definition)."""
    code = dialect.LIBRARY.code  # (the key guard's, in the store tests)
    first = code.index("redis.register_function{")
    defs = lua_lib.definitions(Script._lib)
    for d in defs:
        assert code.count(d.source) == 1 and code.index(d.source) < first, sorted(d.names)
    for script in SCRIPTS.values():
        head = f"function_name='{script.function}', flags={{"
        start = code.index("callback=function(keys, argv)\n", code.index(head))
        callback = code[start:code.index("\nend}\n", start)]
        assert callback.endswith(script.body) and not any(d.source in callback for d in defs), script.name
    assert "counts, runs = {}, {}\n" in lua_lib.callback(defs, SCRIPTS["finish"].body)
    assert "counts, runs" not in lua_lib.callback(defs, SCRIPTS["browse"].body)
    # FUNCTION LOAD runs the top level without Lua's globals: a lib constant made by one is refused here.
    with pytest.raises(ValueError, match="HUGE uses math"):
        lua_lib.library_top(lua_lib.definitions("local HUGE = math.huge\n"))
    # and refuses what Lua 5.1 would (a function over 60 upvalues), which only a Redis >= 7 would show.
    many = lua_lib.definitions("".join(f"local function f{i}() end\n" for i in range(lua_lib.MAX_UPVALUES)))
    with pytest.raises(ValueError, match="at most"):
        lua_lib.callback(many, " ".join(f"f{i}()" for i in range(lua_lib.MAX_UPVALUES)))
    assert lua_lib.callback(many, " ".join(f"f{i}()" for i in range(lua_lib.MAX_UPVALUES - 3)))


def test_a_call_that_fails_after_counting_leaves_nothing_to_the_next(client, r):
    """finish.lua tallies a run's outcome (the lib's `runs`), then fails on a retention that is not a number,
    before it writes anything; the same run's finish then counts it once: the failed call's tally did not
    survive in the library. The windows flush_stats names from the call's KEYS get it too."""
    client.add("t", 1, call="a:b")
    promote_all(client.store, client.store.keys_for("t:1").bucket)
    bucket = client.store.keys_for("t:1").bucket
    [run] = claim(client.store, bucket, n=1)
    call = client.store.finish_call(bucket, [Finish(run["member"], run["claim"], "ok")], 86_400_000)
    failing = ScriptCall(SCRIPTS["finish"], call.keys, ["not a number", *call.args[1:]])
    with pytest.raises(redis.exceptions.ResponseError):
        Transport(r).call(failing)
    assert r.hget(client.store.keys[bucket].task("t:1"), "status") == "running"
    assert Transport(r).call(call) == [1]
    keys = client.store.keys[bucket]
    assert r.hget(keys.totals, "ok|t") == "1"
    windows = [key for key in call.keys if str(key).startswith(keys.window_prefix)]
    assert sum(int(r.hget(key, "ok|t") or 0) for key in windows) == 2  # its 10-second window and its minute
