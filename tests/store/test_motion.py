"""delayd.store.motion: which refusals are sent again, how long for, and which are raised at once."""
from __future__ import annotations

import asyncio

import pytest
import redis

from delayd.store import motion


def refusing(*errors: Exception):
    """A send that raises `errors` one per call, then answers "done"; `calls` counts them."""
    pending = list(errors)
    calls = []

    def send():
        calls.append(1)
        if pending:
            raise pending.pop(0)
        return "done"
    return send, calls


@pytest.mark.parametrize("error", [redis.exceptions.TryAgainError("TRYAGAIN"),
                                   redis.exceptions.ClusterDownError("CLUSTERDOWN"),
                                   redis.exceptions.ClusterError("TTL exhausted."),
                                   redis.exceptions.MovedError("3999 127.0.0.1:6381"),
                                   redis.exceptions.AskError("3999 127.0.0.1:6381")])
def test_a_refusal_of_a_cluster_in_motion_is_sent_again(error):
    send, calls = refusing(error, error)
    assert motion.patiently(send) == "done" and len(calls) == 3

    async def send_async():
        return send()
    send, calls = refusing(error)
    assert asyncio.run(motion.patiently_async(send_async)) == "done" and len(calls) == 2


@pytest.mark.parametrize("error", [redis.exceptions.ResponseError("WRONGTYPE"),
                                   redis.exceptions.ConnectionError("refused"),  # it may have run
                                   redis.exceptions.ClusterError("another cluster error")])
def test_any_other_error_is_raised_at_once(error):
    send, calls = refusing(error)
    with pytest.raises(type(error)):
        motion.patiently(send)
    assert len(calls) == 1


def test_the_patience_is_bounded(monkeypatch):
    monkeypatch.setattr(motion, "MOTION_PATIENCE", 0.05)
    send, calls = refusing(*[redis.exceptions.TryAgainError("TRYAGAIN")] * 1000)
    with pytest.raises(redis.exceptions.TryAgainError):
        motion.patiently(send)
    assert 1 < len(calls) < 20
