"""The correction grids' many-point evaluation (:meth:`LogGrid.evaluate`): the same floats as the
sparse interpolation matrix's product that fitting uses, for every shipped correction grid, and
the same as the one-point lookup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.cost.grid import LogGrid, interpolation_matrix

PROFILES = sorted(
    (Path(__file__).parent.parent / "cbsim" / "catalog" / "data" / "profiles").rglob("*.json")
)


def _corrections(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if {"features", "axes", "values"} <= node.keys():
            yield node
        for value in node.values():
            yield from _corrections(value)
    elif isinstance(node, list) and node and isinstance(node[0], dict | list):
        for value in node:  # not a list of numbers (a grid's values: a million of them)
            yield from _corrections(value)


def _shipped_grids() -> list[LogGrid]:
    grids = []
    for path in PROFILES:
        for correction in _corrections(json.loads(path.read_text())):
            grids.append(LogGrid.from_lists(correction["axes"], correction["values"]))
    return grids


GRIDS = _shipped_grids()


def _points(grid: LogGrid, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Points inside, on and beyond each axis (natural units), zero included."""
    columns = []
    for axis in grid.axes:
        x = rng.uniform(axis[0] - 3, axis[-1] + 3, n)
        x[: len(axis)] = axis[: min(len(axis), n)]
        values = np.exp2(x)
        values[-1] = 0.0
        columns.append(values)
    return columns


def test_there_are_shipped_grids_of_one_and_two_features() -> None:
    assert {len(g.axes) for g in GRIDS} >= {1, 2}


@pytest.mark.parametrize("index", range(len(GRIDS)))
def test_evaluate_is_the_interpolation_matrix_product_bit_for_bit(index: int) -> None:
    grid = GRIDS[index]
    points = _points(grid, np.random.default_rng(index), 400)
    expected = interpolation_matrix(grid.axes, points) @ grid.values.ravel()
    got = grid.evaluate(*points)
    assert got.tobytes() == np.asarray(expected, dtype=np.float64).tobytes()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(2, 6), min_size=1, max_size=3),
    st.integers(0, 2**32 - 1),
)
def test_evaluate_equals_the_matrix_product_on_any_grid(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    axes = [np.cumsum(rng.uniform(0.1, 3.0, n)) for n in sizes]
    values = rng.normal(0.0, 1.0, int(np.prod(sizes)))
    grid = LogGrid.from_lists([a.tolist() for a in axes], values.tolist())
    points = _points(grid, rng, 50)
    expected = interpolation_matrix(grid.axes, points) @ grid.values.ravel()
    assert grid.evaluate(*points).tobytes() == np.asarray(expected).tobytes()
