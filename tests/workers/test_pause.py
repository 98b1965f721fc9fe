"""Pause / resume a topic and run a task now: the scripts against a real Redis, the
command, and real daemons (in-flight runs, restarts, due order on resume)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest
from daemon_helper import DELAYD, Daemon, delayd, one_line_error
from redis_server import now_ms, wait_for
from store_helper import DAY_MS, calls_of, claim, interleaved, promote_all
from test_recurring import bucket_of_task, pushed

from delayd import Client, Overtaken
from delayd.model.task import TaskError
from delayd.store import transitions as store_mod
from delayd.store.scripts import SCRIPTS
from delayd.store.transport import Transport


def all_counts(client) -> dict:
    stats = client.stats()
    return {topic: t["counts"] | {"parked": t["parked"], "waiting": t["waiting"]}
            for topic, t in stats["topics"].items()}


def promote_everything(client) -> None:
    for bucket in range(client.store.buckets):
        while client.store.promote(bucket, 1000, DAY_MS).full:
            pass


def flags(r, client, topic: str) -> list:
    return [r.hget(keys.paused, topic) for keys in client.store.keys]


# -- scripts ------------------------------------------------------------------------
def test_a_paused_topics_due_tasks_are_parked_and_leave_the_head(client, r):
    client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(20)]
                    + [{"topic": "other", "id": i, "push": "out", "delay": 0} for i in range(5)])
    client.pause("mail")
    for bucket in range(client.store.buckets):
        moved, _, next_due, *_ = promote_all(client.store, bucket)
        assert next_due == -1  # nothing left at the head of delayed: the bucket process sleeps
    taken = [run["member"] for b in range(client.store.buckets) for run in claim(client.store, b)]
    assert sorted(taken) == [f"other:{i}" for i in range(5)]
    counts = all_counts(client)
    assert counts["mail"]["parked"] == 20 and counts["mail"]["delayed"] == 20 and counts["mail"]["waiting"] == 0
    assert client.paused() == ["mail"] and client.stats()["paused"] == ["mail"]
    assert {t.key for t in client.list(topic="mail", status="delayed", limit=100)} == {f"mail:{i}" for i in range(20)}
    # The dashboard's list shows them as delayed too (parked sets are walked beside `delayed`), in due order.
    for topic, status in (("mail", "delayed"), ("", "delayed"), ("mail", None)):
        rows = client.browse(status, topic, limit=100).rows
        mail = sorted(row.task.key for row in rows if row.task.topic == "mail")
        assert mail == sorted(f"mail:{i}" for i in range(20))
    client.add("mail", "later", push="out", delay=3600)  # still in `delayed`: listed after the parked ones
    assert [row.task.id for row in client.browse("delayed", "mail", limit=100).rows][-1] == "later"
    client.delete("mail", "later", hard=True)
    # Adds, deletes and get work as usual while paused.
    client.add("mail", 0, push="out", delay=0)
    client.delete("mail", 1)
    client.delete("mail", 2, hard=True)
    assert client.get("mail", 0).status == "delayed" and client.get("mail", 1).status == "deleted"
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)
    assert all_counts(client)["mail"]["parked"] == 18
    assert client.resume("mail") == 18
    assert client.paused() == [] and r.keys("delayd:{*}:paused:*") == []
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)
    taken = [run["member"] for b in range(client.store.buckets) for run in claim(client.store, b)]
    assert len(taken) == 18 and all_counts(client)["mail"]["parked"] == 0


def test_pause_parks_ready_tasks_and_lapsed_leases(client, r):
    client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(6)])
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)
    running = [run for b in range(client.store.buckets) for run in claim(client.store, b, n=2, lease_ms=1)]
    assert client.pause("mail") == 6 - len(running)  # the ready ones were set aside
    assert [run for b in range(client.store.buckets) for run in claim(client.store, b)] == []
    wait_for(lambda: now_ms(r) > max(run["now"] for run in running) + 2, 5, message="leases lapse")
    for bucket in range(client.store.buckets):
        assert promote_all(client.store, bucket)[1] == 0  # reaped into the parked set, not the ready lists
    assert all_counts(client)["mail"]["parked"] == 6 and all_counts(client)["mail"]["running"] == 0
    client.resume("mail")
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)
    again = [run for b in range(client.store.buckets) for run in claim(client.store, b)]
    assert len(again) == 6
    lapsed = {run["member"]: run["runs"] for run in running}
    assert all(run["runs"] == lapsed.get(run["member"], 1) for run in again)  # same run number after a lapse


def test_run_now(client, r):
    client.add("t", 1, push="out", delay=3600)
    before = now_ms(r)
    assert client.run_now("t", 1) is True
    assert before <= client.get("t", 1).due_at * 1000 <= now_ms(r)
    assert client.run_now("t", "missing") is False
    bucket = bucket_of_task(client, "t", 1)
    promote_all(client.store, bucket)
    assert client.run_now("t", 1) is True  # already due, waiting for a worker: nothing to change
    run = claim(client.store, bucket)[0]
    snapshot = r.hgetall(client.store.keys_for("t:1").task("t:1"))
    with pytest.raises(TaskError, match="t:1 is running, not delayed"):
        client.run_now("t", 1)
    assert r.hgetall(client.store.keys_for("t:1").task("t:1")) == snapshot
    client.store.finish(bucket, [("t:1", run["claim"], "ok", 0, "")], 60_000)
    with pytest.raises(TaskError, match="t:1 is ok, not delayed"):
        client.run_now("t", 1)
    # A paused topic's task becomes due now and waits, first in line, for the resume.
    client.add("p", 1, push="out", delay=0)
    client.add("p", 2, push="out", delay=3600)
    client.pause("p")
    for b in range(client.store.buckets):
        promote_all(client.store, b)
    assert client.run_now("p", 2) is True
    assert all_counts(client)["p"]["parked"] == 1


@pytest.mark.system
def test_cli_pause_resume_run(redis_url, r):
    delayd("add", "mail", "1", "--push", "out", "--delay", "3600")
    assert delayd("pause", "mail").stdout.startswith("paused mail")
    stats = json.loads(delayd("stats", "--json").stdout)
    assert stats["paused"] == ["mail"] and stats["topics"]["mail"]["paused"] is True
    assert "paused   mail" in delayd("stats").stdout
    assert "is due now (topic paused" in delayd("run", "mail", "1").stdout
    assert json.loads(delayd("resume", "mail", "--json").stdout)["result"] == "resumed"
    assert one_line_error(delayd("run", "mail", "nope", check=1)) == "delayd: error: not found: mail:nope"
    delayd("del", "mail", "1")
    assert "is deleted, not delayed" in one_line_error(delayd("run", "mail", "1", check=1))
    delayd("pause", check=2)
    assert "must not be empty" in one_line_error(delayd("pause", "", check=1))


@pytest.mark.system
def test_pause_of_a_topic_without_tasks_warns_and_pauses_it(redis_url, r):
    """A typo in `delayd pause` succeeded silently and left the real topic running."""
    delayd("add", "mail", "1", "--push", "out", "--delay", "3600")
    out = delayd("pause", "mial")
    assert one_line_error(out) == ("delayd: warning: no task of topic mial exists (a typo?); paused all the same: "
                                   "tasks added to it later wait for resume")
    assert out.stdout.startswith("paused mial")
    out = delayd("pause", "mial", "--json")  # stdout stays JSON; the warning is on stderr
    assert json.loads(out.stdout)["result"] == "paused" and "no task of topic mial" in out.stderr
    assert json.loads(delayd("stats", "--json").stdout)["paused"] == ["mial"]
    delayd("del", "mail", "1")  # a deleted task is still a task of the topic (until its retention ends)
    assert delayd("pause", "mail").stderr == ""


# -- real daemons -------------------------------------------------------------------
@pytest.mark.system
def test_paused_tasks_wait_then_start_in_due_order_and_the_pause_survives_a_restart(redis_url, client, r, tmp_path):
    env = dict(redis_url=redis_url, state_dir=tmp_path / "d1", buckets=1, queues=1, DELAYD_CONCURRENCY="1")
    r.hset("delayd:meta", "buckets", 1)  # the daemon's layout, before the client first uses the store
    client.pause("mail")
    with Daemon(**env):  # started after the pause: it is in Redis
        now = time.time()
        client.add_many([{"topic": "mail", "id": i, "push": "out", "at": now - 10 + (i * 7) % 5} for i in range(5)])
        client.add("other", 1, push="other", delay=0)
        wait_for(lambda: r.llen("other") == 1, 10, message="another topic runs")
        wait_for(lambda: all_counts(client)["mail"]["parked"] == 5, 10, message="mail parked")
        assert r.llen("out") == 0
    with Daemon(**env):
        client.add("mail", 9, push="out", delay=0)
        wait_for(lambda: all_counts(client)["mail"]["parked"] == 6, 10, message="parked after a restart")
        assert r.llen("out") == 0
        client.resume("mail")
        wait_for(lambda: r.llen("out") == 6, 10, message="all ran after resume")
    dues = [p["due_at"] for p in pushed(r)]
    assert dues == sorted(dues)


@pytest.mark.system
def test_a_run_in_flight_finishes_while_its_topic_is_paused(redis_url, client, r, tmp_path):
    """The run in flight finishes; the topic's task that was ready beside it, and one that comes due
    after the pause, do not start, though the daemon runs another topic's task meanwhile."""
    with Daemon(redis_url, tmp_path / "d1", buckets=1, queues=1, DELAYD_CONCURRENCY="1"):
        client.add("slow", 1, call="delayd.examples:slow", params={"seconds": 1.5}, delay=0)
        wait_for(lambda: client.get("slow", 1).status == "running", 10, message="running")
        client.add("slow", 2, push="out", delay=0)  # ready behind the run in flight (concurrency 1)
        wait_for(lambda: client.stats()["topics"]["slow"]["ready"]["2"] == 1, 10, message="slow:2 ready")
        client.pause("slow")
        client.add("slow", 3, push="out", delay=0)
        wait_for(lambda: client.get("slow", 1).status == "ok", 10, message="finished while paused")
        client.add("other", 1, push="other", delay=0)
        wait_for(lambda: r.llen("other") == 1, 10, message="the daemon runs other topics")
        assert r.llen("out") == 0 and all_counts(client)["slow"]["parked"] == 2
        assert client.get("slow", 2).status == client.get("slow", 3).status == "delayed"
        client.resume("slow")
        wait_for(lambda: r.llen("out") == 2, 10, message="both run after resume")


