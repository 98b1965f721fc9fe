"""A call flagged 'c' (docs/protocol.md, section 7: the producer checked every task itself) is not decoded
by add.lua's whole gate; a producer that says so wrongly must still never get a task run wrongly. Each of
add_gate's refused specs, sent raw with 'c', is either still refused by the script (what the daemon would
read otherwise than it was written, and a URL's host and port: SPEC section 9) or written, and then set
aside at its first claim with its reason, never run: the real daemon's claim and decode path
(delayd.workers.queue.claims, delayd.model.record)."""
from __future__ import annotations

import pytest
import redis
from redis_server import wait_for
from test_add_gate import BAD_RECURRING_SPECS, BAD_SPECS

from delayd.model.task import Task
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transport import Transport

pytestmark = pytest.mark.daemon(buckets=2, queues=1)

TARGET = "delayd.examples:record"  # allowed by default: a run would be seen (it fails without params)
# (spec, mode) of every refusal of add_gate about a spec, and the modes a spec alone can contradict.
CASES = [*((spec, "delay") for spec, _ in BAD_SPECS), *((spec, "delay*") for spec, _ in BAD_RECURRING_SPECS),
         ('{"call":"a:b"}', "delay*"), ('{"call":"a:b","every":60}', "delay"), ('{"call":"a:b","every":60}', "next*"),
         ('{"call":"a:b","callback":"c:d","params":{"x":1},"bogus":1}', "delay"),
         ('{"call":"a:b","params":{"x":1},"params":[1]}', "delay"), ('{"call":"a:b","params":[ ]}', "delay"),
         ('{"call":"a:b","params":{"x":"\xff"}}'.encode("latin-1"), "delay"),
         # a null schedule (not recurring to the daemon), a field named twice, numbers and text the daemon reads
         # otherwise than the add script's cjson (tests/store/test_json_agreement.py)
         ('{"call":"a:b","every":null}', "delay*"), ('{"call":"a:b","cron":null}', "delay*"),
         ('{"call":"a:b","cron":null}', "next*"), ('{"call":"a:b","call":"a:b"}', "delay"),
         ('{"url":"http://127.0.0.1:9/1","url":"http://127.0.0.1:9/2"}', "delay"),
         ('{"url":"http://127.0.0.1:9/1","params":{"url":1},"url":"http://127.0.0.1:9/1"}', "delay"),
         *((f'{{"call":"a:b","params":{{"x":{value}}}}}', "delay") for value in (
             "NaN", "-Infinity", "1e400", "1" + "0" * 400, '"\\ud800"', '"\\udc00\\ud800"'))]


def test_a_bad_task_sent_as_checked_is_refused_or_set_aside_at_claim_never_run(daemon, client, r):
    store = client.store
    written, refused = [], []
    for n, (spec, mode) in enumerate(CASES):
        task = Task.new("bad", n, call=TARGET)
        call = store.add_call(store.keys_for(task.key), [(task, mode, 0)], False)
        target = f'"{TARGET}"'
        named = spec.replace(b'"a:b"', target.encode()) if isinstance(spec, bytes) else spec.replace('"a:b"', target)
        args = [*call.args[:2], named, *call.args[3:]]
        try:
            assert Transport(r).call(ScriptCall(SCRIPTS["add"], call.keys, args)) == 1
            written.append(task.key)
        except redis.exceptions.ResponseError as exc:
            assert "delayd:bad-task" in str(exc)
            refused.append(spec)
    assert len(written) >= len(CASES) // 2, refused  # (half are left to the claim: what this test is about)

    def ran(member: str) -> bool:  # its run's attempt is recorded (a claim alone counts `runs`)
        return r.hexists(store.keys_for(member).task(member), "attempts")

    def quarantined(member: str) -> bool:
        keys = store.keys_for(member)
        return bool(r.hget(keys.quarantine, member)) and r.hget(keys.task(member), "status") == "failed"

    wait_for(lambda: all(quarantined(m) or ran(m) for m in written), 30, message="every written task claimed")
    assert not [CASES[int(m.partition(":")[2])] for m in written if ran(m)]
    for member in written:
        assert r.hget(store.keys_for(member).task(member), "error").startswith("quarantined: ")
