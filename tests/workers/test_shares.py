"""Each take's quotas per priority (delayd.workers.queue.shares): issue 41 found a take of 2 starting
mid-rotation of one 5:3:2 cycle shared by every bucket and kind asking for (0, 1, 1), so that priority 3
waited while its list was not empty."""
from __future__ import annotations

import random

from delayd.workers.queue.shares import Shares


def test_every_take_gets_its_share_to_within_one_and_the_weights_over_takes():
    shares = Shares((5, 3, 2))
    rng = random.Random(41)
    given = [0, 0, 0]
    for _ in range(2000):
        key, n = (rng.randrange(3), rng.random() < 0.5), rng.randint(1, 12)
        quotas = shares.quotas(key, n)
        assert sum(quotas) == n and all(abs(q - n * w / 10) < 1 + 1e-9 for q, w in zip(quotas, (5, 3, 2))), quotas
        given = [g + q for g, q in zip(given, quotas)]
    assert [round(g / sum(given), 2) for g in given] == [0.5, 0.3, 0.2]


def test_takes_of_two_always_ask_for_priority_3_and_takes_of_one_give_priority_1_its_turn():
    shares = Shares((5, 3, 2))
    assert all(shares.quotas((0, False), 2)[0] == 1 for _ in range(50))
    ones = [shares.quotas((1, False), 1) for _ in range(10)]
    assert sum(q[2] for q in ones) == 2 and sum(q[1] for q in ones) == 3 and sum(q[0] for q in ones) == 5
