"""Limits per topic from the clients (SPEC 8, "Limits"): set, clear and list them, written once as
steps for Client and AsyncClient (delayd.store.limits writes and reads them)."""
from __future__ import annotations

from typing import Any

from delayd.client.errors import DelaydError
from delayd.model.limit import Limit, encode
from delayd.model.task import check_topic
from delayd.store import limits as limits_mod
from delayd.store.steps import Steps
from delayd.store.transitions import Store

ON_CLUSTER = ("limits are not available on Redis Cluster: a limit is shared by every bucket of a topic, and a "
              "script there works in one bucket's slot only (docs/redis-layout.md, \"Limits\")")


class LimitSteps:
    """The limit operations of BaseClient (which gives them `store_steps`)."""

    def store_steps(self) -> Steps[Store]:
        raise NotImplementedError

    def limited_store_steps(self) -> Steps[Store]:
        store = yield from self.store_steps()
        if not store.limits:
            raise DelaydError(ON_CLUSTER)
        return store

    def set_limit_steps(self, topic: Any, rate: str | None = None, concurrency: int | None = None) -> Steps[bool]:
        """Limit `topic` across every daemon: at most `rate` starts ('N/s', 'N/m', 'N/h') and at most
        `concurrency` runs in flight (either or both; one left out is unlimited). Kept in Redis; tasks
        waiting now are held to it at once. Returns True if it replaced a limit. TaskError for a bad
        value, DelaydError on Redis Cluster."""
        topic = check_topic(topic)
        value = encode(rate, concurrency)
        store = yield from self.limited_store_steps()
        return (yield from limits_mod.write_steps(store, topic, value))

    def clear_limit_steps(self, topic: Any) -> Steps[bool]:
        """Lift `topic`'s limit: the tasks it holds start now, in due order. False if it had none."""
        topic = check_topic(topic)
        store = yield from self.limited_store_steps()
        return (yield from limits_mod.write_steps(store, topic, ""))

    def limits_steps(self) -> Steps[list[Limit]]:
        """Every limit set (by topic), each with the tasks it holds back and its runs in flight."""
        store = yield from self.store_steps()
        return (yield from limits_mod.read_steps(store))
