"""Token lengths: how many tokens a request reads or writes, drawn from a length distribution.

A workload's ``prompt_tokens`` and ``output_tokens`` (and a session's or a prompt pool's parts)
are distributions — fixed, uniform, lognormal, or the empirical lengths of a trace — from which
each request draws its own, always at least one token, from a named random stream.
"""

from __future__ import annotations

import math

import numpy as np

from cbsim.schema.workload import (
    EmpiricalLength,
    FixedLength,
    Length,
    LognormalLength,
    UniformLength,
)
from cbsim.workload.traces import trace_table


def sample_lengths(
    spec: Length, n: int, rng: np.random.Generator, *, field: str, source: str | None
) -> np.ndarray:
    """``n`` token lengths from a length distribution (always ≥ 1)."""
    if isinstance(spec, FixedLength):
        return np.full(n, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLength):
        return rng.integers(spec.low, spec.high + 1, n, dtype=np.int64)
    if isinstance(spec, LognormalLength):
        mu = math.log(spec.mean) - spec.sigma**2 / 2.0
        values = np.rint(rng.lognormal(mu, spec.sigma, n)).astype(np.int64)
        return np.clip(values, spec.min, spec.max if spec.max is not None else None)
    assert isinstance(spec, EmpiricalLength)
    trace = trace_table(spec.trace, source=source, field=f"{field}.trace")
    column = "prompt_tokens" if field.endswith("prompt_tokens") else "output_tokens"
    rows = rng.integers(0, len(trace), n)
    return np.asarray(trace[column], np.int64)[rows]
