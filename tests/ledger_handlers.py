"""Handlers for tests/workers/test_delete_race.py (tests/ is on the daemons' PYTHONPATH): a run's first act
is to append 'start <key>' to the list params['ledger'] of the Redis at params['redis']."""
import functools

import redis


@functools.lru_cache(maxsize=None)
def _ledger(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def start(task):
    """'start <key>' in the ledger: the moment the handler began, in Redis's order of events."""
    _ledger(task.params["redis"]).rpush(task.params["ledger"], f"start {task.key}")
    return "success"
