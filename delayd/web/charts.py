"""Line charts as numbers for an SVG template: the last hour of runs, drawn on the server.

No chart library and no script: the page gets polylines in SVG coordinates, so the
charts work with scripts off and nothing taken from Redis reaches the SVG but numbers.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from delayd.client.series import Minute
from delayd.model.clock import zone_name

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 420, 150, 36, 18, 8


class Line(NamedTuple):
    name: str
    css: str
    points: str          # "x,y x,y ..." (gaps where a minute has no value are bridged)
    last: str            # the latest value, as shown in the legend
    end: tuple[str, str] | None  # where the line ends (a dot, so a single minute shows too)


class Chart(NamedTuple):
    title: str
    unit: str
    lines: list[Line]
    y_ticks: list[tuple[float, str]]     # (y, label)
    x_ticks: list[tuple[float, str]]     # (x, HH:MM)
    zone: str                            # the local zone of the HH:MM ticks
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: float = HEIGHT - BOTTOM


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is >= value (at least 1)."""
    if value <= 1:
        return 1.0
    scale = 1.0
    while True:
        for step in (1, 2, 5):
            if step * scale >= value:
                return step * scale
        scale *= 10


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def tick(value: float) -> str:
    """An axis label of at most 4 characters (the room left of the plot): 25k, 500k, 2.5M past 9999."""
    if value < 10_000:
        return _fmt(value)
    for suffix in "kMGTPE":
        value /= 1000
        if value < 1000:
            break
    return f"{value:g}{suffix}"


def chart(title: str, unit: str, minutes: list[Minute], lines: list[tuple[str, str, list[float | None]]]) -> Chart:
    """A chart of `lines` (name, css class, one value or None per minute) over `minutes`."""
    top = _nice_max(max((v for _, _, values in lines for v in values if v is not None), default=0))
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP
    step = plot_w / max(1, len(minutes) - 1)

    def y(value: float) -> float:
        return round(TOP + plot_h * (1 - value / top), 1)

    drawn = []
    for name, css, values in lines:
        xy = [(f"{LEFT + i * step:.1f}", f"{y(v)}") for i, v in enumerate(values) if v is not None]
        last = next((v for v in reversed(values) if v is not None), None)
        drawn.append(Line(name, css, " ".join(f"{x},{y_}" for x, y_ in xy), "-" if last is None else _fmt(last),
                          xy[-1] if xy else None))
    y_ticks = [(y(top * f), tick(top * f)) for f in (0, 0.5, 1)]
    x_ticks = [(round(LEFT + i * step, 1), time.strftime("%H:%M", time.localtime(minutes[i].start)))
               for i in range(0, len(minutes), 15)] if minutes else []
    return Chart(title, unit, drawn, y_ticks, x_ticks, zone_name(minutes[-1].start if minutes else None))


def hour_charts(minutes: list[Minute]) -> list[Chart]:
    """Throughput (runs started per minute), outcomes per minute, and lateness p50/p99 per minute."""
    def series(name: str) -> list[float | None]:
        return [float(m.events[name]) for m in minutes]

    def lateness(q: float) -> list[float | None]:
        values = [m.lateness(q) for m in minutes]
        return [None if v is None else v * 1000 for v in values]

    return [
        chart("Throughput", "runs started / min", minutes, [("started", "c-start", series("started"))]),
        chart("Outcomes", "runs / min", minutes, [("ok", "c-ok", series("ok")), ("retry", "c-retry", series("retry")),
                                                  ("failed", "c-failed", series("failed"))]),
        chart("Lateness", "ms after due", minutes, [("p50", "c-p50", lateness(0.5)), ("p99", "c-p99", lateness(0.99))]),
    ]
