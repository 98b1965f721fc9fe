"""`delayd limit` and `delayd limits` (SPEC 8, "Limits") against a real Redis."""
from __future__ import annotations

import json

import pytest
from daemon_helper import delayd, one_line_error

pytestmark = pytest.mark.system


def test_limit_sets_shows_and_clears(redis_url, client):
    out = delayd("limit", "payment:refund", "--rate", "50/s", "--json").stdout
    assert json.loads(out) == {"result": "set", "topic": "payment:refund", "rate": "50/s", "concurrency": None}
    assert "replacing" in delayd("limit", "payment:refund", "--rate", "50/s", "--concurrency", "4").stdout
    delayd("limit", "merchant:sync", "--concurrency", "1")
    listed = json.loads(delayd("limits", "--json").stdout)["limits"]
    assert [(x["topic"], x["rate"], x["concurrency"], x["held"]) for x in listed] == [
        ("merchant:sync", None, 1, 0), ("payment:refund", "50/s", 4, 0)]
    table = delayd("limits").stdout
    assert "payment:refund" in table and "50/s" in table
    assert [limit.topic for limit in client.limits()] == ["merchant:sync", "payment:refund"]
    assert "cleared" in delayd("limit", "payment:refund", "--clear").stdout
    assert "had no limit" in delayd("limit", "payment:refund", "--clear").stdout
    assert [limit.topic for limit in client.limits()] == ["merchant:sync"]


@pytest.mark.parametrize("args, code", [
    (["t"], 2), (["t", "--clear", "--rate", "1/s"], 2), (["t", "--rate", "5/d"], 2), (["t", "--rate", "0/s"], 2),
    (["t", "--concurrency", "0"], 2), (["bad topic!", "--rate", "1/s"], 1)])
def test_limit_refuses_bad_input_in_one_line_and_writes_nothing(redis_url, client, args, code):
    proc = delayd("limit", *args, check=code)
    if code == 1:
        assert "topic" in one_line_error(proc)
    assert client.limits() == []


def test_a_limit_on_a_topic_without_tasks_warns_as_pause_does(redis_url, client):
    proc = delayd("limit", "paymnet:refund", "--concurrency", "2")
    assert one_line_error(proc) == ("delayd: warning: no task of topic paymnet:refund exists (a typo?); limited all "
                                    "the same: tasks added to it later are held by the limit")
    assert [(x.topic, x.concurrency) for x in client.limits()] == [("paymnet:refund", 2)]
    client.add("payment:refund", 1, call="delayd.examples:echo", delay=600)
    assert delayd("limit", "payment:refund", "--rate", "5/s").stderr == ""
    assert delayd("limit", "nothing:here", "--clear").stderr == "", "clearing warns of nothing"
