"""The benchmark rows a fit left out, each named: ``calibrate e2e`` said only how many rows it
dropped per reason, so a user could not tell which line of their file was ignored.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["SHOWN", "dropped_rows"]

SHOWN = 40
"""Dropped rows named one by one; the rest are counted."""

_COLUMNS = ("source", "model", "hf_model", "gpu", "tp", "dtype", "concurrency", "skipped")


def dropped_rows(excluded: pd.DataFrame, shown: int = SHOWN) -> pd.DataFrame:
    """One row per benchmark left out (at most ``shown``): where it is (``file:row``), what it
    ran, and why it was left out. Empty when none was."""
    columns = [c for c in _COLUMNS if c in excluded.columns]
    table = excluded[columns].head(shown).astype(object)
    table = table.where(pd.notna(table), "—").rename(columns={"skipped": "why left out"})
    if "hf_model" in table and "model" in table:
        named = table["model"] != "—"
        table.loc[~named, "model"] = table.loc[~named, "hf_model"]
        table = table.drop(columns="hf_model")
    return table.reset_index(drop=True)