def test_a_pause_issued_while_a_resume_runs_wins_on_every_bucket(redis_url, client, r):
    """A resume moves its first batch of 1,000, then another operator pauses: the resume stops and
    says so, and the topic stays paused on every bucket, the tasks it had moved parked again."""
    n = 12_000
    client.pause("mail")
    client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(n)])
    promote_everything(client)
    assert all_counts(client)["mail"]["parked"] == n and client.store.buckets > 1
    other = Client.from_url(redis_url)
    with pytest.raises(Overtaken, match=r"^the resume of mail was overtaken by a pause issued meanwhile: the "
                                        r"topic stays paused \(1000 due tasks had gone back; they wait for the "
                                        r"next resume\)$"):
        interleaved(r, client.resume_steps("mail"), calls_of("resume", 1), lambda: other.pause("mail"))
    assert client.paused() == ["mail"] and None not in flags(r, client, "mail") and "r" not in flags(r, client, "mail")
    promote_everything(client)
    assert [run for bucket in range(client.store.buckets) for run in claim(client.store, bucket)] == []
    counts = all_counts(client)["mail"]
    assert counts["parked"] == n and counts["waiting"] == 0 and counts["delayed"] == n
    assert client.resume("mail") == n and client.paused() == []
    other.close()


def test_a_resume_that_begins_while_a_pause_flags_the_buckets_wins_on_every_bucket(redis_url, client, r):
    """The other way round: a pause flags its first bucket, then another operator's resume runs
    (passing the buckets not flagged yet): the pause finishes that resume and says so."""
    client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(30)])
    other = Client.from_url(redis_url)
    with pytest.raises(Overtaken, match="^the pause of mail was overtaken by a resume issued meanwhile: "
                                        "the topic is not paused$"):
        interleaved(r, client.pause_steps("mail"), calls_of("pause", 1), lambda: other.resume("mail"))
    assert client.paused() == [] and flags(r, client, "mail") == [None] * client.store.buckets
    taken = []
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)
        taken += claim(client.store, bucket)
    assert len(taken) == 30 and all_counts(client)["mail"]["parked"] == 0
    # A pause after that resume holds, and a resume after it lifts it: the later one wins.
    client.pause("other")
    assert other.pause("mail") == 0 and client.paused() == ["mail", "other"]
    assert client.resume("mail") == 0 and client.paused() == ["other"]
    other.close()


