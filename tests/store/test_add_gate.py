"""add.lua as the one gate of validity (docs/protocol.md, section 7): a producer that skips
every client-side check, sending raw EVALSHA, still cannot write a task the daemon would
misread. Each bad call gets `ERR delayd:bad-task <field>: ...` (or `delayd:bad-call` for
KEYS/ARGV of the wrong shape) and writes nothing, not even the good tasks beside the bad one."""
from __future__ import annotations

import json
from importlib import resources

import pytest
import redis

from delayd.model.record import spec_json
from delayd.model.task import Task
from delayd.store.scripts import SCRIPTS, Script
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

TEN_YEARS_MS = 10 * 365 * 86400 * 1000
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def store(r):
    return Store(r, "delayd:", 1)


def raw_call(store: Store, tasks: list, flags: str = "0") -> tuple[list, list]:
    """KEYS and ARGV of one add.lua call writing `tasks`, with `flags` (default: replace, without 'c': what a
    producer that checks nothing sends, which the whole gate answers)."""
    call = store.add_call(store.keys[0], tasks, False)
    return list(call.keys), [flags, *call.args[1:]]


def good_call(store: Store, n: int = 2) -> tuple[list, list]:
    """KEYS and ARGV of one add.lua call writing n valid tasks."""
    return raw_call(store, [(Task.new("t", i, call="shop.tasks:run"), "delay", 1000) for i in range(n)])


def spec_of(store: Store, **fields) -> str:
    return spec_json(Task.new("t", 0, **fields))


def add(r, keys: list, args: list):
    """A raw add.lua call, as any producer sends it."""
    return Transport(r).call(ScriptCall(SCRIPTS["add"], keys, args))


def refused(r, keys: list, args: list, match: str) -> None:
    before = sorted(r.keys("*"))
    with pytest.raises(redis.exceptions.ResponseError, match=match):
        add(r, keys, args)
    assert sorted(r.keys("*")) == before


# (ARGV index of the second task's spec, priority, mode, value in good_call(store, 2))
SPEC, PRIORITY, MODE, VALUE = 6, 7, 8, 9

