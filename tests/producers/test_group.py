"""A task's `group` (SPEC section 10) where the conformance table (which adds, refuses and reads it through every
producer) does not look: `delayd ls`'s column, the dashboard's task page, and the add script's refusal of a call
that skipped every producer's checks."""
from __future__ import annotations

import pytest
import redis
from daemon_helper import delayd
from web_helper import TOKEN, Web

from delayd.model.task import Task, TaskError
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

REFUSAL = "group must be 1-128 characters, none of them a control character"


@pytest.mark.parametrize("group", ["", "g" * 129, "a\tb", "a\x7fb", "a\x9fb", 42, ["g"]])
def test_a_bad_group_is_refused_in_one_line(group):
    with pytest.raises(TaskError, match=f"^{REFUSAL}, got "):
        Task.new("t", 1, call="a:b", group=group)


@pytest.mark.system
def test_ls_and_the_dashboard_show_the_group(redis_url, client):
    client.add("order:cancel", 42, call="shop.tasks:run", group="merchant-42", delay=600)
    client.add("order:cancel", 43, call="shop.tasks:run", delay=600)
    lines = delayd("ls", DELAYD_REDIS_URL=redis_url).stdout.splitlines()
    assert lines[0].split() == ["KEY", "STATUS", "RUNS", "DUE", "TARGET", "GROUP", "LAST_ERROR"]
    assert "merchant-42" in lines[1] and lines[2].split()[-1] == "-"
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as web, \
            web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert '<tr><th>group</th><td class="mono">merchant-42</td></tr>' in http.get("/tasks/order:cancel/42").text
        assert "<th>group</th>" not in http.get("/tasks/order:cancel/43").text


@pytest.mark.parametrize("group", ['""', '"' + "g" * 129 + '"', '"a\\nb"', '"a\\u0085b"', "42", "[1]"])
def test_the_add_script_refuses_a_bad_group_of_an_unchecked_call(r, group):
    store = Store(r, "delayd:", 1)
    call = store.add_call(store.keys[0], [(Task.new("t", 1, call="a:b"), "delay", 1000)], False)
    args = ["0", *call.args[1:]]  # (without 'c': the producer checked nothing, the script decodes the spec)
    args[2] = '{"call":"a:b","group":' + group + "}"
    with pytest.raises(redis.ResponseError, match="delayd:bad-task group: must be 1-128 characters"):
        Transport(r).call(ScriptCall(SCRIPTS["add"], call.keys, args))
    assert r.keys("*t:t:*") == []
    args[2] = '{"call":"a:b","group":"' + "\u00e9" * 128 + '"}'
    assert Transport(r).call(ScriptCall(SCRIPTS["add"], call.keys, args)) == 1  # (how many it wrote)