@pytest.mark.parametrize("value", ["1", "r", "x", "999999999999999", "8000000000000000"])
def test_a_flag_of_an_earlier_version_or_a_damaged_one_reads_as_the_oldest_pause(client, r, value):
    """'1' (earlier versions), 'r', a value that is no integer, a past one and one far ahead of
    Redis's clock (on every bucket but the first, where a resume takes its generation): a resume
    lifts them all, and a pause replaces them."""
    client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(20)])

    def flag_all() -> None:
        for keys in client.store.keys:
            r.hset(keys.paused, "mail", "1" if keys is client.store.keys[0] else value)
    flag_all()
    promote_everything(client)
    assert client.paused() == ["mail"]
    client.resume("mail")
    assert client.paused() == [] and all_counts(client)["mail"]["parked"] == 0
    flag_all()
    client.pause("mail")
    assert len(set(flags(r, client, "mail"))) == 1 and value not in flags(r, client, "mail")
    client.resume("mail")
    assert client.paused() == []


@pytest.mark.system
def test_two_operators_and_two_daemons_the_pause_wins(redis_url, client, r, tmp_path):
    """With two daemons running, a pause issued while a resume runs: after the pause returns, no task
    of the topic starts (those the resume's first batch had released may run before it)."""
    n = 12_000
    r.hset("delayd:meta", "buckets", 2)
    client.pause("mail")
    env = dict(buckets=2, queues=1)
    with Daemon(redis_url, tmp_path / "d1", **env), Daemon(redis_url, tmp_path / "d2", **env):
        client.add_many([{"topic": "mail", "id": i, "push": "out", "delay": 0} for i in range(n)])
        wait_for(lambda: all_counts(client)["mail"]["parked"] == n, 30, message="all parked")
        other = Client.from_url(redis_url)
        with pytest.raises(Overtaken):
            interleaved(r, client.resume_steps("mail"), calls_of("resume", 1), lambda: other.pause("mail"))
        other.close()
        wait_for(lambda: all_counts(client)["mail"]["running"] == 0, 10, message="runs in flight finish")
        started = r.llen("out")
        client.add("other", 1, push="other", delay=0)
        wait_for(lambda: r.llen("other") == 1, 10, message="the daemons run other topics")
        wait_for(lambda: all_counts(client)["mail"]["parked"] == n - started, 10, message="parked again")
        assert r.llen("out") == started < 1000 and client.paused() == ["mail"]
        counts = all_counts(client)["mail"]
        assert counts["waiting"] == 0 and counts["delayed"] == n - started and counts["ok"] == started


