"""clients/php: what the conformance table does not cover (tests/test_conformance.py runs every
case through it too): tasks added from PHP run by the daemon (call, URL, push; a cron task's
first due time), addMany, delete, get, the seed's keys, errors in one line, a store of another
protocol refused (the guide's PHP example, run as written, is tests/system/test_guide_examples.py's)."""
from __future__ import annotations

import json
import re

import pytest
from php_helper import php, require_php
from redis_server import wait_for
from store_helper import claim_due

from delayd.model import schedule
from delayd.store.keys import bucket_of, meta_key

pytestmark = [pytest.mark.usefixtures("php_here"), pytest.mark.system]  # (a php process per test)


@pytest.fixture
def php_here():
    require_php()


@pytest.mark.daemon(buckets=2, queues=1, DELAYD_ALLOWED_MODULES="delayd.examples,handlers_fixture")
def test_tasks_added_from_php_are_run_by_the_daemon(redis_url, r, daemon, client, http, tmp_path):  # noqa: F811
    mark = tmp_path / "mark"
    php(f"""
        $client->add(['topic' => 'job', 'id' => 1, 'call' => 'handlers_fixture:touch',
                      'params' => ['path' => {str(mark)!r}]]);
        $client->add(['topic' => 'hook', 'id' => 2, 'url' => '{http.base}/success', 'method' => 'POST',
                      'params' => ['order' => 42]]);
        $client->add(['topic' => 'mail', 'id' => 3, 'push' => 'outbox', 'params' => ['to' => 'a@example.com']]);
        $client->add(['topic' => 'report', 'id' => 4, 'call' => 'handlers_fixture:touch', 'cron' => '0 0 1 1 *',
                      'tz' => 'Europe/Berlin']);
    """, redis_url)
    wait_for(lambda: mark.exists() and mark.read_text() == "job:1:1\n", 15, message="the call task ran")
    wait_for(lambda: [q["method"] for q in http.requests] == ["POST"], 15, message="the URL was requested")
    assert http.requests[0]["path"] == "/success" and b"order=42" in http.requests[0]["body"]
    wait_for(lambda: r.llen("outbox") == 1, 15, message="the push task was pushed")
    assert json.loads(r.lindex("outbox", 0))["params"] == {"to": "a@example.com"}
    for topic, id in (("job", 1), ("hook", 2), ("mail", 3)):
        wait_for(lambda: client.get(topic, id).status == "ok", 15, message=f"{topic}:{id} ok")
    # The cron task: its first due time given by the daemon, the calendar's next after its add.
    task = client.get("report", 4)
    wait_for(lambda: client.get("report", 4).due_at != task.created_at, 15, message="first due time resolved")
    expected = schedule.next_cron("0 0 1 1 *", "Europe/Berlin", round(task.created_at * 1000))
    assert client.get("report", 4).due_at == expected / 1000 and client.get("report", 4).runs == 0


def test_add_many_delete_and_get(redis_url, r, client):
    out = php("""
        $tasks = [];
        for ($i = 0; $i < 450; $i++) { $tasks[] = ['topic' => 'bulk', 'id' => $i, 'call' => 'a.b:c', 'delay' => 60]; }
        echo $client->addMany($tasks), ' ';
        echo $client->addMany(array_slice($tasks, 0, 10), true), ' ';
        echo $client->addMany([['topic' => 'fresh', 'id' => 1, 'call' => 'a.b:c'],
                               ['topic' => 'fresh', 'id' => 2, 'call' => 'a.b:c']], true), ' ';
        echo json_encode($client->delete('bulk', '1')), json_encode($client->delete('bulk', 2, true)), ' ';
        echo json_encode($client->delete('bulk', 'missing')), ' ';
        echo json_encode($client->get('bulk', 'missing')), ' ', $client->get('bulk', 1)['status'];
    """, redis_url).stdout
    assert out == "450 0 2 truetrue false null deleted"  # (each add.lua call sent once: a second would write 0)
    assert client.count("bulk") == 449 and client.get("bulk", 2) is None
    assert client.get("bulk", 3).due_at == pytest.approx(client.get("bulk", 3).created_at + 60, abs=0.01)


