"""A compiled kernel called through :class:`cbsim.cost.kernel_call.KernelCall` gives what numba's
dispatcher gives, and skips the dispatcher after its first call."""

from __future__ import annotations

import numba
import numpy as np

from cbsim.cost.kernel_call import KernelCall


@numba.njit(cache=False)
def _scaled_sum(values: np.ndarray, factor: float) -> float:
    total = 0.0
    for v in values:
        total += v * factor
    return total


def test_kernel_call_returns_what_the_dispatcher_returns() -> None:
    call = KernelCall(_scaled_sum)
    rng = np.random.default_rng(0)
    for _ in range(5):
        values = rng.random(17)
        assert call(values, 1.5) == _scaled_sum(values, 1.5)


def test_kernel_call_keeps_the_entry_point_after_the_first_call() -> None:
    call = KernelCall(_scaled_sum)
    assert call._entry is None
    call(np.ones(3), 2.0)
    entry = call._entry
    assert entry is not None and entry is not _scaled_sum
    assert call(np.arange(4.0), 0.5) == 3.0
    assert call._entry is entry
