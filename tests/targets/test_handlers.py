"""One run of a task (delayd.targets.handlers): call and push targets, against real Redis.

Push tests use the real redis-server of conftest.py. `handlers_fixture` (in tests/)
provides call targets. URL targets: test_url.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis_server import free_port, wait_for

from delayd import Task
from delayd.config import Config
from delayd.store.transport import Transport
from delayd.targets.handlers import Outcome, Runner, outcome_of


@pytest.fixture
def make_runner():
    def make(redis_client=None, **options) -> Runner:
        config = Config(**{"allowed_modules": ("handlers_fixture",), "url_timeout": 5.0, **options})
        return Runner(config, redis_client and Transport(redis_client))

    return make


@pytest.fixture
def runner(make_runner) -> Runner:
    return make_runner()


def call_task(target, runs=1, **kw) -> Task:
    task = Task.new(kw.pop("topic", "order:cancel"), kw.pop("id", 42), call=target, **kw)
    task.runs = runs
    return task


# -- outcome_of ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["success", "SUCCESS ", " Success\n", True])
def test_outcome_of_success(value):
    assert outcome_of(value) == Outcome("ok")


@pytest.mark.parametrize("value", ["fail", "FAIL", " Fail \n", False])
def test_outcome_of_fail(value):
    assert outcome_of(value).kind == "failed"


@pytest.mark.parametrize("value, shown", [
    (None, "None"), (1, "1"), (0, "0"), ({}, "{}"), ([], "[]"), ("retry", "'retry'"), ("", "''"),
    ("successful", "'successful'"), (1.0, "1.0"), (b"success", "b'success'"), ({"ok": True}, "{'ok': True}"),
])
def test_outcome_of_anything_else_retries_and_names_the_value(value, shown):
    outcome = outcome_of(value)
    assert outcome.kind == "retry"
    assert f"returned {shown}" in outcome.error


def test_outcome_of_truncates_a_huge_value():
    outcome = outcome_of("z" * 100_000)
    assert outcome.kind == "retry" and len(outcome.error) < 400


def test_outcome_of_survives_a_broken_repr():
    class Nasty:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert outcome_of(Nasty()).kind == "retry"


# -- call targets --------------------------------------------------------------------------

def test_allowed_call_runs_with_the_task(runner, tmp_path):
    mark = tmp_path / "mark"
    assert runner.run(call_task("handlers_fixture:touch", runs=2, params={"path": str(mark)})) == Outcome("ok")
    assert mark.read_text() == "order:cancel:42:2\n"


def test_call_outside_the_allowlist_never_executes(make_runner, tmp_path):
    mark = tmp_path / "mark"
    runner = make_runner(allowed_modules=("delayd.examples",))
    outcome = runner.run(call_task("handlers_fixture:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed"
    assert "'handlers_fixture' of 'handlers_fixture:touch' is not allowed" in outcome.error
    assert "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES" in outcome.error
    assert not mark.exists()


def test_allowlist_is_a_module_prefix_not_a_string_prefix(runner, tmp_path):
    mark = tmp_path / "mark"
    outcome = runner.run(call_task("handlers_fixture_evil:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed" and "DELAYD_ALLOWED_MODULES" in outcome.error
    assert not mark.exists()
    assert "handlers_fixture_evil" not in sys.modules  # not even imported


def test_empty_allowlist_refuses_everything(make_runner, tmp_path):
    mark = tmp_path / "mark"
    outcome = make_runner(allowed_modules=()).run(call_task("handlers_fixture:touch", params={"path": str(mark)}))
    assert outcome.kind == "failed" and not mark.exists()


@pytest.mark.parametrize("target", ["handlers_fixture:os.remove", "handlers_fixture:__builtins__",
                                    "handlers_fixture:touch.__globals__"])
def test_a_target_cannot_reach_out_of_its_module(runner, target):
    outcome = runner.run(call_task(target))
    assert outcome.kind == "failed" and outcome.error.startswith("call refused:")


def test_the_default_allowlist_runs_the_examples():
    assert Runner(Config(), None).run(call_task("delayd.examples:noop")) == Outcome("ok")


@pytest.mark.parametrize("target, expected", [
    ("no_such_pkg.tasks:run", "cannot import module 'no_such_pkg.tasks' of 'no_such_pkg.tasks:run': "
                              "ModuleNotFoundError: No module named 'no_such_pkg'"),
    ("handlers_fixture:missing", "module 'handlers_fixture' has no attribute 'missing'"),
    ("handlers_fixture:NOT_CALLABLE", "'handlers_fixture:NOT_CALLABLE' is not callable (it is a int)"),
])
def test_a_target_that_cannot_be_loaded_retries(make_runner, target, expected):
    runner = make_runner(allowed_modules=("handlers_fixture", "no_such_pkg"))
    outcome = runner.run(call_task(target))
    assert outcome.kind == "retry"
    assert outcome.error.startswith(expected)


def test_a_raising_handler_retries_with_type_message_and_last_frames(runner):
    outcome = runner.run(call_task("handlers_fixture:explode", id=7))
    assert outcome.kind == "retry"
    assert outcome.error.startswith("ValueError: bad order 7 | last frames: handlers_fixture.py:")
    assert "in level3" in outcome.error and "in level4" in outcome.error and "in level5" in outcome.error
    assert "in level2" not in outcome.error and "handlers.py" not in outcome.error
    assert 'raise ValueError(f"bad order {task.id}")' in outcome.error
    assert "\n" not in outcome.error


def test_a_huge_exception_message_is_cut(runner):
    outcome = runner.run(call_task("handlers_fixture:huge_error"))
    assert outcome.kind == "retry" and outcome.error.startswith("ValueError: xxx")
    assert len(outcome.error) < 1000 and "\n" not in outcome.error


def test_a_handler_calling_sys_exit_retries(runner):
    outcome = runner.run(call_task("handlers_fixture:exits"))
    assert outcome.kind == "retry" and outcome.error.startswith("SystemExit: 3")


@pytest.mark.parametrize("value, kind", [
    ("success", "ok"), ("SUCCESS ", "ok"), (True, "ok"), ("fail", "failed"), (False, "failed"),
    (None, "retry"), (1, "retry"), ("maybe", "retry"), ({}, "retry"), ([], "retry"), (0.5, "retry"),
])
def test_handler_return_values(runner, value, kind):
    outcome = runner.run(call_task("handlers_fixture:returns", params={"value": value}))
    assert outcome.kind == kind
    if kind == "retry":
        assert repr(value) in outcome.error


def test_odd_handlers(runner):
    assert runner.run(call_task("handlers_fixture:returns_set")) == Outcome(
        "retry", "handler returned {1, 2}: not done yet (done: 'success' or True; failed: 'fail' or False)",
        asked=True)
    assert runner.run(call_task("handlers_fixture:HANDLER")) == Outcome("ok")  # a callable object
    outcome = runner.run(call_task("handlers_fixture:coroutine"))
    assert outcome.kind == "retry" and "async def" in outcome.error


def test_many_threads_resolve_and_run_the_same_target(runner, tmp_path):
    mark = tmp_path / "mark"
    tasks = [call_task("handlers_fixture:touch", id=n, params={"path": str(mark)}) for n in range(40)]
    with ThreadPoolExecutor(20) as pool:
        assert list(pool.map(runner.run, tasks)) == [Outcome("ok")] * 40
    assert sorted(mark.read_text().split()) == sorted(f"order:cancel:{n}:1" for n in range(40))


# -- examples --------------------------------------------------------------------------------

def test_examples(make_runner, redis_url, r):
    runner = make_runner(allowed_modules=("delayd.examples",))

    def run(name, runs=1, **params):
        return runner.run(call_task(f"delayd.examples:{name}", runs=runs, params=params)).kind

    assert run("echo", a=1) == "ok" and run("cancel_order", order=5) == "ok" and run("noop") == "ok"
    assert [run("flaky", runs=n) for n in (1, 2, 3, 4)] == ["retry", "retry", "ok", "ok"]
    assert run("flaky", runs=1, succeed_on=1) == "ok"
    assert run("slow", seconds=0.01) == "ok" and run("fail") == "failed"
    outcome = runner.run(call_task("delayd.examples:boom"))
    assert outcome.kind == "retry" and outcome.error.startswith("RuntimeError: boom")
    assert run("record", runs=3, redis=redis_url, list="proof") == "ok"
    assert run("record", runs=4, redis=redis_url, list="proof") == "ok"
    assert r.lrange("proof", 0, -1) == ["order:cancel:42:3", "order:cancel:42:4"]
    # A default-allowed example must not be a way to reach another host's Redis.
    assert run("record", redis="redis://10.0.0.1:6379/0", list="proof") == "failed"


# -- push targets ----------------------------------------------------------------------------

def test_push_rpushes_the_task_as_json(make_runner, r):
    runner = make_runner(redis_client=r)
    first = Task.new("report", 1, push="results", params={"n": 1})
    first.runs = 1
    second = Task.new("report", 2, push="results")
    assert runner.run(first) == Outcome("ok") and runner.run(second) == Outcome("ok")
    values = r.lrange("results", 0, -1)  # the name as given: no prefix
    assert values == [first.to_json(), second.to_json()]
    assert json.loads(values[0]) == first.to_dict() and json.loads(values[0])["key"] == "report:1"


def test_push_to_a_key_of_another_type_retries(make_runner, r):
    r.set("results", "a string")
    outcome = make_runner(redis_client=r).run(Task.new("report", 1, push="results"))
    assert outcome.kind == "retry" and "WRONGTYPE" in outcome.error and "'results'" in outcome.error


def test_push_with_redis_down_retries(make_runner):
    dead = redis.Redis(port=free_port(), socket_connect_timeout=1, decode_responses=True,
                       retry=Retry(NoBackoff(), 0))  # fail at once instead of backing off
    outcome = make_runner(redis_client=dead).run(Task.new("report", 1, push="results"))
    dead.close()
    assert outcome.kind == "retry" and outcome.error.startswith("Redis error pushing to 'results': ConnectionError")


# -- callbacks -------------------------------------------------------------------------------

def test_callback_runs_once_with_the_task(runner, tmp_path):
    mark = tmp_path / "mark"
    task = call_task("handlers_fixture:returns", runs=2, callback="handlers_fixture:touch",
                     params={"value": "success", "path": str(mark)})
    assert runner.run(task) == Outcome("ok")
    assert mark.exists() is False  # run() does not call the callback; the queue worker does
    assert runner.run_callback(task) == ""
    assert mark.read_text() == "order:cancel:42:2\n"


def test_no_callback_is_no_error(runner):
    assert runner.run_callback(call_task("handlers_fixture:noop")) == ""


def test_a_raising_callback_returns_its_error(runner):
    error = runner.run_callback(call_task("handlers_fixture:touch", id=9, callback="handlers_fixture:explode"))
    assert error.startswith("callback failed: ValueError: bad order 9 | last frames:")


def test_a_refused_callback_never_runs(runner, tmp_path):
    mark = tmp_path / "mark"
    task = call_task("handlers_fixture:touch", callback="handlers_fixture_evil:touch", params={"path": str(mark)})
    error = runner.run_callback(task)
    assert error.startswith("callback refused: module 'handlers_fixture_evil'")
    assert "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES" in error
    assert not mark.exists()


def test_a_callback_that_cannot_be_imported(runner):
    error = runner.run_callback(call_task("handlers_fixture:touch", callback="handlers_fixture:missing"))
    assert error.startswith("callback failed: module 'handlers_fixture' has no attribute 'missing'")


def test_run_never_raises_on_a_task_without_target(runner):
    task = Task(topic="t", id="1")  # built directly, bypassing validation
    assert runner.run(task) == Outcome("failed", "task has no call or push target (URL tasks run on the event loop)")


# -- async targets -----------------------------------------------------------------------------

@pytest.fixture
def looped(make_engine):
    """A Runner whose async targets run on a real engine's event loop (as in a queue process)."""
    def make(**options) -> Runner:
        return make_engine(**options).engine.runner
    return make


