"""The overview's charts (delayd.web.charts) as numbers: tick labels short enough for the room left of the
plot, whatever the values (a lateness of minutes is hundreds of thousands of ms)."""
from __future__ import annotations

import pytest

from delayd.client.series import Minute
from delayd.web import charts

TICK_CHAR_PX = 6.5  # the widest digit of the 10px tick font, with room to spare


@pytest.mark.parametrize("peak", [0, 0.4, 7, 64, 999, 4_000, 29_000, 297_600, 3_600_000, 86_400_000, 9e11])
def test_every_y_label_fits_left_of_the_plot(peak):
    minutes = [Minute(1_800_000_000 + 60 * i, {}) for i in range(60)]
    chart = charts.chart("Lateness", "ms after due", minutes, [("p99", "c-p99", [None] * 59 + [peak])])
    labels = [label for _, label in chart.y_ticks]
    assert all(len(label) * TICK_CHAR_PX <= charts.LEFT - 6 for label in labels), labels
    assert labels[0] == "0" and len(set(labels)) == 3, labels


@pytest.mark.parametrize("value, label", [(0, "0"), (2.5, "2.5"), (250, "250"), (2500, "2500"), (25_000, "25k"),
                                          (500_000, "500k"), (2_500_000, "2.5M"), (5e9, "5G"), (5e12, "5T")])
def test_tick_labels_are_compact(value, label):
    assert charts.tick(value) == label
