"""Retries when no schedule is given (SPEC 8, issue 25): a task added without intervals, every
or cron is retried with exponential backoff (1, 2, 4 … s), at most `retries` times, then
failed; the daemon's `retries` is the default; explicit intervals keep the seed's rules.
Real daemons, a real Redis and real HTTP servers; the retry state shown by get and the
dashboard is made by the real scripts."""
from __future__ import annotations

import asyncio
import json
import re

import pytest
from daemon_helper import delayd, one_line_error
from redis_server import free_port, wait_for
from store_helper import DAY_MS, claim, promote_all
from test_recurring import bucket_of_task
from web_helper import Web

from delayd import AsyncClient, config
from delayd.config import ConfigError
from delayd.model.task import TaskError
from delayd.store.replies import Finish

# How much later than its backoff (+10 % jitter) a retry may start: the finish batch, the
# bucket's wake-up and the claim, on a host shared with other test runs.
SLACK = 1.0


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def run_daemon(redis_url, daemon_factory):
    return lambda **env: daemon_factory(redis_url, buckets=2, queues=1, **env)


def starts(client, topic, id) -> list[float]:
    """When each run of the task started (Redis's clock: the delivery log)."""
    return [attempt["at"] for attempt in client.get(topic, id).attempts]


def assert_backs_off(times: list[float], at_least: float = 0.0) -> None:
    """Run k+1 starts 2^(k-1) s (or `at_least`, if more) after run k, at most 10 % + SLACK later."""
    for k, (before, after) in enumerate(zip(times, times[1:]), 1):
        backoff = max(2.0 ** (k - 1), at_least)
        assert backoff <= after - before <= backoff * 1.1 + SLACK, (k, [round(t - times[0], 3) for t in times])


def finished(client, topic, id, status="failed"):
    return lambda: client.get(topic, id).status == status


# -- through a real daemon ---------------------------------------------------------------
@pytest.mark.system
def test_a_failing_task_runs_at_0_1_3_7_s_then_ends_failed_with_its_last_error(run_daemon, client):
    run_daemon()
    client.add("job", 1, call="delayd.examples:boom", retries=3)
    wait_for(finished(client, "job", 1), 20, message="failed after 3 retries")
    task = client.get("job", 1)
    times = starts(client, "job", 1)
    assert task.runs == 4 and len(times) == 4
    assert 0 <= times[0] - task.created_at <= SLACK
    assert_backs_off(times)
    assert task.last_error.startswith("no retries left (retries=3); last error: ")
    assert "boom (task job:1, run 4)" in task.last_error
    assert task.retries == 3 and task.to_dict()["retries"] == 3


@pytest.mark.system
def test_the_daemons_retries_is_the_default_and_explicit_intervals_keep_the_seed_rules(run_daemon, client):
    run_daemon(DELAYD_RETRIES="1")
    client.add("job", "default", call="delayd.examples:boom")
    client.add("job", "once", call="delayd.examples:boom", persistent=False)
    client.add("job", "seed", call="delayd.examples:boom", intervals=0)  # seed: again every 1 s until success
    wait_for(finished(client, "job", "default"), 15, message="failed after the daemon's 1 retry")
    wait_for(finished(client, "job", "once"), 15, message="one run")
    assert client.get("job", "default").runs == 2 and client.get("job", "once").runs == 1
    wait_for(lambda: client.get("job", "seed").runs >= 4, 15, message="four runs of the seed schedule")
    seed = client.get("job", "seed")
    assert seed.status in ("delayed", "running") and seed.retries is None and seed.to_dict()["retries"] is None
    times = starts(client, "job", "seed")
    # (The seed counts each gap from the run's due time, not from its end as the backoff does.)
    assert all(0.9 <= after - before <= 1 + SLACK for before, after in zip(times, times[1:])), times


@pytest.mark.system
def test_a_handler_timeout_backs_off_too(run_daemon, client):
    run_daemon(DELAYD_TASK_TIMEOUT="1", DELAYD_CONCURRENCY="4")
    client.add("job", "hang", call="delayd.examples:slow", params={"seconds": 30}, retries=1)
    wait_for(finished(client, "job", "hang"), 20, message="failed after its timeouts")
    task = client.get("job", "hang")
    times = starts(client, "job", "hang")
    assert task.runs == 2 and "timeout" in task.last_error and "no retries left" in task.last_error
    assert_backs_off(times, at_least=1 + 1)  # the 1 s timeout, then the 1 s backoff


@pytest.mark.system
def test_url_tasks_back_off_and_retry_after_still_holds(run_daemon, client, http):  # noqa: F811
    run_daemon()
    client.add("hook", "error", url=f"{http.base}/error", retries=2)
    client.add("hook", "after", url=f"{http.base}/429?after=3", retries=1)  # 3 s, not the 1 s backoff
    client.add("hook", "refused", url=f"http://127.0.0.1:{free_port()}/x", retries=1)
    for id in ("error", "after", "refused"):
        wait_for(finished(client, "hook", id), 20, message=f"hook {id} failed")
    assert [r["path"] for r in http.requests].count("/error") == 3
    assert_backs_off(starts(client, "hook", "error"))
    assert_backs_off(starts(client, "hook", "after"), at_least=3)
    assert_backs_off(starts(client, "hook", "refused"))
    assert client.get("hook", "error").last_error.startswith("no retries left (retries=2); last error: HTTP 500")
    assert client.get("hook", "refused").runs == 2


# -- what get and the dashboard show -------------------------------------------------------
def failed_once(client, topic, id, wait_s: int) -> None:
    """The state a queue process leaves after the task's first run failed: delayed, runs 1, the
    retry due in `wait_s` (claim.lua, then finish.lua as the queue process calls it)."""
    bucket = bucket_of_task(client, topic, id)
    promote_all(client.store, bucket)
    [run] = claim(client.store, bucket)
    assert client.store.finish(bucket, [Finish(run["member"], run["claim"], "retry", 0, "boom", "",
                                               wait_s * 1000)], DAY_MS) == [1]


