"""delayd.store.dialect: script calls go as FCALL of delayd's function library where the server has
functions (Redis >= 7, Valkey: the server matrix, DELAYD_TEST_REDIS) and by EVALSHA on 6.2 (the
embedded server); a library lost mid-run is loaded again; it outlives a restart and SCRIPT FLUSH."""
from __future__ import annotations

import asyncio

import pytest
from redis_server import RedisServer, has_functions, lose_scripts, script_loads
from test_recovery import primary_and_replica  # noqa: F401 (a fixture)

from delayd import AsyncClient, Client
from delayd.store import dialect
from delayd.store.scripts import SCRIPTS


def calls_by_command(r) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval", "fcall", "fcall_ro")}


def test_the_dialect_follows_the_server_version():
    valkey = {"server_name": "valkey", "redis_version": "7.2.4", "valkey_version": "8.0.1"}
    assert dialect.choose({"redis_version": "6.2.14"}) is dialect.EVALSHA
    assert dialect.choose({"redis_version": "7.0.15"}) is dialect.FCALL
    assert dialect.choose(valkey) is dialect.FCALL
    # A Cluster's INFO, one reply per node: functions only when every node has them.
    assert dialect.choose({"a:1": {"redis_version": "7.0.15"}, "b:2": valkey}) is dialect.FCALL
    assert dialect.choose({"a:1": {"redis_version": "7.0.15"}, "b:2": {"redis_version": "6.2.14"}}) is dialect.EVALSHA
    assert dialect.choose({}) is dialect.EVALSHA


def test_fcall_refused_as_an_unknown_command_says_the_server_changed_kind():
    """Redis 6.2 quotes the command with backquotes, 7 with quotes; another refusal is not one
    (tests/daemon/test_server_change.py swaps the servers under a daemon)."""
    import redis
    for text in ("unknown command `FCALL`, with args beginning with: `delayd_x_add`, ",
                 "unknown command 'FCALL_RO', with args beginning with: 'delayd_x_stats' "):
        assert dialect.FCALL.unknown(redis.exceptions.ResponseError(text))
        assert not dialect.EVALSHA.unknown(redis.exceptions.ResponseError(text))
    for text in ("Function not found", "unknown command `EVALSHA`, with args beginning with: "):
        assert not dialect.FCALL.unknown(redis.exceptions.ResponseError(text))
    assert not dialect.FCALL.unknown(redis.exceptions.NoPermissionError("unknown command 'FCALL'"))


def test_calls_go_as_functions_where_the_server_has_them_else_by_evalsha(client, r):
    """On Redis 7+ and Valkey the library is loaded (FUNCTION LIST: every script, the read-only ones
    flagged no-writes) and called with FCALL / FCALL_RO; on 6.2 every call is an EVALSHA."""
    r.config_resetstat()
    client.add("t", 1, call="a:b", delay=60)
    client.add_many([{"topic": "t", "id": i, "call": "a:b", "delay": 60} for i in range(2, 50)])
    assert client.stats()["counts"]["delayed"] == 49
    calls = calls_by_command(r)
    if has_functions(r):
        assert calls["evalsha"] == calls["eval"] == 0 and calls["fcall"] >= 2 and calls["fcall_ro"] >= 1, calls
        [library] = r.function_list(library=dialect.LIBRARY.name)
        functions = {f["name"]: set(f["flags"]) for f in _fields(library)["functions"]}
        flags = {"browse": {"no-writes"}, "stats": {"no-writes"}, "delete": {"allow-oom"}}
        assert functions == {s.function: flags.get(s.name, set()) for s in SCRIPTS.values()}
    else:
        assert calls["fcall"] == calls["fcall_ro"] == 0 and calls["evalsha"] >= 3, calls


def _fields(row):
    """A FUNCTION LIST row (RESP2: a flat list of names and values) as a dict, its functions too."""
    fields = dict(zip(row[::2], row[1::2])) if isinstance(row, list) else dict(row)
    fields["functions"] = [dict(zip(f[::2], f[1::2])) if isinstance(f, list) else f for f in fields["functions"]]
    return fields


def test_scripts_lost_mid_run_are_loaded_again_once(client, r, redis_url):
    """SCRIPT FLUSH and FUNCTION FLUSH between calls: a single add (held connection), a streamed
    add_many, the pipelined stats and the async client's calls each load what they miss and go on."""
    client.add("t", 0, call="a:b")
    for round_ in range(1, 3):
        lose_scripts(r)
        r.config_resetstat()
        assert client.add("t", f"{round_}-one", call="a:b") is True
        assert script_loads(r) == 1  # (functions: the whole library; EVALSHA: add.lua)
        lose_scripts(r)
        assert client.add_many([{"topic": "t", "id": f"{round_}-{i}", "call": "a:b"} for i in range(400)]) == 400
        lose_scripts(r)
        assert client.stats()["counts"]["delayed"] == 1 + round_ * 401

    async def app() -> int:
        async with AsyncClient.from_url(redis_url) as c:
            await c.add("a", 0, call="a:b")
            lose_scripts(r)
            await c.add("a", 1, call="a:b")
            lose_scripts(r)
            return await c.add_many([{"topic": "a", "id": i, "call": "a:b"} for i in range(2, 300)])
    assert asyncio.run(app()) == 298
    assert client.count("a") == 300


