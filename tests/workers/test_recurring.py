"""Recurring tasks (`every`, `cron` + `tz`): added, validated, rescheduled by finish, and
run by real daemons (success does not end them, missed runs, several daemons)."""
from __future__ import annotations

import json

import pytest
from daemon_helper import Daemon, delayd, one_line_error
from redis_server import now_ms, wait_for
from store_helper import claim, promote_all, record

from delayd.model import schedule
from delayd.model.task import TaskError


def bucket_of_task(client, topic, id):
    return client.store.keys.index(client.store.keys_for(f"{topic}:{id}"))


# -- adding ------------------------------------------------------------------------
def test_every_first_runs_after_one_period_on_redis_clock(client, r):
    before = now_ms(r)
    client.add("tick", 1, push="out", every=2.5)
    after = now_ms(r)
    task = client.get("tick", 1)
    assert task.every == 2.5 and task.cron is None and task.tz is None and task.recurring
    assert before + 2500 <= task.due_at * 1000 <= after + 2500


def test_cron_first_due_is_the_calendars_next_time_after_redis_now(client, r):
    before = now_ms(r)
    client.add("report", 1, push="out", cron="*/5 * * * *", tz="America/New_York")
    after = now_ms(r)
    task = client.get("report", 1)
    assert (task.cron, task.tz, task.every) == ("*/5 * * * *", "America/New_York", None)
    due = int(task.due_at * 1000)
    assert due in {schedule.next_cron("*/5 * * * *", "America/New_York", t) for t in (before, after)}
    assert due % 300_000 == 0
    client.add("report", 2, push="out", cron="0 3 * * *")  # tz defaults to UTC
    assert client.get("report", 2).tz == "UTC"
    client.add("report", 3, push="out", cron="0 3 * * *", delay=0)  # delay/at still set the first run
    assert client.get("report", 3).due_at * 1000 <= now_ms(r)


@pytest.mark.parametrize("fields,says", [
    ({"every": 5, "cron": "* * * * *"}, "one of intervals, every or cron"),
    ({"intervals": [0, 5], "every": 5}, "one of intervals, every or cron"),
    ({"intervals": 5, "cron": "* * * * *"}, "one of intervals, every or cron"),
    ({"every": 0.5}, "every must be between 1 s"),
    ({"cron": "0 25 * * *"}, "invalid cron expression '0 25 \\* \\* \\*': bad hour"),
    ({"cron": "0 3 * *"}, "five fields"),
    ({"cron": "0 3 * * *", "tz": "Europe/Nowhere"}, "unknown time zone 'Europe/Nowhere'"),
    ({"tz": "Europe/Berlin"}, "tz is the zone of a cron schedule"),
    ({"every": 5, "tz": "UTC"}, "tz is the zone of a cron schedule"),
])
def test_bad_schedules_are_refused_and_write_nothing(client, r, fields, says):
    with pytest.raises(TaskError, match=says):
        client.add("t", 1, push="out", **fields)
    with pytest.raises(TaskError, match="item 1: .*" + says):
        client.add_many([{"topic": "t", "id": 0, "push": "out"}, {"topic": "t", "id": 1, "push": "out", **fields}])
    assert r.keys("delayd:{*}:t:*") == []


@pytest.mark.system
def test_json_and_text_show_the_schedule(redis_url):
    delayd("add", "report", "1", "--push", "out", "--cron", "0 3 * * mon-fri", "--tz", "Europe/Berlin")
    task = json.loads(delayd("get", "report", "1", "--json").stdout)
    assert (task["every"], task["cron"], task["tz"]) == (None, "0 3 * * mon-fri", "Europe/Berlin")
    assert task["last_due_at"] is None
    text = delayd("get", "report", "1").stdout
    assert "schedule     cron '0 3 * * mon-fri' in Europe/Berlin" in text and "due_at" in text
    delayd("add", "tick", "1", "--push", "out", "--every", "90")
    assert "schedule     every 90 s" in delayd("get", "tick", "1").stdout
    assert json.loads(delayd("get", "tick", "1", "--json").stdout)["every"] == 90


@pytest.mark.system
def test_cli_schedule_errors(redis_url, r, tmp_path):
    for flags in (["--every", "5", "--cron", "* * * * *"], ["--intervals", "5", "--every", "5"],
                  ["--every", "soon"]):
        proc = delayd("add", "t", "1", "--push", "out", *flags, check=2)  # command-line syntax
        assert "not allowed with" in proc.stderr or "invalid float" in proc.stderr
    assert "bad hour" in one_line_error(delayd("add", "t", "1", "--push", "out", "--cron", "0 24 * * *", check=1))
    assert "unknown time zone" in one_line_error(delayd("add", "t", "1", "--push", "out", "--cron", "0 3 * * *",
                                                        "--tz", "Berlin", check=1))
    assert "every must be" in one_line_error(delayd("add", "t", "1", "--push", "out", "--every", "0.2", check=1))
    lines = [{"topic": "t", "id": 1, "push": "out", "every": 5},
             {"topic": "t", "id": 2, "push": "out", "cron": "0 3 * * *", "tz": "Mars/Base"},
             {"topic": "t", "id": 3, "push": "out", "cron": "99 * * * *"}]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    error = one_line_error(delayd("add", "--from", str(path), check=1))
    assert f"{path} line 2: unknown time zone 'Mars/Base'" in error and "1 more bad line" in error
    assert r.keys("delayd:{*}:t:*") == []


