"""Replay (issue 29, `delayd replay`) through a real daemon and real local HTTP servers as merchants:
10,000 finished tasks of one host are sent again, exactly those (not another host's), as new runs of
the same tasks (same webhook-id), with the command's memory flat (its peak RSS against a replay of 1,000)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from daemon_helper import DELAYD
from redis_server import now_ms, wait_for
from url_helper import _Handler, _serving

pytestmark = pytest.mark.system
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Runs a command and prints its peak RSS (KiB, Linux) after its output: the command's own, not this process's.
PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def replay(redis_url: str, *args: str) -> tuple[str, int]:
    """`delayd replay ARGS`: its output line and its peak RSS in KiB."""
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, *DELAYD, "replay", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "DELAYD_REDIS_URL": redis_url})
    assert proc.returncode == 0, proc.stderr
    line, peak = proc.stdout.strip().splitlines()
    return line, int(peak)


def deliver(client, http, topic: str, count: int) -> None:
    client.add_many([{"topic": topic, "id": i, "url": f"{http.base}/success", "persistent": False}
                     for i in range(count)])
    wait_for(lambda: client.count(topic, "ok") == count, 120, message=f"{count} {topic} tasks delivered")


def runs(server, topic: str, run: int) -> set[str]:
    """The Idempotency-Keys (`topic:id:run`) of the requests `server` received for run `run` of `topic`'s
    tasks: a set, since a run may be delivered twice (at least once: a slow answer on a loaded host)."""
    return {key for req in list(server.requests) if (key := req["headers"]["idempotency-key"]).startswith(f"{topic}:")
            and key.endswith(f":{run}")}


def clock_past(r, ms: int) -> int:
    """The Redis clock (ms) once it is past `ms`. Finish times are whole milliseconds and a replay's span
    includes its `since`: a `since` read in the millisecond of a finish would count that task as finished since."""
    return wait_for(lambda: (now := now_ms(r)) > ms and now, 5, message=f"the Redis clock past {ms} ms")


def test_replay_of_10000_finished_tasks_resends_exactly_those_in_flat_memory(redis_url, daemon_factory, client,
                                                                               http, r):
    daemon_factory(redis_url, buckets=2, queues=1, DELAYD_URL_SIGNING_SECRET=SECRET)
    with _serving(_Handler) as other:
        deliver(client, http, "small", 1_000)
        line, small_peak = replay(redis_url, "--host", http.base, "--since", str(now_ms(r) / 1000 - 600),
                                  "--status", "ok")
        assert line.startswith(f"re-queued 1000 finished URL tasks of {http.base} (ok)")
        wait_for(lambda: len(runs(http, "small", 2)) == 1_000 and client.count("small", "ok") == 1_000, 60,
                 message="1,000 sent again")

        since = clock_past(r, now_ms(r)) / 1000  # after every small task's (second) finish, before any shop task's
        deliver(client, http, "shop", 10_000)
        deliver(client, other, "other", 200)
        line, dry_peak = replay(redis_url, "--host", http.base, "--since", str(since), "--status", "ok", "--dry-run")
        assert line.startswith(f"would re-queue 10000 finished URL tasks of {http.base} (ok)")
        assert len(runs(http, "shop", 1)) == 10_000 and not runs(http, "shop", 2)  # the dry run sent nothing
        line, peak = replay(redis_url, "--host", http.base, "--since", str(since), "--status", "all")
        assert line == (f"re-queued 10000 finished URL tasks of {http.base} (all) since {since} "
                        "(10200 finished tasks looked at)")
        wait_for(lambda: len(runs(http, "shop", 2)) == 10_000 and client.count("shop", "ok") == 10_000, 120,
                 message="10,000 sent again")
        # each shop task once more, as a new run under its webhook-id; the other merchant's not again
        assert runs(http, "shop", 2) == {f"shop:{i}:2" for i in range(10_000)} and not runs(http, "shop", 3)
        assert runs(other, "other", 1) == {f"other:{i}:1" for i in range(200)} and not runs(other, "other", 2)
        again = {req["headers"]["idempotency-key"]: req["headers"]["webhook-id"] for req in list(http.requests)}
        assert again["shop:7:1"] == again["shop:7:2"] == "shop:7"  # the same message, a new run
        print(f"replay peak RSS: 1,000 tasks {small_peak} KiB, 10,200 looked at {dry_peak} KiB (dry run), "
              f"10,000 re-queued {peak} KiB")
        assert peak < small_peak + 5_000  # flat: bounded pages, whatever the count