def test_another_builds_library_is_left_alone(client, r):
    """Two delayd builds sharing a Redis: each calls its own library (named after its scripts'
    hash); loading ours does not replace theirs."""
    if not has_functions(r):
        assert dialect.LIBRARY.name.startswith("delayd_")
        return
    other = "delayd_0000000000000000"
    r.function_load(f"#!lua name={other}\n"
                    f"redis.register_function('{other}_add', function(keys, args) return 'theirs' end)")
    lose_scripts(r)  # (FUNCTION FLUSH: theirs goes too; loaded again below)
    r.function_load(f"#!lua name={other}\n"
                    f"redis.register_function('{other}_add', function(keys, args) return 'theirs' end)")
    assert client.add("t", 1, call="a:b") is True
    assert r.fcall(f"{other}_add", 0) == "theirs"
    assert {_fields(row)["library_name"] for row in r.function_list()} == {other, dialect.LIBRARY.name}


def test_a_restart_keeps_the_library_but_not_the_script_cache(tmp_path):
    """What functions fix: a restarted Redis has lost its script cache (6.2 may rebuild it from the
    EVALs in its AOF; 7+ keeps no scripts there), so EVALSHA can meet NOSCRIPT and load again;
    functions are persisted with the data and need no load."""
    with RedisServer(str(tmp_path / "aof"), aof=True) as server:
        client = Client.from_url(server.url)
        client.add("t", 1, call="a:b")
        r = server.client()
        functions = has_functions(r)
        server.restart()
        r = server.client()
        r.config_resetstat()
        assert client.add("t", 2, call="a:b") is True
        assert script_loads(r) == 0 if functions else script_loads(r) <= 1
        assert client.count("t") == 2
        client.close()


@pytest.mark.system
def test_on_a_cluster_every_master_gets_the_library_and_a_flushed_one_loads_it_again():
    """Redis Cluster: FUNCTION LOAD goes to every master (redis-py sends it to all primaries) and each
    FCALL to the master of its keys; after FUNCTION FLUSH on every node the calls load it again."""
    from cluster_helper import Cluster
    with Cluster(3) as cluster:
        client = Client.from_url(cluster.url)
        nodes = [node.client() for node in cluster.nodes]
        client.add_many([{"topic": "t", "id": i, "call": "a:b", "delay": 60} for i in range(100)])
        if has_functions(nodes[0]):
            assert all(node.function_list(library=dialect.LIBRARY.name) for node in nodes)
        for node in nodes:
            lose_scripts(node)
        assert client.add("t", "after", call="a:b") is True
        assert client.add_many([{"topic": "u", "id": i, "call": "a:b"} for i in range(100)]) == 100
        assert client.stats()["counts"]["delayed"] == 201
        client.close()


def test_a_promoted_replica_has_the_library(primary_and_replica):  # noqa: F811 (the fixture imported)
    """A failover: the library came to the replica by replication (functions are replicated; the
    script cache is not), so once promoted it runs the calls without a load."""
    primary, replica = primary_and_replica
    # durable: the add returns once the replica has it, so the promotion below cannot outrun it
    Client.from_url(primary.url).add("t", 1, call="a:b", durable=True)
    rr = replica.client()
    rr.replicaof("NO", "ONE")
    rr.config_resetstat()
    client = Client.from_url(replica.url)
    assert client.add("t", 2, call="a:b") is True and client.count("t") == 2
    assert script_loads(rr) == 0 if has_functions(rr) else script_loads(rr) <= 1
    client.close()


def test_a_server_that_reports_7_without_functions_gets_evalsha(r, tmp_path):
    """A server whose INFO says Redis 7 but which has no FCALL (a Redis-compatible server, a proxy, an
    ACL that refuses it: here a Redis 7 with FCALL and FUNCTION renamed away) is spoken to by EVALSHA."""
    if not has_functions(r):
        pytest.skip("the server of this run has no functions (Redis 6.2): nothing to rename")
    gone = ["--rename-command", "FCALL", "", "--rename-command", "FCALL_RO", "",
            "--rename-command", "FUNCTION", ""]
    with RedisServer(str(tmp_path / "nofunctions"), extra=gone) as server:
        client = Client.from_url(server.url)
        assert client.add("t", 1, call="a:b", delay=60) is True
        assert client.add_many([{"topic": "t", "id": i, "call": "a:b", "delay": 60} for i in range(2, 50)]) == 48
        assert client.stats()["counts"]["delayed"] == 49 and client.get("t", 1).status == "delayed"
        assert calls_by_command(server.client())["evalsha"] >= 3
        client.close()
