"""The hot path's compiled forms give the same floats and draws as the reference ones: a GEMM's
three-feature correction grid (LogGrid.compiled) and leading_successes with broadcast rates."""

from __future__ import annotations

import numpy as np

from cbsim.cost.grid import LogGrid
from cbsim.engine.speculative.acceptance import leading_successes


def test_three_feature_grid_compiled_equals_call_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    axes = [np.sort(rng.uniform(-2, 16, size=n)) for n in (5, 4, 6)]
    grid = LogGrid.from_lists(axes, rng.normal(size=5 * 4 * 6).tolist())
    compiled = grid.compiled()
    points = [tuple(float(2 ** rng.uniform(-4, 18)) for _ in range(3)) for _ in range(500)]
    points += [(0.0, 1.0, 1.0), (1e-40, 2.0, 1e9)]
    for point in points:
        assert compiled(*point) == grid(*point)


def test_broadcast_rates_draw_as_the_full_matrix() -> None:
    ks = np.array([3, 1, 4, 2, 4], dtype=np.int64)
    per_request = np.array([0.2, 0.9, 0.6, 0.5, 0.95])
    full = np.repeat(per_request[:, None], 4, axis=1)
    a = leading_successes(per_request[:, None], ks, np.random.default_rng(9))
    b = leading_successes(full, ks, np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    row = np.array([[0.9, 0.7, 0.5, 0.3]])
    c = leading_successes(row, ks, np.random.default_rng(9))
    d = leading_successes(np.repeat(row, len(ks), axis=0), ks, np.random.default_rng(9))
    np.testing.assert_array_equal(c, d)
    assert (a <= ks).all() and (c <= ks).all()
