"""Times as people read them, for the command line and the dashboard alike: every time says
its zone, so a cron task's 03:00 in Europe/Berlin is never mistaken for the 02:00 UTC it is."""
from __future__ import annotations

import time
from datetime import datetime
from zoneinfo import ZoneInfo

STAMP = "%Y-%m-%d %H:%M:%S"
BAD_TIME = (OverflowError, ValueError, OSError)


def local_time(seconds: float | None, tz: str | None = None) -> str:
    """Unix seconds as local time to the ms with the zone's abbreviation ('-' for none), e.g.
    `2026-12-07 02:00:00.000 UTC`. With `tz` (a cron task's zone) the time in that zone comes
    first and the local time follows in parentheses when it differs:
    `2026-12-07 03:00:00.000 CET (02:00:00 UTC)`. A time no calendar holds (from a corrupt
    record) reads `?(value)`, and a zone that is no zone is left out, instead of an error."""
    first, local = time_parts(seconds, tz)
    return f"{first} ({local})" if local else first


def time_parts(seconds: float | None, tz: str | None = None) -> tuple[str, str]:
    """local_time's two parts: the time (in `tz` if given) and the local time beside it ('' when
    there is none), for a page that sets them apart."""
    if seconds is None:
        return "-", ""
    try:
        local = datetime.fromtimestamp(seconds).astimezone()
    except BAD_TIME:
        return f"?({seconds})", ""
    ms = f".{int(seconds * 1000) % 1000:03d}"
    zoned = _in_zone(seconds, tz)
    if zoned is None or (zoned.utcoffset(), zoned.tzname()) == (local.utcoffset(), local.tzname()):
        return f"{local.strftime(STAMP)}{ms} {local.tzname()}", ""
    also = local.strftime("%H:%M:%S" if local.date() == zoned.date() else STAMP)
    return f"{zoned.strftime(STAMP)}{ms} {zoned.tzname()}", f"{also} {local.tzname()}"


def zone_name(seconds: float | None = None) -> str:
    """The local zone's abbreviation at `seconds` (now by default), for labels such as a chart's axis."""
    return time.strftime("%Z", time.localtime(seconds))


def _in_zone(seconds: float, tz: str | None) -> datetime | None:
    if not tz:
        return None
    try:
        return datetime.fromtimestamp(seconds, ZoneInfo(tz))
    except (*BAD_TIME, KeyError):  # ZoneInfoNotFoundError is a KeyError; a bad name a ValueError
        return None