BAD_SPECS = [
    ('{"call":"shop.tasks:run"', "spec: is not a JSON object"),
    ('[1,2]', "spec: is not a JSON object"),
    ('"text"', "spec: is not a JSON object"),
    ('{}', "target: give exactly one of call, url or push"),
    ('{"call":"a:b","push":"q"}', "target: give exactly one"),
    ('{"call":"a:b","intervalTime":[1]}', 'spec: unknown field "intervalTime"'),
    ('{"call":"a:b","timeout":null,"Params":{}}', 'spec: unknown field "Params"'),  # (known ones counted, nulls too)
    ('{"call":"a:b","params":{},"intervals":[0],"persistent":false,"x":1}', 'spec: unknown field "x"'),
    ('{"call":"a b:c"}', "call: must look like package.module:function"),
    ('{"call":"a.:c"}', "call: must look like"),
    ('{"call":"a:b."}', "call: must look like"),
    ('{"call":"a..b:c"}', "call: must look like"),
    ('{"call":"a.1b:c"}', "call: must look like"),
    ('{"call":"a:b.c","callback":"a:b.c."}', "callback: must look like"),
    ('{"call":"a:b","callback":"nope"}', "callback: must look like"),
    ('{"url":"ftp://h/x"}', "url: must be an http:// or https:// URL"),
    ('{"url":"http:///x"}', "url: must be an http"),
    ('{"url":"http://h/a b"}', "url: must be an http"),
    ('{"method":"GET","url":"http://h/"}', 'url: the spec of a URL task must start with {"url":'),
    ('{"push":"a b"}', "push: must not contain spaces"),
    ('{"push":7}', "push: must be a string"),
    ('{"url":"http://h/","method":"PUT"}', "method: must be GET or POST"),
    ('{"url":"http://h/","body":"xml"}', "body: must be 'form' or 'json'"),
    ('{"call":"a:b","params":[1]}', "params: must be a JSON object"),
    ('{"call":"a:b","params":"x"}', "params: must be a JSON object"),
    ('{"call":"a:b","params":[null]}', "params: must be a JSON object"),
    ('{"url":"http://a.example/","params":[]}', "params: must be a JSON object"),  # (cjson reads [] as {})
    ('{"call":"a:b","params":' + '{"a":' * 64 + '[1]' + '}' * 64 + '}', "params: are nested more than 64 levels deep"),
    ('{"url":"http://h/","params":{"s":"\\"{[","a":' + '[' * 64 + ']' * 64 + '}}', "params: are nested more than 64"),
    ('[null]', "spec: is not a JSON object"),
    ('{"call":"a:b","persistent":1}', "persistent: must be true or false"),
    ('{"call":"a:b","timeout":0}', "timeout: must be a number of seconds in"),
    ('{"call":"a:b","timeout":86401}', "timeout: must be a number of seconds"),
    ('{"call":"a:b","intervals":[]}', "intervals: must be a list of 1 to 1000"),
    ('{"call":"a:b","intervals":5}', "intervals: must be a list"),
    ('{"call":"a:b","intervals":{"1":5}}', "intervals: must be a list"),
    ('{"call":"a:b","intervals":[null]}', "intervals: must be a number"),
    ('{"call":"a:b","intervals":[1,-1]}', "intervals: must be a number >= 0"),
    ('{"call":"a:b","intervals":[1,"2"]}', "intervals: must be a number"),
    ('{"call":"a:b","intervals":[1e300]}', "intervals: must be a number"),
    ('{"call":"a:b","retries":-1}', "retries: must be an integer from 0 to 10000"),
    ('{"call":"a:b","retries":1.5}', "retries: must be an integer"),
    ('{"call":"a:b","retries":"3"}', "retries: must be an integer"),
    ('{"call":"a:b","retries":3,"intervals":[1]}', "retries: is for a task without"),
    ('{"call":"a:b","retries":3,"persistent":false}', "retries: give retries or persistent=false"),
    ('{"call":"a:b","tz":"UTC"}', "tz: is the zone of a cron schedule"),
    ('{"url":"http://h/","signing_key":"a b"}', "signing_key: must be 1-128 letters"),
    ('{"url":"http://h/","signing_key":7}', "signing_key: must be 1-128 letters"),
    ('{"url":"http://h/","signing_key":"' + "k" * 129 + '"}', "signing_key: must be 1-128"),
    ('{"url":"http://h/","signing_key":"\u00e9"}', "signing_key: must be 1-128"),
    ('{"push":"q","signing_key":"acme"}', "signing_key: is for a url task: only URL requests are signed"),
    *((f'{{"url":"{url}"}}', "url: has a port that is not a number from 1 to 65535") for url in (
        "http://x:abc/", "http://x:-1/", "http://x:99999/", "http://x:0/", "https://u:p@x:65536", "http://x:1:2/",
        "http://[::1]x/", "http://x:000080/")),
    *((f'{{"url":"{url}"}}', "url: must be an http:// or https:// URL with a host") for url in (
        "http://:80/", "http://u@:80/", "http://[]/")),
    ('{"url":"http://\u00c4bc.invalid:19412/"}', "url: has a host that is not ASCII"),
    *((f'{{"call":"a:b","trace":{trace}}}', "trace: must be a W3C traceparent") for trace in (
        '7', f'"{TRACEPARENT.upper()}"', f'"01{TRACEPARENT[2:]}"', f'"00-{"0" * 32}{TRACEPARENT[35:]}"',
        f'"{TRACEPARENT[:36]}{"0" * 16}{TRACEPARENT[52:]}"', f'"{TRACEPARENT[:-1]}"', f'"{TRACEPARENT}x"',
        f'"{TRACEPARENT} "', f'"{TRACEPARENT} k=\\tv"', f'"{TRACEPARENT} {"k" * 513}"')),
    # what cjson reads otherwise than the daemon's reader (tests/store/test_json_agreement.py)
    ('{"call":"a:b","call":"c:d"}', 'spec: names the field "call" twice'),
    ('{"call":"a:b","c\\u0061ll":"c:d"}', 'spec: names the field "call" twice'),
    ('{"url":"http://a.example/x","url":"http://b.example/y"}', 'spec: names the field "url" twice'),
    ('{"url":"http://a.example/x","url":null,"call":"a:b"}', "url: must be an http"),
    *((f'{{"call":"a:b","params":{{"x":{number}}}}}', "spec: holds a number JSON does not have") for number in (
        "0x10", "NaN", "Infinity", "-Infinity", "nan", "inf", "+1", "01", "1.")),
    ('{"url":"http://h/","params":{"x":[1,NaN]}}', "spec: holds a number JSON does not have"),
    *((f'{{"call":"a:b","params":{{"x":{number}}}}}', "spec: holds a number beyond a double's range") for number in (
        "1e400", "-1e400", "1" + "0" * 400, "1" + "0" * 5000)),
    ('{"call":"a:b","params":{"x":"a\nb"}}', "spec: holds a control character in a string"),
    ('{"call":"a:b"}\x00', "spec: holds a control character"),
]
TRACES = [TRACEPARENT, f"{TRACEPARENT} k=v", f"{TRACEPARENT} congo=t61rcWkgMzE, rojo=00f067aa0ba902b7",
          f"{TRACEPARENT} {'k' * 512}"]
