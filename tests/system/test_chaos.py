"""SPEC promise 1 under chaos: SIGKILLs, a SIGSTOP past the lease, a master kill, a Redis restart.

The scenario and its checks are in tests/chaos.py (shared with scripts/chaos, which
runs it at 50,000 tasks). This is the suite's smaller run.
"""
from __future__ import annotations

import chaos
import pytest

pytestmark = pytest.mark.system


# Its own deadlines (the drain's above all) are generous for a busy 2-core machine, and
# pytest's stays above their sum, so a slow run fails with the run's own diagnosis.
@pytest.mark.timeout(600)
def test_nothing_is_lost_under_chaos(tmp_path):
    result = chaos.run(chaos.Settings(tasks=5000, window=10.0, drain_timeout=300.0), tmp_path, say=print)
    print(result.summary())
    assert not result.failures, "\n".join([result.summary(), *result.failures])
    # The scenario really happened (a run that skipped a disruption proves less).
    assert result.redis_restarts == 1 and result.master_kills == 1 and result.stops == 1
    assert result.kills >= 10 and result.queue_kills >= 1
    assert result.deleted > 0 and result.tasks >= 5000
    assert result.stopped_fenced >= 1  # the SIGSTOPped process held runs, and their late results were refused
