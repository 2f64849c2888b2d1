"""The figure of an autoscaled run: replicas serving against the offered load over the run.

:func:`replicas_and_load` draws, per timeseries window, the replicas serving (time-averaged, the
``replicas`` column; left axis) and the requests arriving per second (``arrivals`` over the
window's length; right axis), against time in seconds or, for a run of three hours or more, in
hours (:mod:`cbsim.outputs.time_axis`: a day reads 0 to 24). The legend sits below the axes, clear of
both curves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from cbsim.outputs.time_axis import time_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["replicas_and_load"]


def _steps(t: np.ndarray, end: float, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A windowed series as the points of a ``steps-post`` line held to ``end``."""
    return np.append(t, end), np.append(values, values[-1] if len(values) else np.nan)


def replicas_and_load(timeseries: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Replicas serving (left axis) and arrivals per second (right axis) per window.

    ``timeseries`` is a run's timeseries frame with ``t_s``, ``span_s``, ``replicas`` and
    ``arrivals``; it is not mutated."""
    import matplotlib.pyplot as plt

    t = timeseries["t_s"].to_numpy(dtype=float)
    span = timeseries["span_s"].to_numpy(dtype=float)
    replicas = timeseries["replicas"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        load = timeseries["arrivals"].to_numpy(dtype=float) / span
    end = float(t[-1] + span[-1]) if len(t) else 0.0
    clock = time_axis(end)
    x, x_end = t / clock.seconds_per_unit, clock.scale(end)
    fig, left = plt.subplots(figsize=(9.0, 4.0), layout="constrained")
    right = left.twinx()
    left.plot(*_steps(x, x_end, replicas), drawstyle="steps-post", color="C0", linewidth=1.8,
              label="replicas serving (left)")  # fmt: skip
    right.plot(*_steps(x, x_end, load), drawstyle="steps-post", color="C3", linewidth=1.0,
               alpha=0.8, label="offered load, req/s (right)")  # fmt: skip
    left.set_ylabel("replicas serving", color="C0")
    right.set_ylabel("arrivals (req/s)", color="C3")
    top = float(np.nanmax(replicas)) if len(replicas) else 1.0
    left.set_ylim(0, max(1.0, top) * 1.15)
    right.set_ylim(bottom=0)
    if len(x):
        left.set_xlim(float(x[0]), x_end or 1.0)
    clock.apply(left)
    left.grid(True, alpha=0.3)
    left.set_title(title or "Replicas serving against the offered load")
    handles = left.get_lines() + right.get_lines()
    fig.legend(handles, [str(h.get_label()) for h in handles], loc="outside lower center",
               ncols=2, fontsize=8, frameon=False)  # fmt: skip
    return fig
