"""Tests' shortcuts to the store's transitions (delayd.store.transitions.Store) on a real Redis:
claim and promote with the daemon's defaults, read a task's record. Shared by the store, CLI,
workers and web tests."""
from __future__ import annotations

import json

from delayd.store.replies import Promoted
from delayd.store.transitions import Store

DAY_MS = 86400 * 1000
QUOTAS = (5, 3, 2)


def claim(store: Store, bucket=0, n=100, lease_ms=60_000, quotas=QUOTAS, url=False) -> list[dict]:
    claimed = store.claim(bucket, quotas, n, lease_ms, DAY_MS, url)
    return [{"member": t.member, "spec": json.loads(t.spec), "runs": t.runs, "claim": t.claim, "due": int(t.due),
             "created": int(t.created), "error": t.error, "priority": int(t.priority), "now": claimed.now}
            for t in claimed.tasks]


def promote_all(store: Store, bucket=0, retention_ms=DAY_MS) -> Promoted:
    result = store.promote(bucket, 1000, retention_ms)
    assert not result.full
    return result


def record(r, store: Store, member: str) -> dict:
    return r.hgetall(store.keys_for(member).task(member))
