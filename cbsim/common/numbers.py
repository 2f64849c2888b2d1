"""Numbers as people read them, in one format across a command's output.

A table that prints ``7,441`` beside ``1.15e+04`` makes the reader convert; :func:`figure` prints
every number the same way: four significant digits, thousands separated by commas, never an
exponent (``0.01563``, ``20.5``, ``7,441``, ``11,500``, ``1,234,568``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["figure", "finite"]


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool, numpy's included), else
    None."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def figure(value: Any, digits: int = 4, missing: str = "—") -> str:
    """``value`` with ``digits`` significant digits, thousands separated, never an exponent;
    ``missing`` for None and numbers that are not finite."""
    number = finite(value)
    if number is None:
        return missing
    if number == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(number)))
    decimals = max(0, digits - 1 - magnitude)
    rounded = round(number, decimals)
    if decimals == 0:
        return f"{round(rounded):,}"
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
