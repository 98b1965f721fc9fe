"""Handlers for ./scripts/bench: a realistic one does some I/O, as peers' benchmarks do.

The daemon imports this module (scripts/ on its PYTHONPATH, allowed by the bench's config).
"""
from __future__ import annotations

import os

import redis

from delayd import Task

# Its own connection pool, as an application's handler would have (not delayd's).
_redis = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def rpush(task: Task) -> str:
    """One Redis round trip: RPUSH the task's id to `bench:pushed`."""
    _redis.rpush("bench:pushed", task.id)
    return "success"
