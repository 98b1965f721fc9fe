"""The task model: validation, the stored form, the schedule, the allowlist."""
from __future__ import annotations

import enum
import json
import math
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delayd.model.record import from_record, spec_json
from delayd.model.task import Task, TaskError, is_utf8, module_allowed, parse_intervals


def new(**kw):
    kw.setdefault("call", None if ("url" in kw or "push" in kw) else "shop.tasks:cancel")
    return Task.new(kw.pop("topic", "order:cancel"), kw.pop("id", 42), **kw)


# -- names -------------------------------------------------------------------------
@pytest.mark.parametrize("topic, id", [("", 1), ("t", ""), (None, 1), ("t", None), (True, 1), ("t", False),
                                       (1.5, 1), ("a b", 1), ("t", "x\ny"), ("t", "\x00"), ("x" * 513, 1),
                                       ("t", "\udcff")])
def test_bad_topic_or_id(topic, id):
    with pytest.raises(TaskError):
        Task.new(topic, id, call="a:b")


def test_id_must_not_contain_colon_but_topic_may():
    with pytest.raises(TaskError, match="':'"):
        Task.new("order", "cancel:42", call="a:b")
    task = Task.new("order:cancel", 42, call="a:b")
    assert (task.topic, task.id, task.key) == ("order:cancel", "42", "order:cancel:42")


# -- targets -----------------------------------------------------------------------
@pytest.mark.parametrize("targets", [
    {},
    {"call": "a:b", "url": "http://h/"},
    {"call": "a:b", "push": "list"},
    {"url": "http://h/", "push": "list"},
    {"call": "a:b", "url": "http://h/", "push": "list"},
])
def test_exactly_one_target(targets):
    with pytest.raises(TaskError, match="exactly one"):
        Task.new("t", 1, **targets)


@pytest.mark.parametrize("call", ["shop", "shop.tasks", ":f", "shop:", "shop::f", "shop:f:g", "1shop:f",
                                  "shop tasks:f", "shop.tasks:f\n", "shop.:f", "shop-tasks:f", "shop/x:f", 5])
def test_call_must_be_module_colon_function(call):
    with pytest.raises(TaskError, match="package.module:function"):
        Task.new("t", 1, call=call)


@pytest.mark.parametrize("call", ["shop:f", "shop.tasks:cancel_order", "_a.b_2.c:Klass.method"])
def test_good_calls(call):
    assert Task.new("t", 1, call=call).call == call


@pytest.mark.parametrize("callback", ["nope", "a:b\n", "a:", 3])
def test_callback_shape(callback):
    with pytest.raises(TaskError, match="callback"):
        Task.new("t", 1, call="a:b", callback=callback)


@pytest.mark.parametrize("url", ["ftp://h/x", "file:///etc/passwd", "h/x", "http://", "https:///x",
                                 "javascript:alert(1)", "http://[::1", 7])
def test_url_must_be_http_with_host(url):
    with pytest.raises(TaskError, match="url"):
        Task.new("t", 1, url=url)


@pytest.mark.parametrize("url", ["http://h/a b", "http://h/x\n", "http://h/?q=\t1", "http://h/\x7f", " http://h/",
                                 "http://h/\u00a0", "http://h/\u2028", "http://h/\x85"])
def test_url_with_whitespace_or_control_characters_is_refused_at_add(url):
    with pytest.raises(TaskError, match="url must not contain spaces or control characters"):
        Task.new("t", 1, url=url)
    # A task stored before the rule still reads (and runs): it is no corrupt record.
    assert from_record("t:1", {"spec": json.dumps({"url": url}), "priority": "2"}).url == url


def test_url_that_is_not_utf8_is_refused_as_names_are():
    with pytest.raises(TaskError, match="url is not valid UTF-8"):
        Task.new("t", 1, url="http://h/\udcff")
    assert Task.new("t", 1, url="http://h/\u00e9").url == "http://h/\u00e9"


def test_url_task_method_and_body():
    task = Task.new("t", 1, url="https://merchant.example/notify?x=1", method="post", body="json")
    assert (task.method, task.body) == ("POST", "json")
    with pytest.raises(TaskError, match="method"):
        Task.new("t", 1, url="http://h/", method="PUT")
    with pytest.raises(TaskError, match="body"):
        Task.new("t", 1, url="http://h/", body="xml")