def test_an_async_target_runs_on_the_loop(looped):
    outcome = looped().run(call_task("handlers_fixture:coroutine"))
    assert outcome == Outcome("ok")


def test_an_async_target_past_the_task_timeout_is_cancelled(looped, tmp_path):
    mark = tmp_path / "cancelled"
    start = time.monotonic()
    outcome = looped(task_timeout=0.5).run(call_task("handlers_fixture:sleeps_async",
                                                     params={"seconds": 30, "path": str(mark)}))
    assert outcome.kind == "retry" and outcome.error.startswith("TimeoutError")
    assert time.monotonic() - start < 5
    assert wait_for(mark.exists, 5, message="the coroutine was cancelled")


def test_an_async_callback_runs_on_the_loop(looped, tmp_path):
    mark = tmp_path / "mark"
    task = call_task("handlers_fixture:touch", callback="handlers_fixture:touch_async", params={"path": str(mark)})
    assert looped().run_callback(task) == ""
    assert mark.read_text() == "order:cancel:42:1 async\n"


# -- the import path of a real daemon ----------------------------------------------------------
SHOP_TASKS = "def cancel_order(task):\n    return 'success'\n"


@pytest.mark.system
def test_a_daemon_imports_handlers_from_its_start_directory_and_pythonpath(redis_url, client, tmp_path):
    """`DELAYD_ALLOWED_MODULES=shop delayd start` in the project folder: `cannot import module
    'shop.tasks'`, retried forever; it worked only with PYTHONPATH=$PWD. The `delayd` command is
    what users run (`python -m` would put the working directory on sys.path by itself)."""
    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "tasks.py").write_text(SHOP_TASKS)
    (project / "lib").mkdir()
    (project / "lib" / "extra.py").write_text("def run(task):\n    return True\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DELAYD_STATE_DIR=str(tmp_path / "state"), DELAYD_BUCKETS="1", DELAYD_QUEUES="1",
               DELAYD_ALLOWED_MODULES="shop,extra", DELAYD_PYTHONPATH="lib")  # relative: from the start dir

    def delayd(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).parent / "delayd"), *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=90)

    out = delayd("start")  # daemonized: the master leaves the start directory for the state directory
    assert out.returncode == 0, out.stderr
    try:
        client.add("order:cancel", 1, call="shop.tasks:cancel_order")
        client.add("extra", 1, call="extra:run")
        client.add("order:cancel", "typo", call="shop.tasks:cancel_ordr")
        client.add("order:cancel", "missing", call="shop.refunds:run")
        wait_for(lambda: client.get("order:cancel", 1).status == "ok", 20, message="shop.tasks ran")
        wait_for(lambda: client.get("extra", 1).status == "ok", 20, message="extra (pythonpath) ran")
        wait_for(lambda: client.get("order:cancel", "typo").last_error, 20, message="the typo's error")
        assert client.get("order:cancel", "typo").last_error == (
            "module 'shop.tasks' has no attribute 'cancel_ordr' (for 'shop.tasks:cancel_ordr'; the module was "
            f"loaded from {project / 'shop' / 'tasks.py'})")
        wait_for(lambda: client.get("order:cancel", "missing").last_error, 20, message="the missing module's error")
        assert client.get("order:cancel", "missing").last_error == (
            "cannot import module 'shop.refunds' of 'shop.refunds:run': ModuleNotFoundError: No module named "
            f"'shop.refunds' (searched first: {project}, {project / 'lib'} (the start directory and pythonpath), "
            "then PYTHONPATH and site-packages)")
        out = delayd("reload")  # the reload keeps the start directory and resolves pythonpath from it
        assert out.returncode == 0, out.stderr
        client.add("extra", 2, call="extra:run")
        wait_for(lambda: client.get("extra", 2).status == "ok", 20, message="extra ran after the reload")
    finally:
        out = delayd("stop")
    assert out.returncode == 0, out.stderr
