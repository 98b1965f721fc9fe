"""Recurring schedules: `every` S seconds and `cron` expressions in an IANA zone.

Pure functions of a given "now" (ms on Redis's clock): nothing here reads a clock,
so the daylight-saving rules are tested from chosen instants. Cron expressions are
matched on the zone's wall clock by cronsim, then each wall time is turned into an
instant by one rule:
- a wall time that does not exist (spring-forward gap) runs once, at the first valid
  instant after it: the transition (in Berlin `30 2 * * *` runs at 03:00 that day);
- a wall time that occurs twice (fall-back overlap) runs once, at its first
  occurrence (`fold=0`); its second occurrence is not a new due time.
"""
from __future__ import annotations

import contextlib
import functools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

UTC = timezone.utc
# Names available_timezones() lists that are no place: `localtime` (a Debian symlink to the
# host's own zone, so each host would compute its own due times) and tzdata's `Factory` (zone unknown).
NOT_PLACES = frozenset({"localtime", "Factory"})


class ScheduleError(ValueError):
    """An invalid `every`, `cron` or `tz` (one line, fit for a user)."""


@functools.cache
def zone_names() -> frozenset[str]:
    """The IANA zone names a task may give: once per process (it opens every zone file)."""
    return frozenset(available_timezones()) - NOT_PLACES


def zone(name: object) -> ZoneInfo:
    """The IANA zone `name` (e.g. Europe/Berlin); ScheduleError if there is none. Only names
    that zone_names() lists: not a file of the zone directory that is no zone of a place
    (`posixrules`, `right/UTC`, `localtime`)."""
    if not isinstance(name, str) or not name:  # (before the cache: a dict or list is no key of it)
        raise ScheduleError(f"tz must be an IANA zone name like Europe/Berlin, got {name!r}")
    return _zone(name)


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    if name in zone_names():
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
            return ZoneInfo(name)
    raise ScheduleError(f"unknown time zone {name!r} (an IANA name like Europe/Berlin or UTC)")


def check_cron(expr: object) -> str:
    """A five-field cron expression (`m h dom mon dow`), normalised to single spaces."""
    if not isinstance(expr, str):
        raise ScheduleError(f"cron must be a string like '0 3 * * *', got {expr!r}")
    fields = expr.split()
    if len(fields) != 5:
        raise ScheduleError(f"cron needs five fields (minute hour day-of-month month day-of-week), got {expr!r}")
    text = " ".join(fields)
    try:
        next(CronSim(text, datetime(2000, 1, 1)))
    except CronSimError as exc:
        raise ScheduleError(f"invalid cron expression {expr!r}: {str(exc).lower()}") from None
    except StopIteration:
        raise ScheduleError(f"cron expression {expr!r} never matches") from None
    return text


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant of a naive wall time in `tz` by the module's rule (first occurrence;
    for a time inside a gap, the transition that skipped it)."""
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return first.astimezone(UTC)
    # In a gap fold=0 reads the wall time with the offset before the transition (an
    # instant after it), fold=1 with the offset after (an instant before it): the
    # transition lies between. Find its second.
    before = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    after = first.astimezone(UTC)
    offset = after.astimezone(tz).utcoffset()
    low, high = 0, int((after - before).total_seconds())
    while high - low > 1:
        mid = (low + high) // 2
        if (before + timedelta(seconds=mid)).astimezone(tz).utcoffset() == offset:
            high = mid
        else:
            low = mid
    return before + timedelta(seconds=high)


def next_cron(expr: str, tz: str, after_ms: int) -> int | None:
    """The first due time (ms) of `expr` in zone `tz` strictly after `after_ms`; None if none
    within cronsim's horizon (50 years)."""
    tzinfo = zone(tz)
    after = datetime.fromtimestamp(after_ms / 1000, UTC)
    wall = after.astimezone(tzinfo).replace(tzinfo=None, microsecond=0)
    # Wall times after `wall`, in order. In an overlap's second hour they include
    # times whose first occurrence is already past: those are skipped.
    for match in CronSim(expr, wall):
        instant = _instant(match, tzinfo)
        if instant > after:
            return int(instant.timestamp() * 1000)
    return None


def next_every(every_s: float, due_ms: int, after_ms: int) -> int:
    """The next point of the grid `due + k * every` (k >= 1) strictly after `after_ms`:
    after a downtime the task runs once, then keeps its grid (no backfill)."""
    step = max(1, round(every_s * 1000))
    k = max(1, (after_ms - due_ms) // step + 1)
    return due_ms + k * step