def test_push_target_is_a_name():
    assert Task.new("t", 1, push="my:list").push == "my:list"
    with pytest.raises(TaskError):
        Task.new("t", 1, push="my list")


# -- intervals ---------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (None, [0]), (10, [10]), (2.5, [2.5]), ([0, 30, 60], [0, 30, 60]), ((0, 30), [0, 30]),
    ("0,30,60", [0, 30, 60]), (" 0 , 30,60 ", [0, 30, 60]), ("1.5", [1.5]), ([0.0, "30"], [0, 30]),
])
def test_intervals_forms(value, expected):
    assert parse_intervals(value) == expected
    assert new(intervals=value).intervals == expected


@pytest.mark.parametrize("value", [-1, [0, -5], "0,-1", "abc", "0,,30", "", [], "nan", float("nan"),
                                   [float("inf")], "inf", True, [True], [None], {"a": 1}, [[1]],
                                   [10 ** 400], 10 * 365 * 86400 + 1, list(range(1001))])
def test_bad_intervals(value):
    with pytest.raises(TaskError):
        parse_intervals(value)
    with pytest.raises(TaskError):
        new(intervals=value)


# -- priority, params, timeout, persistent -------------------------------------------
# Values refused (the error names the field) and kept as given, per field.
BAD_VALUES = {"priority": [0, 4, -1, True, False, 2.0, "2", None],
              "timeout": [0, -1, 86400.5, True, "5", float("nan"), float("inf")],
              "persistent": [0, 1, "yes", None]}
GOOD_VALUES = {"priority": [1, 2, 3], "timeout": [0.001, 5, 86400]}


@pytest.mark.parametrize("field,value", [(f, v) for f, values in BAD_VALUES.items() for v in values], ids=repr)
def test_a_bad_value_is_refused_naming_its_field(field, value):
    with pytest.raises(TaskError, match=field):
        new(**{field: value})


@pytest.mark.parametrize("field,value", [(f, v) for f, values in GOOD_VALUES.items() for v in values], ids=repr)
def test_a_good_value_is_kept(field, value):
    assert getattr(new(**{field: value}), field) == value


@pytest.mark.parametrize("params", [{"x": {1, 2}}, {"x": object()}, {"x": float("nan")}, {"x": float("inf")},
                                    [1, 2], "x", 5, {"x": b"bytes"}])
def test_params_must_be_a_json_object(params):
    with pytest.raises(TaskError, match="params"):
        new(params=params)


def test_params_deeply_nested_is_an_error_not_a_crash():
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(TaskError, match="params"):
        new(params=deep)


def nested(depth: int, inner: object = 1) -> dict:
    """params whose objects and arrays nest `depth` deep (the params object is level 1)."""
    params: object = inner
    for level in range(depth - 1):
        params = {"a": params} if level % 2 else [params, "[{"]
    return {"a": params}


def test_params_nest_at_most_64_deep():
    assert new(params=nested(64)).params == nested(64)
    for params in (nested(65), nested(65, {}), nested(300)):
        with pytest.raises(TaskError, match="params are nested more than 64 levels deep"):
            new(params=params)


def test_a_stored_record_nested_deeper_is_corrupt_not_a_crash():
    from delayd.model.record import from_record
    for depth in (65, 500, 5000):
        spec = '{"call":"a:b","params":{"k":"\\"\\\\]}","d":' + "[" * depth + "]" * depth + "}}"
        with pytest.raises(TaskError, match="spec is nested more than 65 levels deep"):
            from_record("t:1", {"spec": spec, "status": "delayed", "created": "1", "due": "1"})
    fine = json.dumps({"call": "a:b", "params": nested(64)})
    assert from_record("t:1", {"spec": fine, "status": "delayed", "created": "1", "due": "1"}).params == nested(64)


def test_params_limit():
    ok = {"x": "a" * 100}
    size = len(json.dumps(ok, separators=(",", ":")))
    assert new(params=ok, params_limit=size).params == ok
    with pytest.raises(TaskError, match="limit"):
        new(params=ok, params_limit=size - 1)
    with pytest.raises(TaskError, match="limit"):
        new(params={"x": "a" * (64 * 1024)})  # the default limit is 64 KiB


