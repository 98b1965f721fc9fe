"""A lost ready message (pub/sub is fire-and-forget) strands a bucket's ready tasks only until the queue
process's next sweep, even while it keeps receiving messages of other buckets and results (issue 41:
it looked at every bucket only after 5 s without any event, so a busy process never did)."""
from __future__ import annotations

import itertools
import time

import pytest
from redis_server import wait_for

pytestmark = [pytest.mark.system]


def strand(r, client, topic: str, id: str) -> None:
    """Make the task ready as promote does (queued, in its ready list, counted), but announce nothing:
    its ready message lost."""
    member = f"{topic}:{id}"
    client.add(topic, id, push="stranded", delay=3600)
    keys = client.store.keys_for(member)
    with r.pipeline(transaction=True) as tx:
        tx.zrem(keys.delayed, member).hset(keys.task(member), "queued", "1").rpush(keys.ready[1], member)
        tx.hincrby(keys.counts, f"waiting|{topic}", -1).hincrby(keys.counts, f"ready:2|{topic}", 1).execute()


def test_a_task_whose_ready_message_was_lost_runs_though_other_buckets_keep_the_queue_busy(
        redis_url, daemon_factory, client, r):
    daemon_factory(redis_url, buckets=2, queues=1)
    keys = client.store.keys
    busy = (i for i in itertools.count() if client.store.keys_for(f"busy:{i}") is keys[0])
    lost = next(f"x{i}" for i in itertools.count() if client.store.keys_for(f"lost:x{i}") is keys[1])
    client.add("busy", next(busy), push="out")
    wait_for(lambda: r.llen("out") == 1, 10, message="the daemon running")
    strand(r, client, "lost", lost)
    stranded_at = time.monotonic()
    for ran, i in enumerate(busy, start=2):  # bucket 0's ready messages and results, one after the other
        client.add("busy", i, push="out")
        wait_for(lambda: r.llen("out") == ran, 10, message="a busy task run")
        if r.llen("stranded") or time.monotonic() - stranded_at > 12:
            break
    assert r.llen("stranded") == 1, "the stranded task did not run while the queue process was busy"
    assert time.monotonic() - stranded_at < 7.5  # within a sweep (5 s) and a take