def test_a_delete_too_late_answers_the_claimed_constant(redis_url, client):
    """SPEC section 10: a run already claimed (its handler may be starting): 'claimed', which is truthy in PHP,
    so a shop compares with === true."""
    client.add("t", 1, call="a.b:c")
    claim_due(client.store, "t:1")
    out = php("""
        $answer = $client->delete('t', 1);
        echo json_encode([$answer, $answer === Delayd\\Client::CLAIMED, $answer === true, $client->delete('t', 1)]);
    """, redis_url).stdout
    assert json.loads(out) == ["claimed", True, False, True]
    assert client.get("t", 1).status == "deleted"


def test_the_seed_keys_and_a_bad_item_of_add_many(redis_url, r, client):
    out = php("""
        $client->add(['topic' => 'order:timeout', 'id' => 3, 'call' => 'shop.orders:timeout', 'priority' => 2,
                      'intervalTime' => '0,30,60', 'persistent' => false]);
        try {
            $client->addMany([['topic' => 't', 'id' => 1, 'call' => 'a:b'], ['topic' => 't', 'id' => 2]]);
        } catch (Delayd\\TaskError $e) { echo $e->getMessage(); }
    """, redis_url).stdout
    assert out == "item 1: give exactly one of call, url or push"
    assert client.get("order:timeout", 3).intervals == [0, 30, 60] and client.get("t", 1) is None


def test_an_uncaught_task_error_is_one_line_and_writes_nothing(redis_url, r):
    before = sorted(r.keys("*"))
    proc = php("$client->add(['topic' => 't', 'id' => 1, 'call' => 'a:b', 'every' => 60, 'cron' => '* * * * *']);",
               redis_url, check=False)
    assert proc.returncode == 255 and "give one of intervals, every or cron, not every and cron" in proc.stderr
    assert "Delayd\\TaskError" in proc.stderr
    assert sorted(r.keys("*")) == before  # (checked before Redis is asked anything)


def test_a_store_of_another_protocol_is_refused_in_one_line(redis_url, r, client):
    client.add("t", 1, call="a:b")
    r.hset(meta_key("delayd:"), "protocol", "2")
    before = sorted(r.keys("*"))
    proc = php("try { $client->add(['topic' => 't', 'id' => 2, 'call' => 'a:b']); } "
               "catch (Delayd\\StoreError $e) { echo $e->getMessage(); }", redis_url)
    assert proc.stdout == ("delayd:meta in Redis says protocol = '2'; this client speaks protocol 1 "
                           "(a store of another version of delayd)")
    assert sorted(r.keys("*")) == before


def test_the_script_gate_holds_for_php_too(redis_url, r, client):
    """What only add.lua checks (the producer's own checks skipped) comes back as a TaskError."""
    out = php("""
        $scripts = (new ReflectionProperty($client, 'scripts'))->getValue($client);
        try {
            $scripts->call('add', ['delayd:{0}:delayed', 'delayd:{0}:t:t:1'],
                [0, 'delayd:wake:0', '{"call":"a:b","intervalTime":[3]}', 2, 'delay', 0]);
        } catch (Delayd\\TaskError $e) { echo $e->getMessage(); }
    """, redis_url).stdout
    assert out == 'spec: unknown field "intervalTime" (task 1 of the call)'
    assert client.get("t", 1) is None


def test_add_many_says_how_many_were_written_when_redis_refuses_a_call(redis_url, r, client):
    """Redis refused one call of a batch (here add.lua, a spec over its 1 MiB; OOM alike): PHP threw the
    refusal alone, while the other calls' tasks stood written; Python and Node say "N of M"."""
    other = next(i for i in range(2, 100) if bucket_of(f"t:{i}", 4) != bucket_of("t:1", 4))
    out = php(f"""
        $big = new Delayd\\Client($redis, ['prefix' => 'delayd:', 'params_limit' => 4 << 20]);
        try {{
            $big->addMany([['topic' => 't', 'id' => 1, 'push' => 'q'],
                ['topic' => 't', 'id' => {other}, 'push' => 'q', 'params' => ['x' => str_repeat('y', 2 << 20)]]]);
        }} catch (Delayd\\TaskError $e) {{ echo $e->getMessage(); }}
    """, redis_url).stdout
    assert re.fullmatch(r"spec: .* \(1 of 2 task\(s\) were written\)", out), out
    assert client.get("t", 1) is not None and client.get("t", other) is None
