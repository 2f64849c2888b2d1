"""The time axis of a figure over a run: seconds for a short run, hours for a long one.

A day of traffic drawn in seconds reads 0 to 86,400 — nobody thinks of a day that way. Runs that
span at least :data:`HOURS_FROM_S` (three hours) are drawn in hours from the start (a day reads
0 to 24, its ticks every two hours); shorter runs keep seconds, as the timeseries columns state
them (``t_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["HOURS_FROM_S", "TimeAxis", "time_axis"]

HOURS_FROM_S = 3 * 3600.0
"""Runs at least this long (seconds) are drawn in hours."""

_HOUR_STEPS = (1, 2, 3, 4, 6, 12, 24, 48, 168)
"""Tick spacings (hours) tried in turn until the axis has at most :data:`_MAX_TICKS` ticks."""
_MAX_TICKS = 13


@dataclass(frozen=True)
class TimeAxis:
    """How to draw times given in seconds: divide by ``seconds_per_unit``, label ``label``,
    ticks every ``tick_step`` units (None: matplotlib's own)."""

    seconds_per_unit: float
    label: str
    tick_step: float | None = None

    def scale(self, seconds: float) -> float:
        return seconds / self.seconds_per_unit

    def apply(self, axis: Axes) -> None:
        """Label ``axis``'s x axis and set its ticks."""
        axis.set_xlabel(self.label)
        if self.tick_step is not None:
            from matplotlib.ticker import MultipleLocator

            axis.xaxis.set_major_locator(MultipleLocator(self.tick_step))


def time_axis(span_s: float | None) -> TimeAxis:
    """The axis for a run spanning ``span_s`` seconds (None: unknown, seconds)."""
    if span_s is None or not span_s >= HOURS_FROM_S:
        return TimeAxis(1.0, "time (s)")
    hours = span_s / 3600.0
    step = next(
        (s for s in _HOUR_STEPS if math.floor(hours / s) + 1 <= _MAX_TICKS), _HOUR_STEPS[-1]
    )
    return TimeAxis(3600.0, "time (h from the start)", float(step))