@pytest.mark.parametrize("params", [{"x": "\udcff"}, {"\udcfe": 1}, {"x": ["ok", {"y": "a\udc80b"}]}])
def test_params_that_are_not_utf8_are_refused_as_names_are(params):
    with pytest.raises(TaskError, match="params are not valid UTF-8"):
        new(params=params)


def test_params_outside_the_bmp_are_utf8():  # (escaped in JSON as a surrogate pair)
    assert new(params={"x": "\U0001f600"}).params == {"x": "\U0001f600"}


def test_params_are_normalised_to_json():
    assert new(params={1: (1, 2)}).params == {"1": [1, 2]}


class Level(enum.IntEnum):
    HIGH = 2


class Name(str):
    pass


def reference_params(params: dict, limit: int) -> dict | str:
    """What add() made of params before it skipped encoding flat ones: their JSON decoded, or why not."""
    try:
        encoded = json.dumps(params, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return "not JSON-serialisable"
    if len(encoded.encode()) > limit:
        return "limit"
    if any(type(v) is int and abs(v) >= 2 ** 1024 - 2 ** 970 for v in params.values()):  # (float() would overflow)
        return "beyond a double's range"
    if not is_utf8(json.dumps(params, ensure_ascii=False)):
        return "not valid UTF-8"
    return json.loads(encoded)


_flat_value = st.one_of(st.text(max_size=8), st.integers(-(10 ** 700), 10 ** 700), st.integers(-300, 300), st.floats(),
                        st.booleans(), st.none(), st.sampled_from(["\udcff", "\U0001f600", Level.HIGH, Name("n")]))


@settings(max_examples=400)
@given(params=st.dictionaries(st.one_of(st.text(max_size=4), st.just("\udcfe")), _flat_value, min_size=1, max_size=5),
       limit=st.integers(1, 400))
def test_flat_params_are_checked_and_copied_as_their_json_says(params, limit):
    """Flat params are no longer encoded at add: the same outcome as encoding them (the error, or a
    copy equal to their JSON decoded, of the same types: the record writes the same text)."""
    expected = reference_params(params, limit)
    if isinstance(expected, str):
        with pytest.raises(TaskError, match=expected):
            new(params=params, params_limit=limit)
        return
    got = new(params=params, params_limit=limit).params
    assert got == expected and got is not params
    assert [(type(k), type(v)) for k, v in got.items()] == [(type(k), type(v)) for k, v in expected.items()]


def test_an_int_too_long_to_print_is_refused_at_add_whatever_the_digit_limit():
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the least Python allows
    try:
        with pytest.raises(TaskError, match="not JSON-serialisable"):
            new(params={"n": 10 ** 641})
        with pytest.raises(TaskError, match="params hold an integer beyond a double's range"):
            new(params={"n": [10 ** 600]})  # (the add script would read it as infinite)
        assert new(params={"n": -(10 ** 308)}).params == {"n": -(10 ** 308)}
    finally:
        sys.set_int_max_str_digits(limit)


def test_errors_are_one_line():
    for kw in ({"call": "x"}, {"intervals": "a,b"}, {"params": {"x": {1}}}, {"priority": 9}):
        with pytest.raises(TaskError) as info:
            new(**kw)
        assert "\n" not in str(info.value)


# -- the stored form -----------------------------------------------------------------
def record_of(task: Task) -> dict[str, str]:
    return {"spec": spec_json(task), "priority": str(task.priority)}


def test_spec_leaves_out_defaults():
    assert json.loads(spec_json(new())) == {"call": "shop.tasks:cancel"}


def test_round_trip_with_every_field():
    task = Task.new("order:notify", 5, url="http://merchant.example/notify", method="POST", body="json",
                    params={"order": 5, "nested": {"a": [1, 2.5, None, True]}}, intervals=[0, 30, 60, 150],
                    persistent=False, priority=3, callback="shop.tasks:notified", timeout=2.5)
    back = from_record(task.key, record_of(task))
    assert back == task
    assert spec_json(back) == spec_json(task)


def test_method_and_body_survive_a_round_trip_on_any_target():
    task = Task.new("t", 1, push="list", method="post", body="json")
    assert from_record(task.key, record_of(task)) == task


def test_from_record_bookkeeping():
    task = new()
    record = {**record_of(task), "status": "running", "created": "1700000000123", "due": "1700000001000",
              "last_run": "1700000001005", "runs": "3", "claim": "7", "error": "boom", "queued": "0"}
    back = from_record(task.key, record)
    assert back.status == "running" and back.runs == 3 and back.claim == 7 and back.last_error == "boom"
    assert back.created_at == 1700000000.123 and back.due_at == 1700000001.0
    assert back.last_run_at == 1700000001.005
    assert all(isinstance(t, float) for t in (back.created_at, back.due_at, back.last_run_at))
    assert from_record(task.key, {**record, "error": ""}).last_error is None


_NESTED = "[" * 100000


@pytest.mark.parametrize("member, record", [("t:1", r) for r in [
    {},
    {"priority": "2"},
    {"spec": "not json"},
    {"spec": "[1, 2]"},
    {"spec": "null"},
    {"spec": _NESTED},
    {"spec": '{"params": {}}'},
    {"spec": '{"call": "os:system", "url": "http://h/"}'},
    {"spec": '{"call": "a:b", "params": [1]}'},
    {"spec": '{"call": "a:b"}', "priority": "7"},
    {"spec": '{"call": "a:b"}', "priority": "high"},
    {"spec": '{"call": "a:b"}', "status": "exploded"},
    {"spec": '{"call": "a:b"}', "runs": "many"},
    {"spec": '{"call": "a:b"}', "due": "soon"},
    {"spec": '{"call": "a:b"}', "created": "1.5"},
    {"spec": '{"call": "a:b"}', "claim": ""},
]] + [(m, {"spec": '{"call": "a:b"}'}) for m in ("no-colon", ":1", "t:", "t:with space")])
def test_from_record_rejects_corrupt_records(member, record):
    with pytest.raises(TaskError):
        from_record(member, record)


# Valid values for every argument of Task.new, and a mix of valid and invalid ones.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)
_good_name = st.one_of(st.text(st.characters(codec="utf-8", exclude_characters=" "), min_size=1, max_size=12)
                       .filter(lambda s: not any(ord(c) < 33 or ord(c) == 127 for c in s)),
                       st.integers(0, 10 ** 12))
_good_id = _good_name.filter(lambda s: ":" not in str(s))
_good_target = st.sampled_from(["shop.tasks:cancel", "a:b", "_x.y_1:Z.w"])
_good_number = st.one_of(st.integers(0, 10 ** 6), st.floats(0, 10 ** 6))
GOOD = dict(
    topic=_good_name, id=_good_id,
    target=st.one_of(st.fixed_dictionaries({"call": _good_target}),
                     st.fixed_dictionaries({"url": st.sampled_from(["http://h/", "https://m.example:8443/n?x=1"])}),
                     st.fixed_dictionaries({"push": _good_name.map(str)})),
    method=st.sampled_from(["GET", "POST", "post"]), body=st.sampled_from(["form", "json"]),
    params=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), _json, max_size=4)),
    intervals=st.one_of(st.none(), _good_number, st.lists(_good_number, min_size=1, max_size=5),
                        st.lists(st.integers(0, 3600), min_size=1, max_size=5).map(lambda v: ",".join(map(str, v)))),
    persistent=st.booleans(), priority=st.integers(1, 3), callback=st.one_of(st.none(), _good_target),
    timeout=st.one_of(st.none(), st.floats(0.001, 86400), st.integers(1, 86400)),
)
_bad_number = st.one_of(st.integers(-5, -1), st.booleans(), st.just(10 ** 400),
                        st.sampled_from(["abc", "", "-1", "nan", "inf", "1;2", "1,,2"]),
                        st.floats().filter(lambda f: not (math.isfinite(f) and 0 <= f <= 10 * 365 * 86400)))
