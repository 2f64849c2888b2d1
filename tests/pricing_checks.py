"""Helpers of the tests that check compiled pricing against the Python cost model, float for
float: an engine step whose CPU work shows, decode_seconds over many batches at once, and a
scenario fast-forwarded with every decode run compiled against stepping it."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pandas as pd
import pytest

import cbsim
from cbsim.cost.batch_stats import BatchStats
from cbsim.cost.compiled import decode_seconds
from cbsim.cost.roofline import CostModel
from cbsim.engine import decode_run


def with_serial_cpu(cost: CostModel) -> CostModel:
    """``cost`` with an engine step of 10 ms + 0.1 ms per request + 10 µs per token of CPU work
    after its kernels (not overlapped), set before anything is compiled from it: the shipped
    engines' steps are overlapped and never outweigh the kernels, so without it the share of a
    batch a step counts never shows."""
    cost._step_terms = (0.01, 1e-4, 1e-5, 0.0, 0.0, False)
    cost._overhead_zero = False
    return cost


@numba.njit
def decode_seconds_at(compiled: Any, requests: Any, kv_tokens: Any, out: Any) -> None:
    """``out[i] = decode_seconds(compiled, requests[i], kv_tokens[i])`` for every i."""
    for i in range(len(requests)):
        out[i] = decode_seconds(compiled, requests[i], kv_tokens[i])


def assert_fast_forward_compiled_equals_stepping(data: dict[str, Any]) -> None:
    """The scenario ``data`` fast-forwarded with every decode run planned compiled (the Python
    planner refused) gives the same request and iteration tables as stepped, and had decode
    iterations to plan."""
    with pytest.MonkeyPatch.context() as patch:

        def refused(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a decode run planned in Python")

        patch.setattr(decode_run, "plan_decode_run_python", refused)
        forward = cbsim.simulate(
            cbsim.load_scenario({**data, "fast_forward": True}), interpret_while_cold=False
        )
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    assert (forward.iterations["decode_tokens"] > 0).sum() > 100
    pd.testing.assert_frame_equal(forward.requests, stepped.requests, check_exact=True)
    pd.testing.assert_frame_equal(forward.iterations, stepped.iterations, check_exact=True)


def assert_decode_prices_as_in_python(
    cost: CostModel, compiled: Any, requests: Any, kv_tokens: Any
) -> None:
    """decode_seconds of each (requests, kv_tokens) by ``cost``'s compiled pricing is
    CostModel.decode_time's float, bit for bit."""
    got = np.empty(len(requests))
    decode_seconds_at(compiled, requests, kv_tokens, got)
    want = [
        cost.decode_time(n, kv) for n, kv in zip(requests.tolist(), kv_tokens.tolist(), strict=True)
    ]
    assert got.tolist() == want


def assert_only_stepped_iterations_price_in_python(cost: CostModel) -> None:
    """``cost`` prices a mixed batch (a prefill chunk beside decodes) in Python, while a plain
    decode step and the speculative kernels' decode/verify steps (``compiled``) compile."""
    stats = BatchStats.from_pairs([(1, 3000), (4, 900), (700, 0)])
    assert cost.time_stats(stats) == cost.python_time_stats(stats) > 0
    assert cost._stepped is None
    assert cost.compiled(10) is not None
    assert cost.compiled_decode(10) is not None


def layout_id(layout: dict[str, Any]) -> str:
    """A pytest id for a cost model's keyword arguments: their values joined by dashes."""
    return "-".join(str(v) for v in layout.values())
