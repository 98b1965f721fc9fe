"""The index of recurring tasks (`P{N}:recurring`) that add, finish and delete keep, and the
dashboard's schedules page and GET /api/schedules that read it."""
from __future__ import annotations

import pytest
from daemon_helper import Daemon
from redis_server import set_aside, wait_for
from store_helper import claim, promote_all
from web_helper import Web

from delayd.store.replies import SCHEDULE_ENDS

TOKEN = "t0ken-for-tests-only"


def indexed(client, r) -> set[str]:
    return {m for keys in client.store.keys for m in r.zrange(keys.recurring, 0, -1)}


def run_once(client, member: str, outcome: str, next_due) -> None:
    bucket = client.store.keys_for(member).bucket
    client.store.redis.zadd(client.store.keys[bucket].delayed, {member: 0})
    promote_all(client.store, bucket)
    token = next(t["claim"] for t in claim(client.store, bucket) if t["member"] == member)
    assert client.store.finish(bucket, [(member, token, outcome, 0, "", next_due)], 60_000) == [1]


def test_add_finish_and_delete_keep_the_index_of_recurring_tasks(client, r):
    client.add_many([{"topic": "t", "id": i, "push": "out", "every": 60} for i in range(5)] +
                    [{"topic": "t", "id": "c", "push": "out", "cron": "0 3 * * *", "tz": "Europe/Berlin"}] +
                    [{"topic": "t", "id": f"once{i}", "push": "out", "delay": 60} for i in range(5)])
    assert indexed(client, r) == {f"t:{i}" for i in range(5)} | {"t:c"}, "recurring tasks only"
    assert all(r.zscore(k.recurring, m) == 0 for k in client.store.keys for m in r.zrange(k.recurring, 0, -1))
    client.add("t", 0, push="out", delay=60)               # replaced by a one-shot task
    client.add("t", "once0", push="out", every=30)          # a one-shot task replaced by a recurring one
    client.delete("t", 1)
    client.delete("t", 2, hard=True)
    assert indexed(client, r) == {"t:3", "t:4", "t:c", "t:once0"}
    run_once(client, "t:3", "ok", 10**13)                   # a run with a next due time stays
    run_once(client, "t:4", "failed", SCHEDULE_ENDS)        # the last run leaves
    run_once(client, "t:c", "quarantine", "")               # so does a quarantined task
    assert indexed(client, r) == {"t:3", "t:once0"}
    r.zrem(client.store.keys_for("t:once0").recurring, "t:once0")
    r.zadd(client.store.keys_for("t:gone").recurring, {"t:gone": 0})  # an entry whose record is gone
    client.delete("t", "gone")
    assert indexed(client, r) == {"t:3"}, "delete drops an entry even without a record"


def test_a_wrong_typed_index_is_set_aside_by_the_writers(client, r):
    keys = client.store.keys_for("t:1")
    r.set(keys.recurring, "not a zset")
    client.add("t", 1, push="out", every=60)
    assert r.type(keys.recurring) == "zset" and set_aside(r, keys.recurring)[0] == "string"


@pytest.mark.system
def test_a_daemon_takes_an_ended_task_out(redis_url, tmp_path, client, r):
    with Daemon(redis_url, tmp_path / "d"):
        client.add("tick", "ok", call="delayd.examples:noop", every=1, delay=0)
        client.add("tick", "bad", call="delayd.examples:fail", every=1, delay=0)
        client.add("tick", "one", call="delayd.examples:noop", every=1, delay=0, persistent=False)
        wait_for(lambda: client.get("tick", "ok").runs >= 2 and client.get("tick", "bad").status == "failed" and
                 client.get("tick", "one").status == "ok", 30, message="runs of each")
        assert indexed(client, r) == {"tick:ok"}


def test_pages_are_complete_in_name_order_with_a_small_limit(client):
    names = [f"a:{i:03d}" for i in range(40)] + [f"a:b:{i}" for i in range(5)] + [f"z:{i}" for i in range(7)]
    client.add_many([{"topic": n.rpartition(":")[0], "id": n.rpartition(":")[2], "push": "out", "every": 60}
                     for n in names])
    client.add_many([{"topic": "a", "id": f"x{i}", "push": "out", "delay": 60} for i in range(30)])

    def walk(**filters):
        seen, cursor, pages = [], None, 0
        while True:
            found = client.schedules(cursor=cursor, limit=7, **filters)
            seen += [row.member for row in found.rows]
            cursor, pages = found.cursor, pages + 1
            if cursor is None:
                return seen, pages

    seen, pages = walk()
    assert seen == sorted(names) and pages >= len(names) // 7
    assert walk(topic="a")[0] == [f"a:{i:03d}" for i in range(40)], "a sub-topic's tasks are not the topic's"
    assert walk(topic="a", prefix="01")[0] == [f"a:01{i}" for i in range(10)]
    assert walk(topic="a:b")[0] == [f"a:b:{i}" for i in range(5)]
    assert walk(topic="nothing")[0] == []


@pytest.fixture
def api(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as web, \
            web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        yield http


@pytest.mark.system
def test_schedules_page_and_api(api, client, r):
    client.add("report", "daily", call="delayd.examples:echo", cron="0 3 * * *", tz="Europe/Berlin")
    client.add("ping", "<b>x</b>", call="delayd.examples:echo", every=300, delay=600)
    client.add("ping", "once", call="delayd.examples:echo", delay=600)
    keys = client.store.keys_for("ping:bad")
    r.zadd(keys.recurring, {"ping:bad": 0})
    r.hset(keys.task("ping:bad"), mapping={"spec": "{", "status": "delayed"})
    data = api.get("/api/schedules").json()
    rows = {row["key"]: row for row in data["schedules"]}
    assert rows.keys() == {"report:daily", "ping:<b>x</b>", "ping:bad"} and data["cursor"] is None
    daily = rows["report:daily"]
    assert daily["cron"] == "0 3 * * *" and daily["tz"] == "Europe/Berlin" and daily["status"] == "delayed"
    assert daily["next_due_at"] == client.get("report", "daily").due_at and daily["last_run_at"] is None
    assert rows["ping:<b>x</b>"]["every"] == 300 and "does not parse" in rows["ping:bad"]["corrupt"]
    assert [r["key"] for r in api.get("/api/schedules", params={"topic": "ping"}).json()["schedules"]] == [
        "ping:<b>x</b>", "ping:bad"]
    assert api.get("/api/schedules", params={"limit": "x"}).status_code == 400

    page = api.get("/schedules", headers={"Accept": "text/html"}).text
    assert "0 3 * * *" in page and "Europe/Berlin" in page and "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x" not in page
    assert 'action="/api/tasks/report/daily/run"' in page and 'action="/api/topics/ping/pause"' in page
    due = client.get("ping", "<b>x</b>").due_at
    assert api.post("/api/tasks/ping/%3Cb%3Ex%3C%2Fb%3E/run").json()["result"] == "due_now"
    assert client.get("ping", "<b>x</b>").due_at < due
    api.post("/api/topics/ping/pause")
    assert all(row["paused"] for row in api.get("/api/schedules", params={"topic": "ping"}).json()["schedules"])
    assert 'action="/api/topics/ping/resume"' in api.get("/schedules").text