# Every value here is invalid whatever the other arguments are.
BAD = dict(
    topic=st.sampled_from(["", "a b", True, None, 1.5, "x" * 600, "\udcff"]),
    id=st.sampled_from(["", "a:b", "x\ny", False, None]),
    target=st.sampled_from([{}, {"call": "a"}, {"call": "a:b:c"}, {"url": "ftp://h/"}, {"url": "http://[::1"},
                            {"call": "a:b", "url": "http://h/"}, {"push": ""}, {"call": 3}, {"call": "a:b\n"}]),
    method=st.sampled_from(["PUT", 1, None]), body=st.sampled_from(["xml", None]),
    params=st.one_of(_json.filter(lambda v: not isinstance(v, dict) and v is not None),
                     st.just({"x": float("nan")}), st.just({"x": {1}}), st.just({"x": "\udcff"})),
    intervals=st.one_of(_bad_number, st.lists(_bad_number, min_size=1, max_size=3), st.just([])),
    persistent=st.sampled_from([0, 1, None, "yes"]),
    priority=st.one_of(st.integers(-1, 0), st.integers(4, 9), st.booleans(), st.floats(0, 4)),
    callback=st.sampled_from(["a", "a:b\n", 3]),
    timeout=st.one_of(st.sampled_from([0, -1, True, "5", 86401]),
                      st.floats(allow_nan=True).filter(lambda t: not 0 < t <= 86400)),
)