# -- finish reschedules -----------------------------------------------------------
def test_finish_puts_a_recurring_task_back_at_its_next_due_time(client, r):
    client.add("tick", 1, push="out", every=60, delay=0)
    bucket = bucket_of_task(client, "tick", 1)
    promote_all(client.store, bucket)
    run = claim(client.store, bucket)[0]
    next_due = run["due"] + 60_000
    assert client.store.finish(bucket, [("tick:1", run["claim"], "ok", 0, "", next_due)], 60_000) == [1]
    rec = record(r, client.store, "tick:1")
    assert rec["status"] == "delayed" and int(rec["due"]) == next_due and int(rec["last_due"]) == run["due"]
    assert r.zscore(client.store.keys[bucket].delayed, "tick:1") == next_due
    assert client.stats()["totals"]["tick"]["ok"] == 1
    # A retry outcome goes to the same calendar; a fail ends it.
    r.zadd(client.store.keys[bucket].delayed, {"tick:1": 0})
    promote_all(client.store, bucket)
    run = claim(client.store, bucket)[0]
    client.store.finish(bucket, [("tick:1", run["claim"], "retry", 5000, "boom", next_due + 60_000)], 60_000)
    rec = record(r, client.store, "tick:1")
    assert int(rec["due"]) == next_due + 60_000 and rec["error"] == "boom"
    r.zadd(client.store.keys[bucket].delayed, {"tick:1": 0})
    promote_all(client.store, bucket)
    run = claim(client.store, bucket)[0]
    client.store.finish(bucket, [("tick:1", run["claim"], "failed", 0, "said fail", "")], 60_000)
    assert client.get("tick", 1).status == "failed"


# -- real daemons -----------------------------------------------------------------
def pushed(r, name="out") -> list[dict]:
    return [json.loads(item) for item in r.lrange(name, 0, -1)]


@pytest.fixture
def daemon_env(redis_url, tmp_path):
    return dict(redis_url=redis_url, state_dir=tmp_path / "d1", buckets=2, queues=1)


@pytest.mark.system
def test_success_does_not_end_an_every_task(daemon_env, client, r):
    with Daemon(**daemon_env):
        client.add("tick", 1, push="out", every=1, delay=0)
        wait_for(lambda: len(pushed(r)) >= 3, 20, message="three runs")
        task = wait_for(lambda: (t := client.get("tick", 1)).status == "delayed" and t.runs >= 3 and t, 10,
                        message="back to delayed")
    runs = pushed(r)
    assert [p["runs"] for p in runs] == list(range(1, len(runs) + 1))
    dues = [round(p["due_at"] * 1000) for p in runs]
    assert all(b - a == 1000 for a, b in zip(dues, dues[1:]))  # on its grid, one run per due time
    assert task.last_error is None and task.last_due_at * 1000 == pytest.approx(dues[task.runs - 1], abs=1)


@pytest.mark.system
def test_a_cron_task_in_the_daemon_follows_its_calendar(daemon_env, client, r):
    with Daemon(**daemon_env):
        client.add("report", 1, push="out", cron="* * * * *", tz="America/New_York", delay=0)
        task = wait_for(lambda: (t := client.get("report", 1)).runs == 1 and t.status == "delayed" and t, 20,
                        message="first run done")
    claimed_ms = round(task.last_run_at * 1000)
    assert task.due_at * 1000 == schedule.next_cron("* * * * *", "America/New_York", claimed_ms)
    assert 0 < task.due_at * 1000 - claimed_ms <= 60_000


@pytest.mark.system
def test_missed_runs_after_a_downtime_run_once_then_follow_the_calendar(daemon_env, client, r):
    daemon = Daemon(**daemon_env).start()
    client.add("tick", 1, push="out", every=1, delay=0)
    wait_for(lambda: len(pushed(r)) >= 2, 20, message="two runs")
    daemon.stop()
    missed = client.get("tick", 1)
    assert missed.status == "delayed"
    wait_for(lambda: now_ms(r) > missed.due_at * 1000 + 3500, 10, message="three due times missed")
    before = len(pushed(r))
    restarted_ms = now_ms(r)
    with Daemon(**daemon_env):
        wait_for(lambda: len(pushed(r)) >= before + 3, 20, message="runs after the restart")
    after = pushed(r)[before:]
    # The first run after the restart is for the due time that was missed (get shows it)...
    assert round(after[0]["due_at"] * 1000) == round(missed.due_at * 1000)
    # ...and only that one: the next runs are on the grid after the restart, one per due time.
    assert all(p["due_at"] * 1000 > restarted_ms for p in after[1:])
    dues = [round(p["due_at"] * 1000) for p in after]
    assert dues == sorted(set(dues))
    assert all((d - dues[0]) % 1000 == 0 for d in dues)
    assert dues[1] - dues[0] >= 3000


@pytest.mark.system
def test_two_daemons_run_a_recurring_task_once_per_due_time(daemon_env, client, r, tmp_path):
    with Daemon(**daemon_env), Daemon(**{**daemon_env, "state_dir": tmp_path / "d2"}):
        client.add("tick", 1, push="out", every=1, delay=0)
        wait_for(lambda: len(pushed(r)) >= 6, 30, message="six runs")
    runs = pushed(r)
    assert [p["runs"] for p in runs] == list(range(1, len(runs) + 1))
    dues = [round(p["due_at"] * 1000) for p in runs]
    assert all(b - a == 1000 for a, b in zip(dues, dues[1:])), dues
    assert client.stats()["totals"]["tick"]["started"] == len(runs)
