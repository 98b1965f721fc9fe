"""How the PHP and Node clients call their scripts, as the Python client does (delayd.store.dialect): FCALL of
delayd's function library where the server has functions (Redis >= 7, Valkey), EVALSHA on Redis 6.2; a server that
lost the library (FUNCTION FLUSH) or the script cache (SCRIPT FLUSH) gets it again and each call lands once; a
library of another delayd build stays beside theirs; on a Redis Cluster (Node's ioredis Cluster) the calls of
one addMany go to each bucket's node and a load to every master. The suite's default server is Redis 6.2:
scripts/test's server matrix runs this module again on Redis 7 and Valkey (DELAYD_TEST_REDIS)."""
from __future__ import annotations

import json
from typing import Any

import pytest
from cluster_helper import Cluster
from node_helper import NodeProducer
from php_helper import php, require_php
from redis_server import RedisServer, has_functions, lose_scripts, script_loads

from delayd import Client
from delayd.store.scripts import LIBRARY

pytestmark = pytest.mark.system  # (php and node processes)

ADD, MANY, DELETE, LOSE = "add", "add_many", "delete", "lose"
BATCH = [{"topic": "m", "id": i, "push": "q"} for i in range(300)]  # every bucket, one add.lua call each


def php_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def run_php(redis_url: str, r, ops: list[tuple]) -> list[Any]:
    """`ops` by one PHP Client, in one process: each op's answer (LOSE: FUNCTION FLUSH and SCRIPT FLUSH, None)."""
    lose = "$redis->script('flush');" + (" $redis->rawCommand('FUNCTION', 'FLUSH');" if has_functions(r) else "")
    code = ["$out = [];"]
    for op, *args in ops:
        if op == LOSE:
            code.append(f"{lose} $out[] = null;")
        elif op == DELETE:
            code.append(f"$out[] = $client->delete({php_literal(args[0])}, {php_literal(str(args[1]))});")
        else:
            data, nx = php_literal(json.dumps(args[0])), "true" if args[1] else "false"
            code.append(f"$out[] = $client->add(json_decode({data}, true) + ['nx' => {nx}]);" if op == ADD else
                        f"$out[] = $client->addMany(json_decode({data}, true), {nx});")
    return json.loads(php("\n".join(code) + "\necho json_encode($out);", redis_url).stdout)


def run_node(redis_url: str, r, ops: list[tuple]) -> list[Any]:
    """`ops` by one Node Client, in one process (LOSE from here, between its calls)."""
    producer = NodeProducer(redis_url)
    try:
        out = []
        for op, *args in ops:
            if op == LOSE:
                out.append(lose_scripts(r))
            else:
                out.append(producer.delete(*args) if op == DELETE else
                           producer.add(*args) if op == ADD else producer.add_many(*args))
        return out
    finally:
        producer.close()


@pytest.fixture(params=["php", "node"])
def run(request):
    if request.param == "php":
        require_php()
        return run_php
    return run_node


def script_calls(r) -> dict[str, dict[str, int]]:
    """The script-call commands the server counted (since CONFIG RESETSTAT): name -> calls, failed (Redis >= 7)."""
    stats = r.info("commandstats")
    return {name: {"calls": stats[key]["calls"], "failed": stats[key].get("failed_calls", 0)}
            for name in ("evalsha", "eval", "fcall") if (key := f"cmdstat_{name}") in stats}


def libraries(r) -> set[str]:
    """The names of the function libraries the server holds (FUNCTION LIST's, a flat list per library in RESP2)."""
    return {dict(zip(lib[::2], lib[1::2]))["library_name"] for lib in r.function_list()}


@pytest.fixture
def fresh(r):
    """A server without delayd's scripts or functions, its statistics reset."""
    lose_scripts(r)
    r.config_resetstat()
    return r


def test_calls_are_fcalls_of_the_library_python_loads_where_the_server_has_functions(run, redis_url, fresh):
    """Add, addMany, delete: FCALL of delayd's library on Redis 7 and Valkey (the library Python calls: Python's
    own calls after them load nothing), EVALSHA of the linked scripts on 6.2."""
    r = fresh
    assert run(redis_url, r, [(ADD, {"topic": "t", "id": 1, "push": "q"}, False), (MANY, BATCH, False),
                              (DELETE, "t", 1)]) == [True, 300, True]
    calls = script_calls(r)
    if has_functions(r):
        assert set(calls) == {"fcall"} and calls["fcall"]["calls"] - calls["fcall"]["failed"] == 6
        assert libraries(r) == {LIBRARY.name}
    else:
        assert set(calls) == {"evalsha"}
    loads = script_loads(r)
    python = Client.from_url(redis_url)
    python.add("t", 2, push="q")
    python.add_many([{"topic": "t", "id": 3, "push": "q"}])
    python.delete("t", 2)
    python.close()
    assert script_loads(r) == loads  # (6.2: the clients loaded the scripts Python calls by the same SHA1s)