def _build(args):
    args = dict(args)
    targets = args.pop("target")
    return Task.new(args.pop("topic"), args.pop("id"), **targets, **args)


def _check_round_trip(task):
    back = from_record(task.key, record_of(task))
    assert back == task
    assert spec_json(back) == spec_json(task)
    assert back.key == task.key
    assert task.intervals and all(math.isfinite(i) and i >= 0 for i in task.intervals)


@st.composite
def mixed_args(draw):
    """Arguments of which some (maybe none) are invalid; returns (args, names of the invalid ones)."""
    bad = [name for name in GOOD if draw(st.integers(0, 5)) == 0]
    return {name: draw(BAD[name] if name in bad else GOOD[name]) for name in GOOD}, bad


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries(GOOD))
def test_valid_input_builds_a_task_that_round_trips(args):
    _check_round_trip(_build(args))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_args())
def test_new_raises_task_error_or_round_trips(case):
    """Whatever the mix: a TaskError with one clear line, or a task that reads back identically."""
    args, bad = case
    try:
        task = _build(args)
    except TaskError as exc:
        assert str(exc) and "\n" not in str(exc)
        assert bad, f"valid arguments rejected: {exc}"
        return
    assert not bad, f"invalid {bad} accepted"
    _check_round_trip(task)


# -- the schedule ------------------------------------------------------------------
@pytest.mark.parametrize("persistent, expected", [(True, [30, 60, 60, 60]), (False, [30, 60, None, None])])
def test_next_gap(persistent, expected):
    task = new(intervals=[0, 30, 60], persistent=persistent)
    gaps = []
    for runs in (1, 2, 3, 4):
        task.runs = runs
        gaps.append(task.next_gap())
    assert gaps == expected


def test_zero_repeat_gap_is_raised_to_one_second():
    task = new()  # intervals [0], persistent
    task.runs = 1
    assert task.next_gap() == 1
    task = new(intervals=[5, 0, 10])
    task.runs = 1
    assert task.next_gap() == 1
    task.runs = 2
    assert task.next_gap() == 10
    task = new(intervals=[0], persistent=False)
    task.runs = 1
    assert task.next_gap() is None


# -- retries when no schedule is given (SPEC 8) ---------------------------------------
def test_backoff_doubles_from_one_second_with_jitter_up_to_the_cap_then_no_retry_is_left():
    task = new(retries=3)
    delays = []
    for runs in (1, 2, 3, 4):
        task.runs = runs
        delays.append(task.retry_delay(3600, 0.0))
    assert delays == [1, 2, 4, None]  # after run 4 (the 3rd retry) the task fails
    task.runs = 3
    assert task.retry_delay(3600, 0.0999) == pytest.approx(4 * 1.0999)  # later, never earlier
    assert task.retry_delay(3, 0.05) == 3  # capped
    task = new(retries=10_000)
    task.runs = 10_000
    assert task.retry_delay(3600, 0.05) == 3600  # no float overflow far past the cap


def test_the_retry_limit_follows_the_schedule_and_persistent():
    assert new().retry_limit == 20 and new(retries=0).retry_limit == 0
    assert new(persistent=False).retry_limit == 0  # one run, as before
    for schedule in ({"intervals": 0}, {"intervals": [0, 5]}, {"every": 5}, {"cron": "* * * * *"}):
        task = new(**schedule)
        task.runs = 1
        assert task.retry_limit is None and task.retry_delay(3600, 0) is None and not task.backoff