@pytest.mark.system
def test_get_shows_the_retry_count_and_when_the_next_comes(client):
    client.add("job", 1, call="delayd.examples:boom", retries=3)
    failed_once(client, "job", 1, 30)
    task = client.get("job", 1)
    assert task.status == "delayed" and task.runs == 1 and 29 <= task.due_at - task.last_run_at <= 31
    text = delayd("get", "job", "1").stdout
    assert re.search(r"^retries +retry 1 of 3, next in \d+ s$", text, re.M), text
    assert "until success" not in text and "intervals" not in text
    assert "on error retried with backoff (1, 2, 4 … s) up to 3 times" in text
    assert json.loads(delayd("get", "job", "1", "--json").stdout)["retries"] == 3
    client.add("job", 2, call="delayd.examples:boom")  # no retries of its own: the reader's setting
    assert json.loads(delayd("get", "job", "2", "--json").stdout)["retries"] == 20
    got = json.loads(delayd("get", "job", "2", "--json", DELAYD_RETRIES="5").stdout)
    assert got["retries"] == 5 and got["intervals"] == [0]
    assert re.search(r"^retries +0 of 5 used$", delayd("get", "job", "2", DELAYD_RETRIES="5").stdout, re.M)


@pytest.mark.system
def test_the_dashboards_task_page_shows_the_retry(client, redis_url):
    client.add("job", 1, call="delayd.examples:boom", retries=20)
    failed_once(client, "job", 1, 60)
    client.add("job", "seed", call="delayd.examples:boom", intervals=[0, 5])
    with Web(redis_url) as web, web.client() as page:
        html = page.get("/tasks/job/1").text
        assert re.search(r"<th>retries</th><td>retry 1 of 20, next in \d+ s</td>", html), html
        assert "until it succeeds" not in html
        seed = page.get("/tasks/job/seed").text
        assert "<th>intervals</th>" in seed and "<th>retries</th>" not in seed
        assert page.get("/api/tasks/job/1").json()["task"]["retries"] == 20


# -- bad input writes nothing ----------------------------------------------------------------
BAD_RETRIES = [
    ({"retries": -1}, "retries must be an integer from 0 to 10000, got -1"),
    ({"retries": "3"}, "retries must be an integer from 0 to 10000, got '3'"),
    ({"retries": 2.5}, "retries must be an integer"),
    ({"retries": True}, "retries must be an integer"),
    ({"retries": 10_001}, "retries must be an integer from 0 to 10000"),
    ({"retries": 3, "intervals": [0, 5]}, "retries is for a task without a schedule: give retries or intervals"),
    ({"retries": 3, "every": 5}, "give retries or every, not both"),
    ({"retries": 3, "cron": "* * * * *"}, "give retries or cron, not both"),
    ({"retries": 0, "persistent": False}, "give retries or persistent=False"),
]


@pytest.mark.parametrize("fields, says", BAD_RETRIES)
def test_bad_retries_are_refused_and_write_nothing(client, r, fields, says):
    with pytest.raises(TaskError, match=re.escape(says)):
        client.add("t", 1, call="a:b", **fields)
    with pytest.raises(TaskError, match=f"^item 1: .*{re.escape(says)}"):
        client.add_many([{"topic": "t", "id": 0, "call": "a:b"}, {"topic": "t", "id": 1, "call": "a:b", **fields}])
    assert r.dbsize() == 0


def test_async_client_takes_retries(redis_url):
    async def app() -> None:
        async with AsyncClient.from_url(redis_url) as c:
            assert await c.add("t", 1, call="a:b", retries=4)
            assert (await c.get("t", 1)).retries == 4
            with pytest.raises(TaskError, match="give retries or intervals"):
                await c.add("t", 2, call="a:b", retries=4, intervals=5)
            assert await c.get("t", 2) is None
    asyncio.run(app())


@pytest.mark.system
@pytest.mark.parametrize("flags, code, says", [
    (["--retries", "-1"], 1, "retries must be an integer from 0 to 10000, got -1"),
    (["--retries", "x"], 2, "invalid int value"),
    (["--retries", "3", "--intervals", "0,5"], 2, "not allowed with argument"),
    (["--retries", "3", "--every", "5"], 2, "not allowed with argument"),
    (["--retries", "3", "--cron", "* * * * *"], 2, "not allowed with argument"),
    (["--retries", "3", "--once"], 1, "give retries or persistent=False"),
])
def test_cli_bad_retries(r, flags, code, says):
    out = delayd("add", "t", "1", "--call", "a:b", *flags, check=code)
    assert says in (one_line_error(out) if code == 1 else out.stderr.splitlines()[-1]) and "Traceback" not in out.stderr
    assert r.dbsize() == 0


@pytest.mark.system
def test_cli_add_retries(client):
    out = delayd("add", "t", "1", "--call", "a:b", "--retries", "0", "--json")
    assert json.loads(out.stdout)["task"]["retries"] == 0
    assert client.get("t", 1).describe_schedule() == "once when due, no retries"


@pytest.mark.parametrize("env, says", [({"DELAYD_RETRIES": "-1"}, "retries must be >= 0 and <= 10000"),
                                       ({"DELAYD_RETRIES": "2.5"}, "DELAYD_RETRIES: retries = '2.5' is not valid"),
                                       ({"DELAYD_RETRY_MAX_DELAY": "0"}, "retry_max_delay must be > 0")])
def test_bad_retry_settings_are_refused(env, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        config.load(env=env)