def test_pause_walks_the_ready_lists_a_bounded_chunk_per_call_and_misses_none(client, r, monkeypatch):
    """However long the ready lists, each call of the pause looks at PARK_CHUNK entries at most;
    workers popping at the head and promote appending at the tail between its calls make it miss
    no task of the topic: none starts after the pause returned, and the counts stay right."""
    monkeypatch.setattr(store_mod, "PARK_CHUNK", 50)
    r.hset("delayd:meta", "buckets", 1)
    client.add_many([{"topic": "tiny" if i % 10 == 0 else "big", "id": i, "push": "out", "delay": 0,
                      "priority": 1 + i % 3} for i in range(3000)])
    promote_everything(client)
    r.config_set("slowlog-log-slower-than", 0)  # every command, those run by scripts too
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    taken, more = [], iter(range(3000, 10_000))

    def workers() -> None:
        taken.extend(run["member"] for run in claim(client.store, 0, n=7))
        client.add_many([{"topic": "big", "id": next(more), "push": "out", "delay": 0} for _ in range(5)])
        promote_all(client.store, 0)

    parked = interleaved(r, client.pause_steps("tiny"), calls_of("park"), workers)
    log = r.slowlog_get(100_000)
    r.config_set("slowlog-log-slower-than", 10_000)
    looked = [e["command"].split() for e in log if e["command"].startswith(b"LRANGE")]
    assert len(looked) > 3000 / 50 and all(int(stop) - int(start) < 50 for _, _, start, stop in looked)
    # The workers' claims came after the pause's flag: they park the tasks of the topic they take (claim.lua)
    assert taken and not [m for m in taken if m.startswith("tiny:")] and parked < 300
    after = [run["member"] for run in claim(client.store, 0, n=20_000)]
    assert after and not [m for m in after if m.startswith("tiny:")]
    tiny = client.stats()["topics"]["tiny"]
    assert tiny["parked"] == 300 == r.zcard("delayd:{0}:paused:tiny") and sum(tiny["ready"].values()) == 0
    assert client.resume("tiny") == 300



