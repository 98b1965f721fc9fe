"""Tests' shortcuts to the store's transitions (delayd.store.transitions.Store) on a real Redis:
claim and promote with the daemon's defaults, read a task's record, run an operation with another
actor acting between two of its calls. Shared by the store, CLI, workers and web tests."""
from __future__ import annotations

import json

from delayd.store.replies import Promoted
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall
from delayd.store.transitions import Store
from delayd.store.transport import Transport

DAY_MS = 86400 * 1000
QUOTAS = (5, 3, 2)


def claim(store: Store, bucket=0, n=100, lease_ms=60_000, quotas=QUOTAS, url=False) -> list[dict]:
    claimed = store.claim(bucket, quotas, n, lease_ms, DAY_MS, url)
    return [{"member": t.member, "spec": json.loads(t.spec), "runs": t.runs, "claim": t.claim, "due": int(t.due),
             "created": int(t.created), "error": t.error, "priority": int(t.priority), "now": claimed.now}
            for t in claimed.tasks]


def promote_all(store: Store, bucket=0, retention_ms=DAY_MS, limit=1000) -> Promoted:
    """Promote until no call is wanted at once: a call may stop where it needs keys it was not given
    (docs/redis-layout.md, "Declared keys"), and the next, given them, goes on. `moved` and `reaped`
    are summed over the calls."""
    moved = reaped = 0
    for _ in range(10):
        result = store.promote(bucket, limit, retention_ms)
        moved, reaped = moved + result.moved, reaped + result.reaped
        if not result.full:
            return result._replace(moved=moved, reaped=reaped)
    raise AssertionError("promote still wants another call after 10")


def claim_due(store: Store, member: str) -> dict:
    """Claim the due task `member` as a daemon's bucket and queue processes would (promote, then claim its
    bucket), its handler not started: a run in `leases`. Returns the run."""
    bucket = store.keys_for(member).bucket
    promote_all(store, bucket)
    [run] = [run for run in claim(store, bucket) if run["member"] == member]
    return run


def record(r, store: Store, member: str) -> dict:
    return r.hgetall(store.keys_for(member).task(member))


def calls_of(script: str, n: int | None = None):
    """A test of a request: true for each call of the named script, or for its n-th only."""
    seen = [0]

    def test(request) -> bool:
        if not (isinstance(request, ScriptCall) and request.script is SCRIPTS[script]):
            return False
        seen[0] += 1
        return n is None or seen[0] == n
    return test


def interleaved(r, operation, when, then):
    """Run a Client operation (its steps) on `r`, calling then() right after the request for which
    when(request) is true was answered: another operator acting between two of its calls.
    Returns the operation's result; its exception is raised."""
    reply, transport = None, Transport(r)
    while True:
        try:
            request = operation.send(reply)
        except StopIteration as done:
            return done.value
        reply = transport.send(request)
        if when(request):
            then()
