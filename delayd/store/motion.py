"""Requests a Redis Cluster in motion refused without running them, sent again with a bounded backoff.

TRYAGAIN comes while a slot's keys are split between two shards (a reshard moving it), CLUSTERDOWN
while a failover elects a replica, MOVED or ASK on a connection of delayd's own (a durable add's), and
redis-py's "TTL exhausted" once its own following of MOVED/ASK/TRYAGAIN for one command (a few
tenths of a second) ran out. None of them ran the request, so sending it again is safe; the
transport (delayd.store.transport) does, for up to MOTION_PATIENCE seconds, then raises the error.
"""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, TypeVar

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import AskError, ClusterDownError, ClusterError, MovedError, TryAgainError

T = TypeVar("T")

MOTION_PATIENCE = 5.0  # seconds a request refused by a Cluster in motion is sent again for
MOTION_BACKOFF = ExponentialWithJitterBackoff(cap=0.25, base=0.01)
REFUSALS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)


def in_motion(exc: BaseException) -> bool:
    """Whether `exc` is a Cluster's refusal of a request it did not run, worth sending again soon."""
    return isinstance(exc, (TryAgainError, ClusterDownError, MovedError, AskError)) or \
        (isinstance(exc, ClusterError) and "TTL exhausted" in str(exc))


def patiently(send: Callable[[], T]) -> T:
    """send(), again while a Cluster in motion refuses it (see the module's docstring)."""
    give_up, failures = time.monotonic() + MOTION_PATIENCE, 0
    while True:
        try:
            return send()
        except REFUSALS as exc:
            failures += 1
            pause = _pause(exc, failures, give_up)
        time.sleep(pause)


async def patiently_async(send: Callable[[], Awaitable[T]]) -> T:
    """patiently, for redis.asyncio."""
    give_up, failures = time.monotonic() + MOTION_PATIENCE, 0
    while True:
        try:
            return await send()
        except REFUSALS as exc:
            failures += 1
            pause = _pause(exc, failures, give_up)
        await asyncio.sleep(pause)


def _pause(exc: BaseException, failures: int, give_up: float) -> float:
    """How long to wait before sending again a request refused with `exc`; `exc` raised if it is
    not a Cluster's refusal in motion or the patience would run out."""
    pause = MOTION_BACKOFF.compute(failures)
    if not in_motion(exc) or time.monotonic() + pause > give_up:
        raise exc
    return pause
