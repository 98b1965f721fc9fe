"""The preflight's Redis checks on the server the suite runs (the server matrix runs them on Redis
6.2, Redis 7 and Valkey 8): it names the real server and version, and warns, without refusing to
start, about a server that can evict or lose tasks; a server that refuses CONFIG (managed Redis) only
leaves the eviction policy unchecked, any other refused command stops the start."""
from __future__ import annotations

import logging

import pytest
from redis_server import RedisServer

from delayd.config import load
from delayd.daemon.preflight import StartError, check_redis
from delayd.store import durable
from delayd.store.server_info import describe

VALKEY_INFO = {"server_name": "valkey", "redis_version": "7.2.4", "valkey_version": "8.0.1", "aof_enabled": 0,
               "connected_slaves": 0}


def warnings(caplog) -> dict[str, dict]:
    return {rec.getMessage(): rec.fields for rec in caplog.records if rec.levelno == logging.WARNING}


def test_server_is_named_by_its_own_version():
    assert describe(VALKEY_INFO) == "Valkey 8.0.1"  # not its pinned redis_version
    assert describe({"redis_version": "7.0.15"}) == "Redis 7.0.15"
    assert describe({}) == "Redis ?"
    with pytest.raises(durable.Unconfirmable, match="this one has Valkey 8.0.1, no connected replica"):
        durable.command(VALKEY_INFO, None, 500)
    assert durable.command({**VALKEY_INFO, "aof_enabled": 1}, "everysec", 500)[0] == "WAITAOF"


def test_preflight_names_the_server_and_warns_about_eviction_and_no_aof(redis_url, r, caplog):
    info = r.info("server")
    expected = describe(info)
    assert expected.startswith(("Redis ", "Valkey ")) and "?" not in expected
    caplog.set_level(logging.INFO, logger="delayd.master")
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        check_redis(load())  # warns, does not refuse
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    named = [rec.fields for rec in caplog.records if rec.getMessage() == "redis_server"]
    assert named == [{"server": expected}]
    found = warnings(caplog)
    assert found["redis_may_evict"]["maxmemory_policy"] == "allkeys-lru"
    assert found["redis_not_durable"]["server"] == expected  # the suite's server runs without AOF
    caplog.clear()
    r.config_set("appendonly", "yes")
    try:
        check_redis(load())
    finally:
        r.config_set("appendonly", "no")
    assert warnings(caplog) == {}  # noeviction and AOF: nothing to warn about


def test_preflight_notes_a_setting_that_makes_larger_records_take_more_memory(redis_url, r, caplog):
    """Redis's default hash-max-listpack-value (64) keeps a record compact only while its spec is short:
    a note (not a warning) says what to set; at the embedded Redis's 1024, nothing is said."""
    caplog.set_level(logging.INFO, logger="delayd.master")
    r.config_set("hash-max-ziplist-value", 64)
    check_redis(load())
    (noted,) = [rec.fields for rec in caplog.records if rec.getMessage() == "redis_records_not_compact"]
    assert noted["hash_max_listpack_value"] == 64 and "hash-max-listpack-value 1024" in noted["advice"]
    assert "redis_records_not_compact" not in warnings(caplog)
    caplog.clear()
    r.config_set("hash-max-ziplist-value", 1024)
    try:
        check_redis(load())
    finally:
        r.config_set("hash-max-ziplist-value", 64)
    assert not [rec for rec in caplog.records if rec.getMessage() == "redis_records_not_compact"]


@pytest.fixture
def renamed(request):
    """A redis-server of its own with `request.param` renamed away (as managed Redis does to CONFIG)."""
    server = RedisServer(extra=["--rename-command", request.param, ""]).start()
    yield server
    server.stop()


@pytest.mark.parametrize("renamed", ["CONFIG"], indirect=True)
def test_a_refused_config_is_noted_and_the_other_checks_still_run(renamed, caplog):
    caplog.set_level(logging.INFO, logger="delayd.master")
    check_redis(load(env={"DELAYD_REDIS_URL": renamed.url}))
    (noted,) = [rec.fields for rec in caplog.records if rec.getMessage() == "redis_policy_unknown"]
    assert "unknown command" in noted["reason"].lower() and "CONFIG is refused" in noted["advice"]
    assert set(warnings(caplog)) == {"redis_not_durable"}, "the AOF check after CONFIG still ran"


@pytest.mark.parametrize("renamed", ["INFO"], indirect=True)
def test_any_other_refused_command_stops_the_start(renamed):
    with pytest.raises(StartError, match=r"^Redis at 127\.0\.0\.1:\d+: unknown command .INFO."):
        check_redis(load(env={"DELAYD_REDIS_URL": renamed.url}))
