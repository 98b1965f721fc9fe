"""A delete racing the due time (SPEC section 10, the cancel-on-payment flow): once delete() returned
True, no run of the task starts; a delete that finds a run already claimed answers delayd.CLAIMED. A probe
of thousands of races against a real daemon: every task is deleted at about its due time, from 4 threads,
while the daemon promotes, claims and starts them; handlers and deleters write one ledger in Redis."""
from __future__ import annotations

import random
import statistics
import threading
import time

import pytest

from delayd import CLAIMED, Client

pytestmark = [pytest.mark.system, pytest.mark.daemon(buckets=2, queues=2, DELAYD_ALLOWED_MODULES="ledger_handlers")]

TASKS = 3000
LEAD_S = 2.0        # from the adds to the first due time
SPREAD_S = 4.0      # the due times, evenly over this
JITTER_S = 0.005    # each delete at its task's due time +- this
THREADS = 4
LEDGER = "race:ledger"


def deleter(redis_server, redis_url: str, dues: list[tuple[float, int]], answers: dict, lags: list, seed: int) -> None:
    """Delete each task of `dues` (in due order) at about its due time; 'true <key>' in the ledger after
    a delete answered True; every answer kept, and how late after its due time each delete was sent."""
    client, ledger, rng = Client.from_url(redis_url), redis_server.client(), random.Random(seed)
    try:
        assert client.delete("race", "none") is False and ledger.ping()  # (connected before the first due)
        for due, i in dues:
            # Pacing, not waiting for a condition: the delete's moment against the due time is the experiment.
            time.sleep(max(0.0, due + rng.uniform(-JITTER_S, JITTER_S) - time.time()))
            lags.append(time.time() - due)
            answer = client.delete("race", i)
            if answer is True:  # (a start between the answer and this push goes unseen: the probe errs lenient)
                ledger.rpush(LEDGER, f"true race:{i}")
            answers[f"race:{i}"] = answer
    finally:
        client.close()
        ledger.close()


def test_no_handler_starts_after_a_delete_returned_true(daemon, client, redis_server, redis_url, r):
    first = time.time() + LEAD_S
    dues = [(first + SPREAD_S * i / TASKS, i) for i in range(TASKS)]
    params = {"redis": redis_url, "ledger": LEDGER}
    client.add_many([{"topic": "race", "id": i, "call": "ledger_handlers:start", "at": due, "params": params}
                     for due, i in dues])
    answers: dict = {}
    lags: list[float] = []
    threads = [threading.Thread(target=deleter, args=(redis_server, redis_url, dues[t::THREADS], answers, lags, t))
               for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    daemon.stop()  # every run in flight ends: the ledger is complete
    ledger = [line.split(" ", 1) for line in r.lrange(LEDGER, 0, -1)]
    returned, late, starts = set(), [], {}
    for event, key in ledger:
        if event == "true":
            returned.add(key)
        else:
            starts[key] = starts.get(key, 0) + 1
            if key in returned:
                late.append(key)
    true_ = sum(answer is True for answer in answers.values())
    claimed = sum(answer is CLAIMED for answer in answers.values())
    ran_first = sum(key in starts for key in returned)
    print(f"delete race: {TASKS} tasks, True {true_} ({ran_first} of them after their run ended), CLAIMED {claimed} "
          f"({sum(key in starts for key, answer in answers.items() if answer is CLAIMED)} of them started), "
          f"runs started {sum(starts.values())}, started after True {len(late)}; deletes sent "
          f"{statistics.median(lags) * 1000:+.1f} ms from their due time (median)")
    assert not late, f"{len(late)} handlers started after their delete returned True: {late[:10]}"
    assert claimed, "no delete found its task claimed: the deletes raced nothing"
    assert len(answers) == TASKS and true_ + claimed == TASKS  # each task existed when it was deleted
    assert all(count == 1 for count in starts.values())
    assert client.stats()["topics"]["race"]["counts"]["deleted"] == TASKS
