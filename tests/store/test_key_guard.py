"""The undeclared-key guard itself (tests/key_guard.py): it refuses a key a call leaves out of KEYS,
naming it, and lets through the keys a call declares."""
from __future__ import annotations

import pytest
import redis
from key_guard import KNOWN

from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

PREFIX = "delayd:"


def test_a_key_left_out_of_keys_is_refused_by_name(r):
    """delete.lua as a producer of protocol 1 sends it (without the topic's parked set): the key the
    script then names itself is refused; the call as Store sends it goes through."""
    store = Store(r, PREFIX, 1)
    keys = store.keys[0]
    declared = [keys.task("t:1"), keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"),
                keys.done("deleted"), keys.quarantine, keys.counts, keys.paused, keys.recurring]
    refused = r"undeclared key in delete\.lua: TYPE delayd:\{0\}:paused:t"
    with pytest.raises(redis.exceptions.ResponseError, match=refused):
        Transport(r).call(ScriptCall(SCRIPTS["delete"], declared, ["t:1", 0, 1000]))
    assert Transport(r).call(ScriptCall(SCRIPTS["delete"], [*declared, keys.parked("t")], ["t:1", 0, 1000])) == 0


def test_setting_a_key_aside_needs_the_slots_corrupt_hash_declared(r):
    """A key of the wrong type goes to the slot's `corrupt` hash, which the call must declare (a producer of
    protocol 1 may leave it out of delete's KEYS: refused here, as Dragonfly would)."""
    store = Store(r, PREFIX, 1)
    keys = store.keys[0]
    declared = [keys.task("t:1"), keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"),
                keys.done("deleted"), keys.quarantine, keys.counts, keys.paused, keys.recurring, keys.parked("t")]
    r.set(keys.leases, "not a zset")
    refused = r"undeclared key in delete\.lua: \w+ delayd:\{0\}:corrupt"
    with pytest.raises(redis.exceptions.ResponseError, match=refused):
        Transport(r).call(ScriptCall(SCRIPTS["delete"], declared, ["t:1", 0, 1000]))
    assert Transport(r).call(ScriptCall(SCRIPTS["delete"], [*declared, keys.corrupt], ["t:1", 0, 1000])) == 0
    assert r.type(keys.leases) == "none" and r.hexists(keys.corrupt, keys.leases)


def test_the_known_keys_name_only_scripts_that_exist():
    assert set(KNOWN) <= set(SCRIPTS)
