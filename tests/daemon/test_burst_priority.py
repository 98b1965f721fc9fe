"""A burst of tasks due in the same millisecond starts by priority (issue 41): a real daemon (one bucket, one
queue process, as an operator's burst finds it after an idle spell) starts priority 3 first, then 2, then 1,
by mean start rank, in every one of 20 bursts. The topics are named so that name order is the wrong order
(priority 2 `a`, 3 `b`, 1 `c`): ties broken by name, or the hints of the first batch, would start `a` first."""
from __future__ import annotations

import json

import pytest
from redis_server import wait_for

pytestmark = [pytest.mark.system]
TOPICS = {"a": 2, "b": 3, "c": 1}  # topic -> priority
EACH, BURSTS = 100, 20


def mean_ranks(pushed: list[str]) -> dict[int, float]:
    """Mean position of each priority's tasks in the order the daemon pushed (started) them."""
    ranks: dict[int, list[int]] = {}
    for rank, value in enumerate(pushed):
        ranks.setdefault(TOPICS[json.loads(value)["topic"]], []).append(rank)
    return {priority: sum(found) / len(found) for priority, found in ranks.items()}


def test_a_burst_due_in_one_millisecond_starts_priority_3_then_2_then_1(redis_url, daemon_factory, client, r):
    daemon_factory(redis_url, buckets=1, queues=1)
    seen = []
    for burst in range(BURSTS):
        seconds, micros = r.time()
        at = (seconds * 1000 + micros // 1000 + 300) / 1000  # due together, 0.3 s ahead: the daemon idle until then
        client.add_many([{"topic": topic, "id": f"{burst}-{i}", "push": "out", "at": at, "priority": priority}
                         for topic, priority in TOPICS.items() for i in range(EACH)])
        wait_for(lambda: r.llen("out") == EACH * len(TOPICS), 20, message="the burst pushed")
        ranks = mean_ranks(r.lrange("out", 0, -1))
        r.delete("out")
        seen.append((round(ranks[3]), round(ranks[2]), round(ranks[1])))
    assert all(p3 < p2 < p1 for p3, p2, p1 in seen), seen