def test_explicit_intervals_are_stored_even_as_zero_and_retries_only_when_given():
    assert json.loads(spec_json(new(intervals=0))) == {"call": "shop.tasks:cancel", "intervals": [0]}
    assert json.loads(spec_json(new(intervals=[0])))["intervals"] == [0]
    assert json.loads(spec_json(new(retries=5))) == {"call": "shop.tasks:cancel", "retries": 5}
    for task in (new(), new(intervals=0), new(retries=0), new(retries=7)):
        assert from_record(task.key, record_of(task)) == task


def test_a_record_without_a_schedule_retries_by_the_readers_setting():
    """Records written before `retries` existed (no intervals: `{"call": ...}`) read as tasks without
    a schedule; the reader's `retries` (the daemon's, at run time) applies to any that gives none."""
    old = {"spec": '{"call":"a:b"}', "status": "delayed", "created": "1", "due": "1"}
    task = from_record("t:1", old, default_retries=5)
    assert task.backoff and task.retries is None and task.retry_limit == 5 and task.to_dict()["retries"] == 5
    assert from_record("t:1", old).retry_limit == 20
    given = {**old, "spec": '{"call":"a:b","retries":2}'}
    assert from_record("t:1", given, default_retries=5).retry_limit == 2
    seed = from_record("t:1", {**old, "spec": '{"call":"a:b","intervals":[0]}'}, default_retries=5)
    assert not seed.backoff and seed.retry_limit is None and seed.to_dict()["retries"] is None
    with pytest.raises(TaskError, match="retries must be an integer"):
        from_record("t:1", {**old, "spec": '{"call":"a:b","retries":"x"}'})


def test_describe_retries():
    task = new(retries=3)
    assert task.describe_retries(0) == "0 of 3 used"
    task.runs, task.status, task.due_at = 2, "delayed", 108.0
    assert task.describe_retries(100.0) == "retry 2 of 3, next in 8.0 s"
    task.runs, task.status = 4, "failed"
    assert task.describe_retries(100.0) == "3 of 3 used"
    assert new(intervals=5).describe_retries(0) is None
    assert new(persistent=False).describe_schedule() == "once when due, no retries"


# -- the allowlist -----------------------------------------------------------------
@pytest.mark.parametrize("target, allowed", [
    ("shop.tasks:f", True), ("shop.tasks.refunds:f", True), ("shop.tasks.a.b:f", True),
    ("shop.tasks_evil:f", False), ("shop:f", False), ("shop.task:f", False), ("shopxtasks:f", False),
    ("evil.shop.tasks:f", False), ("os:system", False),
])
def test_module_allowed(target, allowed):
    assert module_allowed(target, ("shop.tasks",)) is allowed


def test_module_allowed_with_several_or_none():
    assert module_allowed("b.x:f", ("a", "b"))
    assert not module_allowed("a:f", ())


def test_fractional_repeat_gap_is_kept():
    task = new(intervals=[0, 0.25])
    task.runs = 1
    assert task.next_gap() == 0.25


