"""The add script reads a spec with Redis's cjson, the daemon with Python's json (delayd.model.record.from_record),
and the two decoders differ: cjson takes hex numbers, `nan`, `inf`, `+1`, `01`, `1.`, raw control characters in a
string and a NUL after the object, and makes an integer too large for a double infinite; Python takes lone
surrogates, NaN and Infinity, and integers of any size; both let the last of a field named twice win, where the
add script's pattern reads the first. docs/protocol.md section 7: whatever the add script takes (without 'c'),
the reader takes, with the same values, and the other way round. Each spec here goes to both."""
from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delayd.model.origin import origin
from delayd.model.record import from_record
from delayd.model.task import Task, TaskError
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

NULLABLE = ("callback", "timeout", "method", "body", "params", "intervals", "persistent", "retries", "trace",
            "every", "cron", "tz", "push", "url", "signing_key")
# (spec, mode) that both take.
TAKEN = [
    # numbers both read alike, and values only the reader reads (params: an integer beyond 2**53 too)
    ('{"call":"a:b","params":{"x":-0,"y":-0.0,"z":1E+2,"w":1e-400,"v":0.5,"u":123456789012345678901234567890}}',
     "delay"),
    ('{"call":"a:b","params":{"x":1.7976931348623157e308,"y":-1' + "0" * 300 + '}}', "delay"),
    ('{"call":"a:b","intervals":[-0,1e1]}', "delay"), ('{"call":"a:b","every":6e1}', "delay*"),
    ('{"call":"a:b","retries":3.0}', "delay"), ('{"call":"a:b","retries":1e3}', "delay"),  # (an integer's value)
    # strings, white space
    ('{"call":"a:b","params":{"x":"\\ud83d\\ude00\\u0000\\/\\n"}}', "delay"), (' \t{"call":"a:b"}\r\n ', "delay"),
    # names: escaped; named twice in params (the last wins for both) or named there as a field
    ('{"c\\u0061ll":"a:b"}', "delay"), ('{"call":"a:b","params":{"x":1,"x":2}}', "delay"),
    ('{"url":"http://a.example/x","params":{"url":"http://b.example/y","every":1,"url":2}}', "delay"),
]
# (spec, mode) that both refuse.
REFUSED = [
    # numbers JSON does not have, or that a double cannot hold
    *((f'{{"call":"a:b","params":{{"x":{number}}}}}', "delay") for number in (
        "0x10", "0X1p3", "NaN", "-NaN", "nan", "Infinity", "-Infinity", "inf", "-inf", "infinity", "+1", "01", "-01",
        "1.", "-.5", "1.e5", "1e400", "-1e400", "1.8e308", "1" + "0" * 400, "-1" + "0" * 400, "1" + "0" * 5000)),
    ('{"url":"http://h/","params":{"x":0x10}}', "delay"), ('{"call":"a:b","params":{"x":[1,{"y":NaN}]}}', "delay"),
    ('{"call":"a:b","timeout":NaN}', "delay"), ('{"call":"a:b","intervals":[Infinity]}', "delay"),
    ('{"call":"a:b","every":1e400}', "delay*"), ('{"call":"a:b","retries":0x3}', "delay"),
    ('{"call":"a:b","retries":2.5}', "delay"),
    # strings: a control character, a lone surrogate; text around the object
    *((f'{{"call":"a:b","params":{{"x":"{text}"}}}}', "delay") for text in (
        "a\nb", "a\tb", "\x01", "\\ud800", "\\uDC00", "\\ud800\\ud800", "\\udc00\\ud800")),
    ('{"call":"a:b"}\x00', "delay"), ('\ufeff{"call":"a:b"}', "delay"), ('{"call":"a:b"} x', "delay"),
    # a field named twice
    ('{"call":"a:b","call":"c:d"}', "delay"), ('{"call":"a:b","c\\u0061ll":"c:d"}', "delay"),
    ('{"url":"http://a.example/x","url":"http://b.example/y"}', "delay"),
    ('{"url":"http://a.example/x","url":null,"call":"a:b"}', "delay"),
    ('{"call":"a:b","params":{},"params":{"x":1}}', "delay"), ('{"call":"a:b","every":60,"every":60}', "delay*"),
    # null is no value of any field
    *((f'{{"call":"a:b","{name}":null}}', "delay*" if name in ("every", "cron") else "delay") for name in NULLABLE),
    ('{"call":null,"push":"q"}', "delay"), ('{"call":"a:b","cron":null}', "next*"),
]


@pytest.fixture
def store(r):
    return Store(r, "delayd:", 1)


def gate(r, store: Store, spec: str, mode: str) -> dict | None:
    """The record add.lua writes of `spec` sent without 'c' (the whole gate), None if it refuses it."""
    task = Task.new("t", 1, call="shop.tasks:run")
    call = store.add_call(store.keys[0], [(task, "delay", 0)], False)
    args = ["0", call.args[1], spec, "2", mode, "0"]
    try:
        Transport(r).call(ScriptCall(SCRIPTS["add"], call.keys, args))
    except redis.exceptions.ResponseError as exc:
        assert str(exc).startswith("delayd:bad-task "), exc
        return None
    return r.hgetall(store.keys[0].task("t:1"))


def reader(spec: str) -> Task | None:
    try:
        return from_record("t:1", {"spec": spec, "status": "delayed", "created": "1", "due": "1"})
    except TaskError:
        return None


@pytest.mark.parametrize("spec, mode, taken", [*((s, m, True) for s, m in TAKEN), *((s, m, False) for s, m in REFUSED)],
                         ids=lambda value: repr(value)[:60] if isinstance(value, str) else None)
def test_the_add_script_and_the_reader_take_and_refuse_the_same_specs(r, store, spec, mode, taken):
    record, task = gate(r, store, spec, mode), reader(spec)
    assert (record is not None, task is not None) == (taken, taken), "(the gate takes it, the reader takes it)"
    if taken:  # what the gate wrote of it is what the reader reads: its target, host and schedule
        assert record["spec"] == spec
        assert ("url" in record, record.get("host")) == (task.url is not None, task.url and origin(task.url))
        assert (r.zscore(store.keys[0].recurring, "t:1") is not None) == task.recurring


# Number-like text cjson's reader (strtod) might take: digits, signs, points, exponents, and the letters of
# nan, inf, infinity, hex and JSON's words; and where in a spec it stands.
_NUMBERISH = st.text("0123456789.eE+-xXabcdefpPnNaAiIfFtTyYlsur()", min_size=1, max_size=10)
_PLACES = ['{"call":"a:b","params":{"x":%s}}', '{"push":"q","params":{"x":%s}}', '{"call":"a:b","params":{"x":[1,%s]}}',
           '{"call":"a:b","timeout":%s}']


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(token=_NUMBERISH, where=st.sampled_from(_PLACES))
def test_a_number_is_read_alike_or_refused_by_both(r, store, token, where):
    spec = where % token
    assert (gate(r, store, spec, "delay") is not None) == (reader(spec) is not None)
