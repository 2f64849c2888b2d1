"""Markdown tables of calibration results, written without optional packages.

pandas' ``DataFrame.to_markdown`` needs ``tabulate``, which a base install of cbsim does not have,
so the calibration reports (``cbsim calibrate report``) format their tables here: a GitHub pipe
table, one row per frame row, numbers right-aligned and written as Python's ``g`` format writes
them (``12.3``, ``0.0415``, ``1e-05``), integers in full, missing values as ``nan``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["markdown_table"]


def _cell(value: Any) -> str:
    """One value as table text (pipes escaped, so a cell never splits)."""
    if isinstance(value, bool | np.bool_):
        text = str(bool(value))
    elif isinstance(value, int | np.integer):
        text = str(int(value))
    elif isinstance(value, float | np.floating):
        number = float(value)
        text = "nan" if math.isnan(number) else f"{number:g}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown pipe table (its index left out); numeric columns right-aligned."""
    columns = [str(c) for c in frame.columns]
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    rows = [[_cell(v) for v in row] for row in frame.itertuples(index=False, name=None)]
    widths = [max([len(name), 3, *(len(row[i]) for row in rows)]) for i, name in enumerate(columns)]

    def line(cells: list[str]) -> str:
        padded = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(cells, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|".join(
        "-" * (width + 1) + ":" if right else "-" * (width + 2)
        for width, right in zip(widths, numeric, strict=True)
    )
    return "\n".join([line(columns), f"|{rule}|", *map(line, rows)])
