"""The soak's short run: two minutes of the shop-like load with fewer faults (no queue kill, whose
runs come back only after the default lease), so that a leak that grows fast, a task lost or run
twice, or files left open fail CI. The long run is `scripts/soak` (tests/soak.py)."""
from __future__ import annotations

import pytest
import soak
import soak_report

pytestmark = pytest.mark.system

# The short run's windows are 30 s (warm-up 30 s, then the first and last 30 s of the two minutes
# compared). Its RSS bound is the floor (3 MiB over the ~90 s measured; a leak of 35 KB/s breaks it,
# scripts/soak --minutes 2 --leak-bytes 20000 shows it failing). Lateness p99 of ~300 runs a window
# moves by tens of ms when a shared 2-core CI machine is busy for a second (5 -> 46 ms seen with
# nothing else changed): the short run allows 100 ms, which a scheduler falling back to polling
# still breaks; the long run's bound is 1 ms over ten-minute windows.
SHORT = soak_report.Bounds(lateness_slack_ms=100.0)


@pytest.mark.timeout(600)
def test_short_soak_holds(tmp_path):
    settings = soak.Settings(minutes=2.0, sample_every=10.0, queue_kills=False, plot=False, bounds=SHORT)
    result = soak.run(settings, tmp_path)
    print(result.summary())
    assert not result.failures, "\n".join([result.summary(), *result.failures])
    # The load and the faults really happened (a run that skipped them proves less).
    assert result.tasks > 1000 and result.deleted > 20
    assert result.ended["ok"] > 500 and result.ended["failed"] > 50
    assert {"reload", "bucket_kill", "redis_restart", "merchant_down", "hosts_disable",
            "pause_topic"} <= set(result.faults)
    assert len(result.samples) >= 11