def test_after_the_server_lost_the_library_each_call_loads_it_and_lands_once(run, redis_url, fresh):
    """FUNCTION FLUSH (SCRIPT FLUSH on 6.2) before each call: the call is refused, the client loads the library
    (the script) once and sends the call again, once: an nx add and an nx addMany of new tasks write them all."""
    r = fresh
    ops = [(ADD, {"topic": "t", "id": 1, "push": "q"}, True), (LOSE,),
           (ADD, {"topic": "t", "id": 2, "push": "q"}, True), (LOSE,),
           (MANY, BATCH, True), (LOSE,),
           (DELETE, "t", 1)]
    assert run(redis_url, r, ops) == [True, None, True, None, 300, None, True]
    if has_functions(r):  # (Redis 6.2 counts neither failed calls nor loads apart from other SCRIPT commands)
        assert r.info("commandstats")["cmdstat_function|load"]["calls"] == 4  # at the first call, after each loss
        calls = script_calls(r)
        # 2 adds, the batch's 4 calls (one per bucket), 1 delete
        assert set(calls) == {"fcall"} and calls["fcall"]["calls"] - calls["fcall"]["failed"] == 7
        assert libraries(r) == {LIBRARY.name}
    assert r.hget(next(r.scan_iter("delayd:{*}:t:t:1")), "status") == "deleted"
    assert sum(1 for _ in r.scan_iter("delayd:{*}:t:m:*")) == 300


def test_a_library_of_another_delayd_build_stays_beside_the_clients_own(run, redis_url, fresh):
    """Function names carry the library's hash: a server holding another build's library (here delayd's under
    another hash, as an older build's would be named) gets this build's loaded beside it, and both stay."""
    r = fresh
    if not has_functions(r):
        pytest.skip("Redis 6.2 has no functions (scripts/test's server matrix runs this on Redis 7 and Valkey)")
    older = "delayd_0123456789abcdef"
    r.function_load(LIBRARY.code.replace(LIBRARY.name, older))
    assert run(redis_url, r, [(ADD, {"topic": "t", "id": 1, "push": "q"}, False), (MANY, BATCH, False)]) == [True, 300]
    assert libraries(r) == {older, LIBRARY.name}
    calls = script_calls(r)
    assert set(calls) == {"fcall"} and calls["fcall"]["calls"] - calls["fcall"]["failed"] == 5



def test_a_server_that_reports_7_without_functions_gets_evalsha(run, r, tmp_path):
    """INFO says Redis 7 but FCALL is not there (a Redis-compatible server, a proxy, an ACL: here a Redis 7 with
    FCALL, FCALL_RO and FUNCTION renamed away): the probe's answer is not `Function not found`, so EVALSHA."""
    if not has_functions(r):
        pytest.skip("the server of this run has no functions (Redis 6.2): nothing to rename")
    gone = ["--rename-command", "FCALL", "", "--rename-command", "FCALL_RO", "", "--rename-command", "FUNCTION", ""]
    with RedisServer(str(tmp_path / "nofunctions"), extra=gone) as server:
        other = server.client()
        assert run(server.url, other, [(ADD, {"topic": "t", "id": 1, "push": "q"}, False), (MANY, BATCH, False),
                                       (DELETE, "t", 1)]) == [True, 300, True]
        assert set(script_calls(other)) == {"evalsha"}
        other.close()


def test_node_on_a_cluster_sends_each_bucket_to_its_node_and_loads_on_every_master():
    """One addMany's calls span the buckets' slots, on three masters (an ioredis pipeline refused that: "All keys
    in the pipeline should belong to the same slots allocation group"); after every node lost the scripts
    (FUNCTION FLUSH, SCRIPT FLUSH) the load reaches whichever master the next call goes to."""
    with Cluster(3) as cluster:
        producer = NodeProducer(cluster.url)
        python = Client.from_url(cluster.url)
        try:
            assert producer.add({"topic": "t", "id": 1, "push": "q"}) is True
            assert producer.add_many(BATCH) == 300
            for node in cluster.nodes:
                lose_scripts(node.client())
            assert producer.add_many([{**task, "topic": "n"} for task in BATCH]) == 300
            assert producer.delete("t", 1) is True
            assert python.count("m") == 300 and python.count("n") == 300
            if has_functions(cluster.nodes[0].client()):
                assert all(libraries(node.client()) == {LIBRARY.name} for node in cluster.nodes)
        finally:
            producer.close()
            python.close()
