"""Where a figure's legend goes: outside the plot, where it hides no curve.

Inside the axes a legend of several lines (a sweep's one line per override value, a plan's one
line per layout) covers the curves it names, whatever corner matplotlib calls "best". A figure
:mod:`cbsim.run.plots` makes itself has a constrained layout, which makes room for a figure legend
outside the axes: to the right while the labels are short (:data:`LEGEND_BESIDE_CHARS`), below
the plot for long ones (``max_batch_size=64, max_batched_tokens=2048``), so the plot keeps its
width. On axes a caller gave (a notebook's own layout) the legend stays inside, in the least
crowded corner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["LEGEND_BESIDE_CHARS", "columns_that_fit", "legend_outside"]

LEGEND_BESIDE_CHARS = 24
"""A legend outside a plot goes to its right while its labels are this short, else below it."""


_POINTS_PER_CHAR = 4.6  # a label's width per character at font size 8 (DejaVu Sans, average)
_ENTRY_POINTS = 40.0  # an entry's line sample and padding


def columns_that_fit(width_in: float, labels: Sequence[str], most: int = 4) -> int:
    """How many columns of ``labels`` (at font size 8) a legend as wide as a figure of
    ``width_in`` inches holds: at least one, at most ``most``."""
    longest = max((len(label) for label in labels), default=1)
    fit = int(width_in * 72.0 // (longest * _POINTS_PER_CHAR + _ENTRY_POINTS))
    return max(1, min(most, len(labels), fit))


def legend_outside(axis: Axes, *, own_figure: bool) -> None:
    """Draw ``axis``'s legend outside the plot when ``own_figure`` (the figure was made for it
    and laid out by matplotlib's constrained layout), else inside at ``loc="best"``."""
    if not own_figure:
        axis.legend(loc="best", fontsize=8)
        return
    handles, labels = axis.get_legend_handles_labels()
    if max((len(label) for label in labels), default=0) <= LEGEND_BESIDE_CHARS:
        where: dict[str, Any] = {"loc": "outside right upper"}
    else:
        where = {"loc": "outside lower center"}
    figure = axis.get_figure(root=True)
    if figure is None:  # pragma: no cover - axes always belong to a figure here
        raise ValueError("the axes do not belong to a figure")
    if "ncols" not in where and where["loc"] == "outside lower center":
        where["ncols"] = columns_that_fit(float(figure.get_figwidth()), labels, most=2)
    figure.legend(handles, labels, fontsize=8, **where)
