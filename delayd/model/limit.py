"""A topic's limit (SPEC 8, "Limits"): a rate (`N/s`, `N/m`, `N/h`: at most N starts per period)
and a concurrency (at most K runs in flight), checked here and written to Redis as one short
value, `N PERIOD_MS K` (0: that part unset), which the claim script reads
(docs/redis-layout.md, "Limits")."""
from __future__ import annotations

import re
from typing import Any, NamedTuple

from delayd.model.task import TaskError

PERIODS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}
MAX_COUNT = 1_000_000_000  # (the script reads at most nine digits)
_RATE = re.compile(r"\s*([0-9]{1,9})\s*/\s*([smh])\s*")  # (ASCII digits: \d takes '٣' too)
_STORED = re.compile(r"([0-9]{1,9}) ([0-9]{1,9}) ([0-9]{1,9})")


class Limit(NamedTuple):
    """One topic's limit, and what it holds now: tasks held back (`held`, from the counters) and
    runs in flight counted against its concurrency (`running`)."""

    topic: str
    rate: str | None        # 'N/s', 'N/m' or 'N/h'
    concurrency: int | None
    held: int = 0
    running: int = 0

    def as_dict(self) -> dict[str, Any]:
        return self._asdict()


def parse_rate(text: Any) -> tuple[int, int]:
    """'20/s' -> (20, 1000): starts and period (ms). TaskError for anything else."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if not match or int(match.group(1)) < 1:
        raise TaskError(f"rate must be N/s, N/m or N/h with N from 1 to {MAX_COUNT - 1}, got {text!r}")
    return int(match.group(1)), PERIODS_MS[match.group(2)]


def per_second(rate: str) -> float:
    """A rate as Limit shows it ('20/s', '3/m', '5/1500ms') in starts per second."""
    count, _, period = rate.partition("/")
    period_ms = PERIODS_MS.get(period) or float(period.removesuffix("ms"))
    return int(count) * 1000 / period_ms


def check_concurrency(value: Any) -> int:
    if type(value) is not int or not 1 <= value < MAX_COUNT:
        raise TaskError(f"concurrency must be a whole number from 1 to {MAX_COUNT - 1}, got {value!r}")
    return value


def encode(rate: Any = None, concurrency: Any = None) -> str:
    """The stored value of a limit: 'N PERIOD_MS K'. TaskError when neither is given or one is bad."""
    if rate is None and concurrency is None:
        raise TaskError("a limit needs a rate (N/s, N/m, N/h), a concurrency, or both")
    count, period = parse_rate(rate) if rate is not None else (0, 1000)
    slots = check_concurrency(concurrency) if concurrency is not None else 0
    return f"{count} {period} {slots}"


def decode(topic: str, value: str, held: int = 0, running: int = 0) -> Limit | None:
    """A stored value as a Limit; None for one that is not 'N PERIOD_MS K' (written by hand: the
    scripts ignore it too)."""
    match = _STORED.fullmatch(value or "")
    if not match:
        return None
    count, period, slots = (int(g) for g in match.groups())
    unit = {ms: unit for unit, ms in PERIODS_MS.items()}.get(period)
    rate = f"{count}/{unit}" if count and unit else (f"{count}/{period}ms" if count else None)
    if rate is None and not slots:
        return None
    return Limit(topic, rate, slots or None, held, running)
