"""Recurring schedules as pure functions of a given "now": cron in IANA zones across
both daylight-saving edges, and the `every` grid after a downtime."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from delayd.model.schedule import (
    ScheduleError,
    check_cron,
    next_cron,
    next_every,
    zone,
)
from delayd.model.task import Task, TaskError


def ms(wall: str, tz: str, fold: int = 0) -> int:
    return int(datetime.fromisoformat(wall).replace(tzinfo=ZoneInfo(tz), fold=fold).timestamp() * 1000)


def iso(when_ms: int, tz: str) -> str:
    """The instant as local wall time with its UTC offset, e.g. 2025-03-30T03:00:00+02:00."""
    return datetime.fromtimestamp(when_ms / 1000, ZoneInfo(tz)).isoformat()


def runs(expr: str, tz: str, start: str, n: int) -> list[str]:
    out, t = [], ms(start, tz)
    for _ in range(n):
        t = next_cron(expr, tz, t)
        out.append(iso(t, tz))
    return out


# (zone, spring-forward day, its gap hour, fall-back day, its repeated hour)
ZONES = [("Europe/Berlin", "2025-03-30", 2, "2025-10-26", 2),
         ("America/New_York", "2025-03-09", 2, "2025-11-02", 1)]


@pytest.mark.parametrize("tz,spring,gap,fall,repeated", ZONES)
def test_a_daily_time_inside_the_spring_gap_runs_once_at_the_transition(tz, spring, gap, fall, repeated):
    got = runs(f"30 {gap} * * *", tz, f"{spring}T00:00", 3)
    day_before = ms(f"{spring}T00:00", tz)
    offset_after = datetime.fromtimestamp(day_before / 1000 + 86400, ZoneInfo(tz)).strftime("%z")
    transition = f"{spring}T{gap + 1:02d}:00:00{offset_after[:3]}:{offset_after[3:]}"
    assert got[0] == transition  # 02:30 does not exist: the first valid instant after it
    assert got[1].endswith(f"T{gap:02d}:30:00{offset_after[:3]}:{offset_after[3:]}")  # next day as usual
    assert len(set(got)) == 3


@pytest.mark.parametrize("tz,spring,gap,fall,repeated", ZONES)
def test_a_wall_time_that_occurs_twice_runs_once_at_its_first_occurrence(tz, spring, gap, fall, repeated):
    first = ms(f"{fall}T{repeated:02d}:30", tz, fold=0)
    second = ms(f"{fall}T{repeated:02d}:30", tz, fold=1)
    assert second - first == 3600_000
    start = ms(f"{fall}T00:00", tz)
    assert next_cron(f"30 {repeated} * * *", tz, start) == first
    # From inside the overlap (and from the second occurrence itself) the next run is the next day.
    for after in (first, first + 60_000, second - 1, second):
        assert next_cron(f"30 {repeated} * * *", tz, after) == ms(f"{fall}T{repeated:02d}:30", tz) + 86400_000 \
            + 3600_000  # the next day's 01:30/02:30 in standard time


@pytest.mark.parametrize("tz,spring,gap,fall,repeated", ZONES)
def test_every_half_hour_through_both_edges(tz, spring, gap, fall, repeated):
    spring_runs = runs("*/30 * * * *", tz, f"{spring}T00:00", 6)
    assert f"{spring}T{gap:02d}:30" not in " ".join(spring_runs)  # no wall time of the gap
    assert f"{spring}T{gap + 1:02d}:00" in " ".join(spring_runs)    # the transition itself, once
    stamps = [ms(r[:19], tz) for r in spring_runs]
    assert stamps == sorted(set(stamps))  # strictly increasing, no duplicate at the gap
    fall_runs = runs("*/30 * * * *", tz, f"{fall}T00:00", 8)
    instants = [datetime.fromisoformat(r).timestamp() for r in fall_runs]
    assert instants == sorted(set(instants))
    # Each wall time once: the repeated hour's second occurrence adds no run.
    walls = [r[:19] for r in fall_runs]
    assert len(walls) == len(set(walls))


def test_utc_and_named_days():
    assert iso(next_cron("15 9 * * mon-fri", "UTC", ms("2025-06-06T10:00", "UTC")), "UTC") == \
        "2025-06-09T09:15:00+00:00"  # a Friday after 09:15: Monday
    assert next_cron("0 0 * * *", "UTC", ms("2025-01-01T00:00", "UTC")) == ms("2025-01-02T00:00", "UTC")


def test_next_cron_is_strictly_after_now():
    at = ms("2025-06-01T03:00", "Europe/Berlin")
    assert next_cron("0 3 * * *", "Europe/Berlin", at) == at + 86400_000
    assert next_cron("0 3 * * *", "Europe/Berlin", at - 1) == at


def test_every_keeps_its_grid_after_a_downtime():
    assert next_every(10, 1000, 1000) == 11_000         # on time: one step
    assert next_every(10, 1000, 5_000) == 11_000
    assert next_every(10, 1000, 55_500) == 61_000       # missed 5: run once, then back on the grid
    assert next_every(1.5, 0, 0) == 1500                # fractions, in ms


@pytest.mark.parametrize("expr,says", [
    ("61 * * * *", "bad minute"), ("* * * *", "five fields"), ("0 0 30 2 *", "day-of-month"),
    ("0 3 * * funday", "day-of-week"), ("*/0 * * * *", "bad minute"), ("0 0 0 * * *", "five fields"),
    ("@daily", "five fields"), (42, "string"),
])
def test_bad_cron_expressions(expr, says):
    with pytest.raises(ScheduleError, match=says):
        check_cron(expr)


def test_cron_names_and_spacing_are_accepted():
    assert check_cron("  0  3 * jan,jul MON-fri ") == "0 3 * jan,jul MON-fri"


@pytest.mark.parametrize("value", [0, 0.5, -1, float("nan"), float("inf"), True, "5"])
def test_bad_every(value):
    with pytest.raises(TaskError, match="^every must be "):
        Task.new("t", 1, call="m:f", every=value)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../etc/passwd", None, "Europe/",
                                  # files of the zone directory that are no place's zone: `localtime` is
                                  # each host's own, so two hosts would compute different due times
                                  "localtime", "posixrules", "Factory", "right/UTC", "posix/Europe/Berlin",
                                  {}, ["UTC"], 7])  # other JSON types (POST /api/tasks): no cache key
def test_bad_zone(name):
    with pytest.raises(ScheduleError, match="zone"):
        zone(name)


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "US/Eastern"])
def test_iana_names_and_links_are_zones(name):
    assert zone(name).key == name
