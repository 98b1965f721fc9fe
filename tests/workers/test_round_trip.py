"""The queue process's round trip (QueueWorker.send, loop.py) on a real Redis: issue 41 found that the
replies after the first error of a round trip were not handled, so a claim that ran in Redis behind a
failed call left its tasks leased and unrun until their lease ran out."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import redis
from store_helper import QUOTAS

from delayd import Client
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.workers.queue.loop import QueueWorker


def test_a_claim_behind_a_failed_call_in_the_same_round_trip_is_still_handed_over(r, redis_url):
    client = Client.from_url(redis_url)
    store = client.store
    client.add("t", 1, push="out")
    bucket = next(b for b, keys in enumerate(store.keys) if r.exists(keys.task("t:1")))
    while store.promote(bucket, 100, 86_400_000).full:
        pass
    handed: list = []
    worker = SimpleNamespace(link=store.transport.link(), round_trip=0.0)  # what send uses of a QueueWorker
    calls = [(ScriptCall(SCRIPTS["claim"], [], []), handed.append),  # refused by Redis: a script error
             (store.claim_call(bucket, QUOTAS, 10, 60_000, 60_000),
              lambda reply: handed.append([t.member for t in store.claimed(reply).tasks]))]
    with pytest.raises(redis.exceptions.ResponseError):
        QueueWorker.send(worker, calls)
    assert handed == [["t:1"]]
    client.close()
