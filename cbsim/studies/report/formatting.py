"""Formatting shared by the three reports and both renderers: values as text, SLO lines and notes,
figures as :class:`~cbsim.studies.report.document.Image` blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cbsim.common.numbers import finite
from cbsim.run import plots
from cbsim.studies.report.document import Image, ReportKind

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: An SLO line is drawn only within this factor of the plotted values (else it squashes them).
SLO_VIEW_FACTOR = 3.0


def format_value(value: Any) -> str:
    """A cell: ``—`` for missing or non-finite numbers, integers as they are, other numbers with
    four significant digits (no exponent from 0.001 to 9999; whole numbers above that)."""
    if value is None:
        return "—"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    number = finite(value)
    if number is None:
        return "—" if isinstance(value, float | np.floating) else str(value)
    if number.is_integer() and abs(number) < 1e15:
        return f"{number:.0f}"
    if abs(number) >= 1e4:
        return f"{number:.0f}"
    return f"{number:.4g}"


def _money(value: Any, spec: str = ".2f") -> str:
    number = finite(value)
    return "—" if number is None else f"${number:{spec}}"


def _with_unit(value: Any, unit: str) -> str:
    text = format_value(value)
    return text if text == "—" or not unit else f"{text} {unit}"


def _get(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _describe_overrides(overrides: Mapping[str, Any] | None) -> str:
    if not overrides:
        return "scenario as given"
    return ", ".join(f"{k}={v}" for k, v in overrides.items())


def _slo_in_view(threshold: float | None, values: Any) -> bool:
    """Whether a target line at ``threshold`` keeps the data readable: within a factor
    :data:`SLO_VIEW_FACTOR` of the finite values (always, when there are none)."""
    if threshold is None:
        return False
    data = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)
    data = data[np.isfinite(data)]
    if not len(data):
        return True
    low, high = float(data.min()), float(data.max())
    return low / SLO_VIEW_FACTOR <= threshold <= high * SLO_VIEW_FACTOR


def _slo_note(metric: str, threshold: float | None, drawn: bool) -> str:
    if threshold is None:
        return ""
    if drawn:
        return "; the dashed line is the SLO"
    return (
        f"; the SLO ({metric} {format_value(threshold)}) lies far outside the data and is not drawn"
    )


def _plain_log_ticks(fig: Figure) -> None:
    """Decimal tick labels (0.1, 1, 10) instead of powers of ten on the figure's log axes."""
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    for axis in fig.axes:
        if axis.get_xscale() == "log":
            axis.xaxis.set_major_formatter(plain)
        if axis.get_yscale() == "log":
            axis.yaxis.set_major_formatter(plain)


def _figure_image(fig: Figure, name: str, alt: str, caption: str | None = None) -> Image:
    """Render a figure to PNG and close it (reports make many; none is shown)."""
    import matplotlib.pyplot as plt

    try:
        png = plots.to_png_bytes(fig)
    finally:
        plt.close(fig)
    return Image(name=name, png=png, alt=alt, caption=caption)


_NUMERIC = re.compile(r"^[-+$]?[\d.,]+(e[-+]?\d+)?( ?[%x])?$|^—$")


def _kind_name(kind: ReportKind) -> str:
    names = {
        "run": "simulation run",
        "sweep": "sweep",
        "capacity": "capacity plan",
        "plan": "deployment plan",
    }
    return names[kind]