BAD_RECURRING_SPECS = [
    ('{"call":"a:b","every":0.5}', "every: must be between 1 s and ten years"),
    ('{"call":"a:b","every":"60"}', "every: must be a number"),
    ('{"call":"a:b","cron":"* * *"}', "cron: must be five fields"),
    ('{"call":"a:b","cron":"* * * * * *"}', "cron: must be five fields"),
    ('{"call":"a:b","cron":"* * * * $"}', "cron: must be five fields"),
    ('{"call":"a:b","cron":"0 3 * * *","tz":"Europe/Ber lin"}', "tz: must be an IANA zone name"),
    ('{"call":"a:b","cron":"0 3 * * *","every":60}', "schedule: give one of intervals, every or cron"),
    ('{"call":"a:b","every":null}', "every: must be a number"), ('{"call":"a:b","cron":null}', "cron: must be five"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS)
def test_a_bad_spec_is_refused_by_name_and_nothing_of_the_call_is_written(r, store, spec, message):
    keys, args = good_call(store)
    args[SPEC] = spec
    refused(r, keys, args, "^delayd:bad-task " + message.replace("{", r"\{") + r".* \(task 2 of the call\)$")


def test_params_nested_64_deep_are_written(r, store):
    keys, args = good_call(store)
    args[SPEC] = '{"call":"a:b","params":{"s":"\\"[[{","a":' + '[' * 63 + ']' * 63 + '}}'
    add(r, keys, args)
    assert r.hget(keys[-1], "spec") == args[SPEC]


@pytest.mark.parametrize("flags", ["0", "0c"])
@pytest.mark.parametrize("trace", TRACES)
def test_a_trace_context_is_stored_as_given(r, store, trace, flags):
    keys, args = good_call(store)
    args[0], args[SPEC] = flags, json.dumps({"call": "a:b", "trace": trace}, separators=(",", ":"))
    add(r, keys, args)
    assert json.loads(r.hget(keys[-1], "spec"))["trace"] == trace


@pytest.mark.parametrize("spec, message", BAD_RECURRING_SPECS)
def test_a_bad_schedule_is_refused(r, store, spec, message):
    keys, args = good_call(store)
    args[SPEC], args[MODE] = spec, "delay*"
    refused(r, keys, args, "delayd:bad-task " + message)


@pytest.mark.parametrize("index, value, message", [
    (PRIORITY, "4", "priority: must be 1, 2 or 3"),
    (PRIORITY, "", "priority: must be 1, 2 or 3"),
    (MODE, "later", "mode: must be delay, at, delay\\*, at\\*, next\\* or debounce"),
    (MODE, "delay*", "mode: ends in '\\*' for a task with every or cron, and only then"),
    (VALUE, "-1", "delay: must be an integer of ms"),
    (VALUE, "1.5", "delay: must be an integer of ms"),
    (VALUE, "nan", "delay: must be an integer of ms"),
    (VALUE, str(TEN_YEARS_MS + 1), "delay: must be an integer of ms"),
])
def test_bad_priority_mode_and_times_are_refused(r, store, index, value, message):
    keys, args = good_call(store)
    args[index] = value
    refused(r, keys, args, "delayd:bad-task " + message)


def test_at_is_an_absolute_time_up_to_1e14_ms(r, store):
    keys, args = good_call(store)
    args[MODE], args[VALUE] = "at", str(10**14 + 1)
    refused(r, keys, args, "delayd:bad-task at: must be an integer of ms from 0 to 1e14")
    args[VALUE] = str(10**14)
    assert add(r, keys, args) == 2
    # times are written as integers in full, never in a float's notation (1e+14)
    assert r.hget("delayd:{0}:t:t:1", "due") == str(10**14)
    assert r.zscore("delayd:{0}:delayed", "t:1") == 10**14
    created = r.hget("delayd:{0}:t:t:1", "created")
    assert created.isdigit() and int(r.hget("delayd:{0}:t:t:0", "due")) == int(created) + 1000


def test_next_is_for_a_cron_task_with_the_value_0(r, store):
    keys, args = good_call(store)
    args[SPEC], args[MODE], args[VALUE] = spec_of(store, call="a:b", every=60), "next*", "0"
    refused(r, keys, args, "delayd:bad-task mode: next\\* is for a cron task")
    args[SPEC], args[VALUE] = spec_of(store, call="a:b", cron="0 3 * * *"), "5"
    refused(r, keys, args, "delayd:bad-task mode: next\\* takes the value 0")
    args[VALUE] = "0"
    assert add(r, keys, args) == 2
    assert r.hget("delayd:{0}:t:t:1", "first") == "cron" and r.hget("delayd:{0}:t:t:0", "first") is None


@pytest.mark.parametrize("value", ["", "5", ":5", "-1:", "5:4", "1.5:", f"{TEN_YEARS_MS + 1}:", "5:x", "1" * 13 + ":"])
def test_a_debounce_takes_wait_and_most_in_ms(r, store, value):
    keys, args = good_call(store)
    args[MODE], args[VALUE] = "debounce", value
    refused(r, keys, args, "delayd:bad-task debounce: takes 'WAIT:MOST'")
    for good in ("5:", "5:5", f"0:{TEN_YEARS_MS}"):
        args[VALUE] = good
        assert add(r, keys, args) == 2 and r.hget("delayd:{0}:t:t:1", "since") is not None


def test_a_debounce_is_not_for_nx_nor_a_recurring_task(r, store):
    keys, args = good_call(store)
    args[MODE], args[VALUE] = "debounce", "5:10"
    nx_args = ["1", *args[1:]]
    refused(r, keys, nx_args, "delayd:bad-task debounce: give debounce or nx, not both")
    args[SPEC] = spec_of(store, call="a:b", every=60)
    refused(r, keys, args, "delayd:bad-task mode: ends in")


def test_a_recurring_spec_needs_a_recurring_mode(r, store):
    keys, args = good_call(store)
    args[SPEC] = spec_of(store, call="a:b", every=60)
    refused(r, keys, args, "delayd:bad-task mode: ends in")
    args[MODE] = "delay*"
    assert add(r, keys, args) == 2


@pytest.mark.parametrize("name, message", [
    ("t:", "id: must not be empty"),
    (":x", "topic: must not be empty"),
    ("t:a b", "id: must not contain spaces"),
    ("t\x01:x", "topic: must not contain spaces or control characters"),
    (b"t:\xff\xfe", "id: is not valid UTF-8 text"),
    (b"t:\xed\xa0\x80", "id: is not valid UTF-8 text"),  # a surrogate, which Python's decoder refuses
    (b"t:\xc0\xaf", "id: is not valid UTF-8 text"),      # an overlong form
    ("t:" + "x" * 513, "id: is longer than 512 characters"),
    ("t" * 513 + ":x", "topic: is longer than 512 characters"),
])
def test_bad_names_in_the_record_key_are_refused(r, store, name, message):
    keys, args = good_call(store)
    member = name if isinstance(name, bytes) else name.encode()
    keys[2] = b"delayd:{0}:t:" + member
    refused(r, keys, args, "delayd:bad-task " + message)


def test_names_of_many_characters_count_characters_not_bytes(r, store):
    keys, args = good_call(store)
    keys[2] = ("delayd:{0}:t:t:" + "é" * 512).encode()
    assert add(r, keys, args) == 2


def test_keys_of_another_bucket_or_shape_are_refused(r, store):
    keys, args = good_call(store)
    refused(r, [*keys[:2], "delayd:{1}:t:t:1"], args, "delayd:bad-task key: not a record key of this bucket")
    refused(r, ["delayd:{0}:other", *keys[1:]], args, "delayd:bad-call")
    refused(r, keys[:-1], args, "delayd:bad-call")
    refused(r, [*keys, "delayd:{0}:paused:t"], args, "delayd:bad-call")
    refused(r, keys, args[:-1], "delayd:bad-call")


def test_an_oversized_or_non_utf8_spec_is_refused(r, store):
    keys, args = good_call(store)
    args[SPEC] = '{"call":"a:b","params":{"x":"' + "y" * (1 << 20) + '"}}'
    refused(r, keys, args, r"delayd:bad-task spec: is \d+ bytes, more than 1048576")
    args[SPEC] = b'{"call":"a:b","params":{"x":"\xff"}}'
    refused(r, keys, args, "delayd:bad-task spec: is not valid UTF-8 text")


@pytest.mark.parametrize("flags", ["0", "0c"])
def test_every_field_python_writes_passes_the_gate(r, store, flags):
    """The Python client's own specs, with every field, are what the gate lets through, with or without 'c'."""
    tasks = [
        Task.new("t", 1, url="https://example.com/hook?a=1", method="POST", body="json", params={"a": [1, {"b": None}]},
                 callback="shop.tasks:done", timeout=2.5, intervals=[0, 1.5, 60], persistent=False, priority=3),
        Task.new("t", 2, push="queue:jobs", retries=0),
        Task.new("t", 3, call="shop.tasks:run", cron="0 3 * * MON-FRI", tz="Europe/Berlin"),
        Task.new("t", 4, call="shop.tasks:run", every=1.5, params={}),
        *(Task.new("t", 5 + i, url=url) for i, url in enumerate(
            ("http://u:p@[::1]:65535/", "http://x:/", "https://xn--bcher-kva.example:1/", "HTTP://X:080"))),
    ]
    keys, args = raw_call(store, [(task, "delay", 0) for task in tasks], flags)
    assert add(r, keys, args) == len(tasks)


@pytest.mark.parametrize("checked", ["", "c"])
def test_the_reply_is_the_count_written(r, store, checked):
    """docs/protocol.md, section 3: with or without 'c', the number of tasks written (nx leaves those that exist)."""
    keys, args = good_call(store, 3)
    assert add(r, [keys[0], *keys[2:]], args[:2] + args[6:]) == 2
    assert add(r, keys, ["1" + checked, *args[1:]]) == 1
    assert add(r, keys, ["1" + checked, *args[1:]]) == 0
    assert add(r, keys, ["0" + checked, *args[1:]]) == 3


def test_the_whole_lib_in_front_runs_as_the_linked_script(r, store):
    """docs/protocol.md, section 6: a client in another language may put the whole lib (_lib.lua, _limits.lua,
    _gate.lua, ...) in front of add.lua instead of linking the helpers it uses; the script then works
    the same."""
    lua = resources.files("delayd.store").joinpath("lua")
    lib = Script._lib
    source = lib + "\n" + lua.joinpath("add.lua").read_text()
    keys, args = good_call(store)
    assert r.eval(source, len(keys), *keys, *args) == 2
    assert r.eval(source, len(keys), *keys, "1", *args[1:]) == 0  # nx: both exist
    args[SPEC] = "{}"
    with pytest.raises(redis.exceptions.ResponseError, match="delayd:bad-task target"):
        r.eval(source, len(keys), *keys, *args)


@pytest.mark.parametrize("spec, mode, value, message", [
    ('{"call":"a:b"}', "delay*", "0", "mode: ends in '\\*'"),
    ('{"call":"a:b"}', "at*", "0", "mode: ends in '\\*'"),
    ('{"call":"a:b"}', "next*", "0", "mode: ends in '\\*'"),
    ('{"call":"a.:b"}', "delay", "0", "call: must look like"),
    ('{"call":"a:' + "b" * (1 << 20) + '"}', "delay", "0", r"spec: is \d+ bytes, more than 1048576"),
])
def test_a_spec_of_a_call_alone_is_held_to_every_rule(r, store, spec, mode, value, message):
    """add.lua checks `{"call":"<name>"}` without decoding it: the same rules, the same errors."""
    keys, args = good_call(store)
    args[SPEC], args[MODE], args[VALUE] = spec, mode, value
    refused(r, keys, args, "delayd:bad-task " + message)


# The first task's spec in the tests below: a call alone (good_call's), or a good spec with params that
# starts as the second's may (add.lua then takes the second's names without matching them again).
FIRST_SPECS = [None, '{"call":"a:b","callback":"c:d","params":{"first":1}}', '{"call":"a:b","params":{"first":1}}']


@pytest.mark.parametrize("spec, mode, message", [
    ('{"call":"a:b","callback":"c:d","params":{"x":1}}', "delay*", "mode: ends in '\\*'"),
    ('{"call":"a:b","callback":"c:d"}', "at*", "mode: ends in '\\*'"),
    ('{"call":"a:b","callback":"c.:d","params":{"x":1}}', "delay", "callback: must look like"),
    ('{"call":"a..b:c","params":{"x":1}}', "delay", "call: must look like"),
    ('{"call":"a:b","params":{"x":1},"every":60}', "delay", "mode: ends in '\\*'"),
    ('{"call":"a:b","params":{"x":1},"timeout":0}', "delay", "timeout: must be a number of seconds in"),
    ('{"call":"a:b","callback":"c:d","params":{"x":1},"bogus":1}', "delay", 'spec: unknown field "bogus"'),
    ('{"call":"a:b","callback":"c:d","params":{"x":1},"push":"q"}', "delay", "target: give exactly one"),
    ('{"call":"a:b","params":{"x":1},"params":[1]}', "delay", "params: must be a JSON object"),
    ('{"call":"a:b","callback":"c:d","params":null}', "delay", "params: must be a JSON object"),
    ('{"call":"a:b","params":[1]}', "delay", "params: must be a JSON object"),
    ('{"call":"a:b","params":[]}', "delay", "params: must be a JSON object"),
    ('{"call":"a:b","callback":"c:d","params":[ ]}', "delay", "params: must be a JSON object"),
    ('{"call":"a:b","params":{"x":1}', "delay", "spec: is not a JSON object"),
    ('{"call":"a:b","params":{"x":1}}}', "delay", "spec: is not a JSON object"),
    ('{"call":"a:b","params":{"x":"\xff"}}'.encode("latin-1"), "delay", "spec: is not valid UTF-8 text"),
])
@pytest.mark.parametrize("first", FIRST_SPECS)
def test_a_spec_of_a_call_callback_and_params_is_held_to_every_rule(r, store, spec, mode, message, first):
    """add.lua checks `{"call":…,"callback":…,"params":{…}}` decoding its params alone: the same rules, the
    same errors, whatever follows or breaks that shape; also after a good spec that starts the same (whose
    names add.lua then takes without matching them again)."""
    keys, args = good_call(store)
    args[SPEC], args[MODE] = spec, mode
    if first is not None:
        args[SPEC - 4] = first
    refused(r, keys, args, "delayd:bad-task " + message)


@pytest.mark.parametrize("spec", ['{"call":"a:b","callback":"c:d"}', '{"call":"a:b","params":{}}',
                                  '{"call":"a:b","callback":"c:d","params":{"x":[1,{"y":null}],"z":"\\u00e9"} }',
                                  '{"call":"a:b","callback":"c:d","params":{"x":"é"}}'])
@pytest.mark.parametrize("first", FIRST_SPECS)
def test_a_good_spec_of_a_call_callback_and_params_is_written(r, store, spec, first):
    keys, args = good_call(store)
    args[SPEC] = spec
    if first is not None:
        args[SPEC - 4] = first
    assert add(r, keys, args) == 2
    assert r.hget(keys[2], "spec") == spec


def test_add_names_the_bucket_keys_itself(r, store):
    """docs/protocol.md section 3: KEYS `Tdelayed` then each task's record, the bucket's other
    keys named by the script from its tag (the store tests' key guard lets add.lua touch only keys under
    the tag of its first key: tests/key_guard.py)."""
    keys = store.keys[0]
    tasks = [(Task.new("t", i, call="shop.tasks:run", every=60), "delay", 1000) for i in range(2)]
    call = store.add_call(keys, tasks, False)
    assert list(call.keys) == [keys.delayed, keys.task("t:0"), keys.task("t:1")]
    assert add(r, list(call.keys), list(call.args)) == 2
    assert r.zrange(keys.recurring, 0, -1) == ["t:0", "t:1"] and r.hget(keys.counts, "waiting|t") == "2"
    # A replacement reaches the keys only it touches (leases, done, quarantine, the parked set), by name.
    r.zadd(keys.done("failed"), {"t:0": 1})
    r.zadd(keys.parked("t"), {"t:0": 1})
    again = [(Task.new("t", 0, call="shop.tasks:run"), "delay", 1000)]
    assert store.add(keys, again, False) == 1
    assert not r.zscore(keys.done("failed"), "t:0") and not r.zscore(keys.parked("t"), "t:0")
    assert r.zrange(keys.recurring, 0, -1) == ["t:1"]


def test_add_refuses_a_record_of_another_bucket_or_a_wrong_count(r, store):
    keys = store.keys[0]
    args = list(store.add_call(keys, [(Task.new("t", 1, call="shop.tasks:run"), "delay", 1000)], False).args)
    refused(r, [keys.delayed, "delayd:{1}:t:t:1"], args, "delayd:bad-task key: not a record key of this bucket")
    refused(r, [keys.delayed, keys.task("t:1"), keys.task("t:2")], args, "delayd:bad-call")
    refused(r, [keys.counts, keys.task("t:1")], args, "delayd:bad-call")


@pytest.mark.parametrize("spec, written", [
    ('{"call":"a:b","\\u0065very":60}', False), ('{"call":"a:b","\\u0063ron":"* * * * *"}', False),
    ('{"call":"a:b","ev\\u0065ry":60}', False), ('{"call":"a:b","params":{"x":"\\u00e9\\u4e2d"}}', True),
])
def test_a_checked_spec_that_spells_a_schedule_with_escapes_is_still_read(r, store, spec, written):
    """A checked call's spec is read without decoding only when it cannot have a schedule (unread_ok): a name
    spelled with \\u escapes of ASCII letters is decoded and held to its mode; escapes of other text are not."""
    keys, args = good_call(store, 1)
    args = ["0c", *args[1:]]
    args[2] = spec.replace('"a:b"', '"shop.tasks:run"')
    if written:
        assert add(r, keys, args) == 1
    else:
        refused(r, keys, args, "delayd:bad-task mode")


@pytest.mark.parametrize("spec", ['{"method":"GET","url":"http://h:0/"}', '{"call":"a:b","url":"http://:80/"}',
                                  '{"url":"http:\\/\\/h:99999\\/"}', '{"url":"http://a.example/1","url":"http://b.example/2"}',
                                  '{"url":"http://a.example/1","url":"http://b.example:70000/2"}',
                                  '{"url":"http://a.example/1","url":null,"call":"a:b"}',
                                  '{"url":"http://a.example/1","\\u0075rl":"http://b.example/2"}'])
def test_a_checked_url_spec_is_refused_its_bad_port_or_host_wherever_its_url_stands(r, store, spec):
    """SPEC section 9: the add script refuses a URL whose port is not 1-65535 or whose host is empty, also from a
    call flagged 'c' whose spec does not start with its URL or escapes it (read by decoding, not by pattern).
    A spec naming `url` twice is refused: its pattern would check (and store as the task's host, which `delayd
    hosts disable` stops) the first URL, where the daemon reads the last."""
    keys, args = good_call(store, 1)
    args = ["0c", *args[1:]]
    args[2] = spec.replace('"a:b"', '"shop.tasks:run"')
    refused(r, keys, args, "delayd:bad-task")


@pytest.mark.parametrize("flags", ["0", "0c"])
def test_a_url_spec_naming_url_in_its_params_is_written_for_its_own_url(r, store, flags):
    keys, args = good_call(store, 1)
    args = [flags, *args[1:]]
    args[2] = '{"url":"http://a.example/1","params":{"url":"http://b.example:70000/2","every":1,"url":3}}'
    assert add(r, keys, args) in (1, [1])
    assert r.hmget(keys[1], "url", "host") == ["1", "http://a.example:80"]
