"""The registry of live daemons (delayd.store.registry, register.lua) against a real Redis."""
from __future__ import annotations

import time

from redis_server import wait_for

from delayd.store import registry


def test_register_lists_then_expires_and_the_next_register_drops_the_dead(r):
    started = time.time()
    registry.register(r, "reg:", "h:1", {"pid": 1, "started": started}, ttl=60)
    registry.register(r, "reg:", "h:2", {"pid": 2, "started": started + 1}, ttl=60)
    assert [d["id"] for d in registry.live(r, "reg:")] == ["h:1", "h:2"]  # oldest start first
    assert all(0 <= d["seen_ago"] < 30 for d in registry.live(r, "reg:"))
    registry.register(r, "reg:", "h:1", {"pid": 1, "started": started}, ttl=0.05)  # its last refresh
    wait_for(lambda: [d["id"] for d in registry.live(r, "reg:")] == ["h:2"], 5, message="h:1 expired")
    info, expires = registry.keys("reg:")
    assert r.hexists(info, "h:1")  # dead but not yet dropped: nobody registered since
    registry.register(r, "reg:", "h:2", {"pid": 2, "started": 0}, ttl=60)
    assert not r.hexists(info, "h:1") and r.zscore(expires, "h:1") is None


def test_unregister_removes_at_once_and_a_refresh_keeps_one_entry(r):
    for _ in range(3):
        registry.register(r, "reg2:", "h:9", {"pid": 9, "started": 0})
    info, expires = registry.keys("reg2:")
    assert r.hlen(info) == 1 and r.zcard(expires) == 1
    registry.unregister(r, "reg2:", "h:9")
    assert registry.live(r, "reg2:") == [] and not r.exists(info) and not r.exists(expires)


def test_an_unreadable_entry_is_skipped(r):
    registry.register(r, "reg3:", "good", {"pid": 1, "started": 0})
    registry.register(r, "reg3:", "bad", {"pid": 2, "started": 0})
    r.hset(registry.keys("reg3:")[0], "bad", "{not json")
    assert [d["id"] for d in registry.live(r, "reg3:")] == ["good"]


def test_keys_share_one_hash_tag():
    info, expires = registry.keys("delayd:")
    assert "{daemons}" in info and "{daemons}" in expires
