"""Tasks added from Node (clients/node, delayd-client) run by a real daemon: call, URL and push
targets; and the Node consumer example (clients/node/examples/consumer.mjs) taking pushed tasks
reliably (BLMOVE to a processing list, then an acknowledgement)."""
from __future__ import annotations

import json
import subprocess

import pytest
from node_helper import NODE_DIR, need_node
from redis_server import wait_for

from delayd.model import schedule

pytestmark = pytest.mark.daemon(DELAYD_ALLOWED_MODULES="delayd.examples,handlers_fixture")


def consume(redis_url: str, queue: str, count: int) -> list[str]:
    """The consumer example's output lines, run until it has handled `count` tasks."""
    proc = subprocess.run([need_node(), str(NODE_DIR / "examples" / "consumer.mjs"), redis_url, queue,
                           "--count", str(count)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_tasks_added_from_node_are_run_by_the_daemon(daemon, node, client, r, http, tmp_path, redis_url):
    mark = tmp_path / "ran"
    assert node.add({"topic": "node:call", "id": 1, "call": "handlers_fixture:touch", "params": {"path": str(mark)}})
    assert node.add({"topic": "node:url", "id": 2, "url": f"{http.base}/success", "method": "POST", "body": "json",
                     "params": {"order": 2}})
    assert node.add_many([{"topic": "node:push", "id": i, "push": "node:jobs", "params": {"n": i}} for i in range(3)])
    wait_for(lambda: mark.exists() and mark.read_text() == "node:call:1:1\n", message="the call target ran")
    wait_for(lambda: http.requests, message="the URL target was called")
    assert http.requests[0]["method"] == "POST" and json.loads(http.requests[0]["body"]) == {"order": 2}
    wait_for(lambda: r.llen("node:jobs") == 3, message="the push target pushed")
    for topic, id in (("node:call", 1), ("node:url", 2), ("node:push", 0)):
        wait_for(lambda: (node.get(topic, id) or {}).get("status") == "ok", message=f"{topic}:{id} ok")
        assert node.get(topic, id) == client.get(topic, id).to_dict()
    # The consumer example takes them (in the order they were pushed: buckets run them in any), acknowledging each.
    assert sorted(consume(redis_url, "node:jobs", 3)) == [f'node:push:{i} {{"n":{i}}}' for i in range(3)]
    assert r.llen("node:jobs") == 0 and r.llen("node:jobs:processing") == 0


def test_a_cron_task_from_node_gets_the_first_due_time_of_delayds_cron(daemon, node, client):
    for zone in ("UTC", "Europe/Berlin", "Asia/Kolkata"):
        assert node.add({"topic": "node:cron", "id": zone, "call": "delayd.examples:echo", "cron": "0 3 * * *",
                         "tz": zone})
        task = {}

        def resolved():
            task.update(node.get("node:cron", zone))
            return task["due_at"] > task["created_at"]
        wait_for(resolved, message="the daemon gave the cron task its first due time")
        created_ms = round(task["created_at"] * 1000)
        assert round(task["due_at"] * 1000) == schedule.next_cron("0 3 * * *", zone, created_ms)
        assert task["runs"] == 0 and task["status"] == "delayed"

