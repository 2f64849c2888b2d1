"""Error statistics for calibration: absolute percentage error and its median and P90."""

from __future__ import annotations

import numpy as np
import pandas as pd


def ape(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted / measured − 1| per point."""
    return np.abs(
        np.asarray(predicted, dtype=np.float64) / np.asarray(measured, dtype=np.float64) - 1.0
    )


def summarize(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Median and P90 absolute percentage error (as fractions) and the point count."""
    errors = ape(predicted, measured)
    return {
        "median_ape": float(np.median(errors)),
        "p90_ape": float(np.percentile(errors, 90)),
        "points": float(len(errors)),
    }


def error_table(rows: list[dict[str, object]]) -> pd.DataFrame:
    """Rows of {family, model, median_ape, p90_ape, points, ...} as a DataFrame in percent."""
    frame = pd.DataFrame(rows)
    for column in ("median_ape", "p90_ape"):
        if column in frame:
            frame[column] = 100.0 * frame[column]
    return frame