SPEC_CASES = [
    dict(call="shop.tasks:cancel"),
    dict(url="https://ex.example/é?x=\"1\"", method="post", body="json", params={"a": [1, 2.5, None], "é": "ü"}),
    dict(push="out:list", intervals=[0, 1.5, 30], persistent=False, priority=3, callback="a.b:c", timeout=2.5),
    dict(call="a:b", every=90),
    dict(call="a:b", cron="*/5 * * * *", tz="Europe/Paris"),
    dict(call="a:b", cron="0 3 * * *", method="POST"),
    dict(call="a:b", intervals=[0], persistent=False, params={"i": 7, "due": 1765000000.125}),  # (given as [0])
    dict(call="a:b", every=5.25, timeout=30.0),
    dict(call="a:b", retries=3, params={"n": [{"x": 1e-7}], "s": "\u2028"}),
    dict(url="http://h/", signing_key="k.1", traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01", tracestate="a=b"),
]


@pytest.mark.parametrize("fields", SPEC_CASES)
def test_spec_json_is_the_compact_json_of_the_spec(fields):
    """spec_json writes its text piece by piece: the same text json.dumps writes for the same dict."""
    task = Task.new("t", 1, **fields)
    expected = {name: getattr(task, name) for name in ("call", "url", "push", "callback", "timeout", "every", "cron")
                if getattr(task, name) is not None}
    if task.url or task.method != "GET":
        expected["method"] = task.method
    if task.body != "form":
        expected["body"] = task.body
    if task.params:
        expected["params"] = task.params
    if not (task.backoff or task.recurring):
        expected["intervals"] = task.intervals
    if not task.persistent:
        expected["persistent"] = False
    for name in ("retries", "tz", "signing_key", "trace"):
        if getattr(task, name) not in (None, "UTC"):
            expected[name] = getattr(task, name)
    assert spec_json(task) == json.dumps(expected, separators=(",", ":"))
    assert from_record("t:1", {"spec": spec_json(task), "priority": str(task.priority)}) == task


def test_topics_and_targets_found_good_are_remembered_within_a_bound():
    """check_topic/check_target remember good names (add_many repeats them); never a bad one."""
    from delayd.model import checks as task_mod
    for i in range(3 * task_mod._GOOD_MAX):
        Task.new(f"topic{i}", 1, call=f"m{i}:f")
    assert len(task_mod._GOOD_TOPICS) <= task_mod._GOOD_MAX and len(task_mod._GOOD_TARGETS) <= task_mod._GOOD_MAX
    Task.new("seen", 1, call="a.b:c")
    for bad in ({"topic": "se en"}, {"topic": ""}, {"call": "a.b:c d"}, {"call": "a.b"}):
        with pytest.raises(TaskError):
            Task.new(bad.get("topic", "seen"), 1, call=bad.get("call", "a.b:c"))
    assert "se en" not in task_mod._GOOD_TOPICS and "a.b:c d" not in task_mod._GOOD_TARGETS


@pytest.mark.parametrize("spec, reason", [
    ('{"call":"a:b","intervalTime":[0]}', "spec has an unknown field 'intervalTime'"),
    ('{"push":7}', "push is not a string"),
    ('{"call":"a:b","intervals":5}', "intervals are not a list of numbers"),
    ('{"call":"a:b","intervals":[]}', "intervals are not a list of numbers"),
    ('{"call":"a:b","intervals":[true]}', "intervals are not a list of numbers"),
    ('{"call":"a:b","trace":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 "}', "trace is not"),
    ('{"call":"a:b","trace":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}', "trace is not"),
    ('{"method":"GET","url":"http://h/"}', 'does not start with {"url":'),
])
def test_a_record_read_otherwise_than_written_is_corrupt(spec, reason):
    """What Task.new would take as something else (its conveniences), ignore or misroute is corrupt in a record:
    a producer's call flagged 'c' writes such a spec unchecked, and the claim sets it aside (docs/protocol.md,
    section 7; tests/store/test_checked_adds.py)."""
    with pytest.raises(TaskError, match=re.escape(reason)):
        from_record("t:1", {"spec": spec, "status": "delayed", "created": "1", "due": "1"})


def test_a_record_with_a_good_trace_reads_it_back():
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 vendor=x"
    spec = json.dumps({"call": "a:b", "trace": trace}, separators=(",", ":"))
    assert from_record("t:1", {"spec": spec, "status": "delayed", "created": "1", "due": "1"}).trace == trace


# Task.new's arguments that are fields of the Task (traceparent and tracestate make `trace`).
NEW_FIELDS = ("call", "url", "push", "method", "body", "params", "intervals", "persistent", "priority", "callback",
              "timeout", "every", "cron", "tz", "retries", "signing_key", "trace")


@pytest.mark.parametrize("given", [
    dict(url="https://h.example/x", method="POST", body="json", params={"a": 1}, intervals=[5, 10], persistent=False,
         priority=3, callback="m:cb", timeout=9, signing_key="k"),
    dict(push="out", every=60, priority=1),
    dict(call="m:f", cron="0 3 * * *", tz="Europe/Berlin"),
    dict(call="m:f", retries=4, trace="00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
])
def test_each_argument_of_task_new_lands_in_its_own_field(given):
    """Task.new builds the task by position: each argument is in the field of its name, every other
    field has its default."""
    arguments = {("traceparent" if name == "trace" else name): value for name, value in given.items()}
    task, default = Task.new("t", 7, **arguments), Task("t", "7")
    assert (task.topic, task.id) == ("t", "7")
    assert {name: getattr(task, name) for name in NEW_FIELDS} == {name: getattr(default, name) for name in NEW_FIELDS
                                                                  if name not in given} | given