@pytest.mark.system
def test_run_now_in_the_daemon_and_a_recurring_task_keeps_its_schedule(redis_url, client, r, tmp_path):
    with Daemon(redis_url, tmp_path / "d1", buckets=1, queues=1):
        client.add("tick", 1, push="out", every=3600)
        client.run_now("tick", 1)
        wait_for(lambda: len(pushed(r)) == 1, 10, message="ran now")
        task = wait_for(lambda: (t := client.get("tick", 1)).status == "delayed" and t.runs == 1 and t, 10,
                        message="rescheduled")
    ran = pushed(r)[0]
    assert task.due_at == pytest.approx(ran["due_at"] + 3600, abs=0.002)


def test_a_resume_in_batches_keeps_due_order(client, r):
    r.hset("delayd:meta", "buckets", 1)
    client.pause("mail")
    base = now_ms(r) - 100_000
    client.add_many([{"topic": "mail", "id": i, "push": "out", "at": (base + i * 1000) / 1000} for i in range(10)])
    promote_all(client.store, 0)
    assert Transport(r).run(client.store.resume_batch_steps(0, "mail", 3))[:2] == (3, 7)  # one batch (no Client call)
    assert r.hget("delayd:{0}:paused", "mail") == "r"
    client.add("mail", "late", push="out", delay=0)                   # due after every task still parked
    client.add("mail", "early", push="out", at=(base + 1500) / 1000)  # due before them
    promote_all(client.store, 0)
    assert [run["member"] for run in claim(client.store, 0)] == ["mail:0", "mail:1", "mail:early", "mail:2"]
    assert client.resume("mail") == 8 and client.paused() == []
    promote_all(client.store, 0)
    assert [run["member"] for run in claim(client.store, 0)] == [f"mail:{i}" for i in range(3, 10)] + ["mail:late"]


@pytest.mark.system
def test_a_resume_killed_part_way_leaves_the_topic_paused_and_a_second_resume_finishes_it(redis_url, client, r):
    """A real interruption: `delayd resume` SIGKILLed as Redis runs its second batch. What it moved
    waits in `delayed`, what it did not stays parked under the pause flag (the topic still reads as
    paused: nothing is marked resumed while tasks are parked), and `delayd resume` again moves the
    rest: every task waits once, none lost, none left parked."""
    n = 30_000  # 30 batches or more: the kill lands long before the last one
    base = now_ms(r) - 10 * n
    client.add_many([{"topic": "mail", "id": i, "push": "out", "at": (base + 10 * i) / 1000} for i in range(n)])
    client.pause("mail")
    for bucket in range(client.store.buckets):
        while client.store.promote(bucket, 1000, DAY_MS).full:
            pass
    assert all_counts(client)["mail"]["parked"] == n
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url}
    seen = threading.Event()

    def watch(monitor) -> None:  # MONITOR shows each command as Redis runs it: EVALSHA <sha> or FCALL <function>
        calls, names = 0, (SCRIPTS["resume"].sha, SCRIPTS["resume"].function)
        for command in monitor.listen():
            calls += any(name in command["command"] for name in names)
            if calls == 2:
                seen.set()
                return

    with r.monitor() as monitor:
        threading.Thread(target=watch, args=(monitor,), daemon=True).start()
        resume = subprocess.Popen([*DELAYD, "resume", "mail"], env=env, stdout=subprocess.DEVNULL)
        try:
            assert seen.wait(30), "no resume batch seen"
            resume.send_signal(signal.SIGKILL)
        finally:
            resume.wait(30)
    parked = all_counts(client)["mail"]["parked"]
    assert 0 < parked < n, f"the resume was not interrupted part-way ({parked} of {n} parked)"
    flags = {r.hget(f"delayd:{{{b}}}:paused", "mail") for b in range(client.store.buckets)}
    assert "r" in flags and client.paused() == ["mail"], flags  # killed within a bucket's batches
    assert json.loads(delayd("resume", "mail", "--json", env=env).stdout)["tasks"] == parked
    assert client.paused() == [] and r.keys("delayd:{*}:paused*") == []
    waiting = [m for b in range(client.store.buckets) for m in r.zrange(f"delayd:{{{b}}}:delayed", 0, -1)]
    assert sorted(waiting) == sorted(f"mail:{i}" for i in range(n))
    counts = all_counts(client)["mail"]
    assert counts["parked"] == 0 and counts["waiting"] == n and counts["delayed"] == n
