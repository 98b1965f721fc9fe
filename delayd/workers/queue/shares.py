"""How many tasks of each priority a queue process's claim asks for (claim.lua's quotas)."""
from __future__ import annotations

import math


class Shares:
    """The quotas of priorities 3, 2, 1 for each claim: its size split by the weights (5:3:2), the
    fractions carried over to the next claim of the same bucket and kind (largest remainder first).
    Every claim gets its share to within one task whatever its size and whatever the claims before it
    (a claim of 2 gets one of priority 3, never 0, 1, 1: issue 41), and over claims each priority gets
    exactly its weight, so priority 1 is never starved."""

    def __init__(self, weights: tuple[int, int, int]):
        self.weights = weights
        self.credit: dict[tuple[int, bool], list[float]] = {}  # per (bucket, kind): shares not given yet

    def quotas(self, key: tuple[int, bool], n: int) -> tuple[int, int, int]:
        total = sum(self.weights)
        credit = self.credit.setdefault(key, [0.0, 0.0, 0.0])
        for i, weight in enumerate(self.weights):
            credit[i] += n * weight / total
        # Each credit stays above -1 (below, it was rounded up once), so the floors sum to at most n.
        quotas = [max(0, math.floor(c)) for c in credit]
        for i in sorted(range(3), key=lambda i: quotas[i] - credit[i])[:n - sum(quotas)]:
            quotas[i] += 1
        for i in range(3):
            credit[i] -= quotas[i]
        return quotas[0], quotas[1], quotas[2]
