"""delayd.store.resp: a call packed from its head (the leading keys and args packed once) is byte for
byte the command packed whole, whatever the counts of the call's own keys and args, in any order."""
from __future__ import annotations

from delayd.store import resp

SHA = "0" * 40
LEAD_KEYS, LEAD_ARGS = ["p{0}:delayed", "p{0}:counts"], [0, "p:wake:0"]


def whole(keys: list, args: list) -> bytes:
    return resp.pack_any(("EVALSHA", SHA, len(LEAD_KEYS) + len(keys), *LEAD_KEYS, *keys, *LEAD_ARGS, *args))


def test_a_call_packed_from_its_head_is_the_command_packed_whole():
    head = resp.Head(LEAD_KEYS, LEAD_ARGS)
    lead = resp.lead("EVALSHA", SHA)
    calls = [
        (["p{0}:t:a:1", "p{0}:paused:a"], ['{"call":"a:b"}', 2, "delay", 0]),
        ([f"p{{0}}:t:a:{i}" for i in range(12)], list(range(24))),
        ([], []),
        (["p{0}:t:é:1", b"p{0}:paused:\xff"], ["x" * 300, 3, "at", 10**14]),  # (str and bytes, long args)
        (["p{0}:t:a:2", "p{0}:paused:a"], ['{"url":"http://h/"}', 1, "delay*", 5]),  # the first counts again
    ]
    for keys, args in calls + calls:
        assert head.pack(lead, keys, args) == whole(keys, args)
