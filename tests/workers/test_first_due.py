"""A cron task added without a first due time (add.lua's mode next*, docs/protocol.md): the
producer in another language has no cron implementation, so the daemon gives the task the
calendar's next time after it was added, by delayd's one implementation (delayd.model.schedule),
the same time the Python client computes at add."""
from __future__ import annotations

import pytest
from redis_server import now_ms, wait_for

from delayd.model import schedule
from delayd.model.task import Task
from delayd.store.transitions import Store

pytestmark = pytest.mark.daemon(buckets=1, queues=1)


def add_next(r, task: Task) -> str:
    """The task written as a producer without cron writes it: mode next*, value 0."""
    store = Store(r, "delayd:", 1)
    keys = store.keys[0]
    assert store.add(keys, [(task, "next", 0)], False) == 1
    return keys.task(task.key)


def test_the_daemon_gives_a_cron_task_its_first_due_time_without_running_it(r, daemon, client):
    key = add_next(r, Task.new("t", 1, push="out", cron="0 0 1 1 *", tz="Europe/Berlin"))
    created = int(r.hget(key, "created"))
    expected = schedule.next_cron("0 0 1 1 *", "Europe/Berlin", created)
    wait_for(lambda: "first" not in r.hgetall(key), 10, message="the daemon resolves the first due time")
    record = r.hgetall(key)
    assert int(record["due"]) == expected and record["status"] == "delayed"
    assert "runs" not in record and "last_run" not in record and r.llen("out") == 0
    assert int(r.zscore("delayd:{0}:delayed", "t:1")) == expected
    task = client.get("t", 1)
    assert task.due_at == expected / 1000 and task.runs == 0 and task.last_run_at is None


def test_a_first_due_time_already_past_runs_at_once(r, daemon):
    """A task added while no daemon ran (created two days ago, say): its first calendar time has
    come, so it runs at once, as a task the Python client added then would have."""
    daemon.stop()
    key = add_next(r, Task.new("t", 2, push="out", cron="0 0 * * *"))
    r.hset(key, "created", now_ms(r) - 2 * 86400 * 1000)
    daemon.start()
    wait_for(lambda: r.llen("out") == 1, 10, message="the task ran")
    wait_for(lambda: r.hget(key, "status") == "delayed", 10, message="and waits for its next time")
    assert int(r.hget(key, "due")) == schedule.next_cron("0 0 * * *", "UTC", now_ms(r))
