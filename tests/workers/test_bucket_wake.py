"""The bucket process woken by an add of a task due now: the wake message names the task, whose record its
promote declares (docs/redis-layout.md, "Declared keys"), so one promote call moves it, not two."""
from __future__ import annotations

import threading

import pytest

from delayd.store.scripts import SCRIPTS

pytestmark = pytest.mark.daemon(buckets=1, queues=1)


def test_a_task_added_due_now_is_moved_by_the_one_promote_its_wake_starts(r, daemon, client):
    client.add("warm", 1, push="out")  # the bucket process's first ticks are behind it
    assert r.blpop("out", 10) is not None
    promotes: list[str] = []
    claimed = threading.Event()

    def calls(name: str, text: str) -> bool:  # EVALSHA on Redis 6.2, FCALL of its function on 7+ and Valkey
        script = SCRIPTS[name]
        return script.sha in text or bool(script.function) and f"{script.function} " in text

    def watch(monitor) -> None:  # MONITOR shows each command as Redis runs it: from the add to the claim
        adding = False
        for command in monitor.listen():
            text = command["command"]
            adding = adding or calls("add", text)
            if adding and calls("promote", text):
                promotes.append(text)
            if promotes and calls("claim", text):  # (its lease then wakes the bucket again)
                claimed.set()
                return

    with r.monitor() as monitor:
        threading.Thread(target=watch, args=(monitor,), daemon=True).start()
        client.add("now", 1, push="out")
        assert claimed.wait(10), "the task was not claimed"
    assert r.blpop("out", 10) is not None
    assert len(promotes) == 1, promotes
