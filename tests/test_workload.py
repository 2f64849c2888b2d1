"""Tests for cbsim.workload.build: arrival processes, length distributions, traces, random streams."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbsim.common.errors import CbsimError
from cbsim.common.rng import stream
from cbsim.run.loading import GammaArrival, LognormalLength, PoissonArrival, load_scenario
from cbsim.workload.arrivals import synthetic_arrivals
from cbsim.workload.build import build_workload
from cbsim.workload.lengths import sample_lengths
from cbsim.workload.traces import load_trace
from tests.conftest import small_scenario

AZURE_CONV_ROWS = 19_366


def build(data: dict):
    return build_workload(load_scenario(data))


def trace_workload(**trace) -> dict:
    return {"seed": 1, "workload": {"trace": {"path": "azure-conv-2023", **trace}}}


# --------------------------------------------------------------------------- arrivals


@pytest.mark.parametrize("rate", [0.5, 4.0, 60.0])
def test_poisson_mean_gap_is_one_over_rate(rate: float):
    n = 40_000
    times = synthetic_arrivals(PoissonArrival(rate=rate), n, None, stream(11, "arrivals"))
    assert len(times) == n
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert np.all(gaps >= 0)
    # standard error of the mean gap is (1/rate)/sqrt(n) = 0.5 %: allow 3 %
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 3.0])
def test_gamma_gaps_have_the_requested_cv_and_rate(cv: float):
    n = 100_000
    times = synthetic_arrivals(GammaArrival(kind="gamma", rate=2.0, cv=cv), n, None, stream(5, "a"))
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_arrivals_sorted_and_start_after_zero():
    specs = build(small_scenario(workload__num_requests=500))
    assert len(specs) == 500
    assert specs.arrival_s[0] > 0.0
    assert np.all(np.diff(specs.arrival_s) >= 0)


@pytest.mark.parametrize("kind", ["poisson", "gamma"])
def test_duration_cut(kind: str):
    arrival = {"kind": kind, "rate": 5.0} | ({"cv": 2.0} if kind == "gamma" else {})
    data = small_scenario(workload__arrival=arrival, workload__duration_s=200.0)
    del data["workload"]["num_requests"]
    specs = build(data)
    assert np.all(specs.arrival_s <= 200.0)
    assert specs.arrival_s[-1] > 190.0
    # about rate * duration = 1000 requests (sd ~32 for Poisson, ~63 for cv 2)
    assert abs(len(specs) - 1000) < 250
    assert len(specs.prompt_tokens) == len(specs.output_tokens) == len(specs)


def test_count_and_duration_together_cut_at_both():
    few = build(small_scenario(workload__num_requests=30, workload__duration_s=1000.0))
    assert len(few) == 30
    short = build(small_scenario(workload__num_requests=1000, workload__duration_s=10.0))
    assert 10 < len(short) < 100
    assert np.all(short.arrival_s <= 10.0)


# --------------------------------------------------------------------------- lengths


def test_fixed_length():
    specs = build(small_scenario(workload__output_tokens={"kind": "fixed", "value": 77}))
    assert np.all(specs.output_tokens == 77)
    assert specs.output_tokens.dtype == np.int64


def test_uniform_bounds_are_inclusive():
    spec = {"kind": "uniform", "low": 3, "high": 9}
    specs = build(small_scenario(workload__num_requests=2000, workload__prompt_tokens=spec))
    assert specs.prompt_tokens.min() == 3
    assert specs.prompt_tokens.max() == 9
    assert set(np.unique(specs.prompt_tokens)) == set(range(3, 10))
    assert specs.prompt_tokens.mean() == pytest.approx(6.0, rel=0.05)


@pytest.mark.parametrize(("mean", "sigma"), [(1000.0, 0.8), (200.0, 0.3), (50.0, 1.2)])
def test_lognormal_mean_is_the_arithmetic_mean(mean: float, sigma: float):
    spec = LognormalLength(kind="lognormal", mean=mean, sigma=sigma)
    values = sample_lengths(spec, 100_000, stream(2, "x"), field="f", source=None)
    assert values.min() >= 1
    # standard error of the mean: mean*sqrt(exp(sigma^2)-1)/sqrt(n) < 0.6 %
    assert values.mean() == pytest.approx(mean, rel=0.03)
    logs = np.log(values[values > 5])
    if mean >= 200:
        assert logs.std() == pytest.approx(sigma, rel=0.05)


def test_lognormal_is_clipped_to_min_and_max():
    spec = LognormalLength(kind="lognormal", mean=1000.0, sigma=1.0, min=200, max=1500)
    values = sample_lengths(spec, 20_000, stream(2, "y"), field="f", source=None)
    assert values.min() == 200
    assert values.max() == 1500
    assert np.mean(values == 1500) > 0.05  # the clipped tail piles up at max
    assert np.mean(values == 200) > 0.05


def test_empirical_prompt_and_output_come_from_the_same_rows():
    trace = load_trace("azure-conv-2023")
    spec = {"kind": "empirical", "trace": "azure-conv-2023"}
    specs = build(
        small_scenario(
            workload__num_requests=300, workload__prompt_tokens=spec, workload__output_tokens=spec
        )
    )
    pairs = set(zip(trace["prompt_tokens"].tolist(), trace["output_tokens"].tolist(), strict=True))
    drawn = list(zip(specs.prompt_tokens.tolist(), specs.output_tokens.tolist(), strict=True))
    assert all(pair in pairs for pair in drawn)
    # values vary (resampled rows, not one row repeated)
    assert len(set(drawn)) > 100


def test_empirical_lengths_follow_the_trace_distribution():
    trace = load_trace("azure-conv-2023")
    spec = {"kind": "empirical", "trace": "azure-conv-2023"}
    specs = build(small_scenario(workload__num_requests=20_000, workload__prompt_tokens=spec))
    assert specs.prompt_tokens.mean() == pytest.approx(trace["prompt_tokens"].mean(), rel=0.05)
    assert set(np.unique(specs.prompt_tokens)) <= set(trace["prompt_tokens"].unique())


def test_empirical_unknown_trace_names_the_field():
    spec = {"kind": "empirical", "trace": "no-such-trace"}
    with pytest.raises(CbsimError) as info:
        build(small_scenario(workload__output_tokens=spec))
    assert info.value.field == "workload.output_tokens.trace"


# --------------------------------------------------------------------------- trace replay


def test_trace_replay_keeps_every_request():
    trace = load_trace("azure-conv-2023")
    specs = build(trace_workload())
    assert len(specs) == AZURE_CONV_ROWS
    np.testing.assert_array_equal(specs.arrival_s, trace["arrival_s"].to_numpy())
    np.testing.assert_array_equal(specs.prompt_tokens, trace["prompt_tokens"].to_numpy())
    np.testing.assert_array_equal(specs.output_tokens, trace["output_tokens"].to_numpy())


def test_time_scale_half_halves_the_arrivals():
    full = build(trace_workload())
    fast = build(trace_workload(time_scale=0.5))
    assert len(fast) == AZURE_CONV_ROWS
    assert fast.arrival_s[-1] == pytest.approx(full.arrival_s[-1] / 2, rel=1e-12)
    np.testing.assert_allclose(fast.arrival_s, full.arrival_s * 0.5, rtol=1e-12)
    np.testing.assert_array_equal(fast.prompt_tokens, full.prompt_tokens)


def test_rate_scale_two_equals_time_scale_half():
    by_rate = build(trace_workload(rate_scale=2.0))
    by_time = build(trace_workload(time_scale=0.5))
    np.testing.assert_array_equal(by_rate.arrival_s, by_time.arrival_s)
    np.testing.assert_array_equal(by_rate.output_tokens, by_time.output_tokens)


def test_trace_duration_cut():
    full = build(trace_workload())
    data = trace_workload()
    data["workload"]["duration_s"] = 300.0
    cut = build(data)
    expected = int(np.sum(full.arrival_s <= 300.0))
    assert len(cut) == expected
    assert 0 < expected < AZURE_CONV_ROWS
    np.testing.assert_array_equal(cut.arrival_s, full.arrival_s[:expected])
    np.testing.assert_array_equal(cut.prompt_tokens, full.prompt_tokens[:expected])


def test_trace_duration_cut_applies_to_scaled_time():
    data = trace_workload(time_scale=0.5)
    data["workload"]["duration_s"] = 300.0
    cut = build(data)
    full = build(trace_workload())
    assert len(cut) == int(np.sum(full.arrival_s <= 600.0))


def test_trace_num_requests_cut():
    full = build(trace_workload())
    data = trace_workload()
    data["workload"]["num_requests"] = 123
    cut = build(data)
    assert len(cut) == 123
    np.testing.assert_array_equal(cut.arrival_s, full.arrival_s[:123])
    np.testing.assert_array_equal(cut.output_tokens, full.output_tokens[:123])


def test_trace_start_offset():
    full = build(trace_workload())
    shifted = build(trace_workload(start_s=100.0))
    keep = full.arrival_s >= 100.0
    assert len(shifted) == int(keep.sum())
    np.testing.assert_allclose(shifted.arrival_s, full.arrival_s[keep] - 100.0)
    np.testing.assert_array_equal(shifted.prompt_tokens, full.prompt_tokens[keep])


def test_trace_start_beyond_the_end_is_an_error():
    with pytest.raises(CbsimError) as info:
        build(trace_workload(start_s=1e7))
    assert info.value.field == "workload.trace"


def test_trace_with_synthetic_arrivals_keeps_trace_lengths():
    trace = load_trace("azure-conv-2023")
    data = trace_workload()
    data["workload"] |= {"arrival": {"kind": "poisson", "rate": 3.0}, "num_requests": 50}
    specs = build(data)
    assert len(specs) == 50
    np.testing.assert_array_equal(specs.prompt_tokens, trace["prompt_tokens"].to_numpy()[:50])
    assert specs.arrival_s[-1] == pytest.approx(50 / 3.0, rel=0.5)


def test_trace_lengths_can_be_overridden():
    data = trace_workload()
    data["workload"] |= {"num_requests": 40, "output_tokens": {"kind": "fixed", "value": 5}}
    specs = build(data)
    assert np.all(specs.output_tokens == 5)
    assert len(specs) == 40


# --------------------------------------------------------------------------- random streams


def test_same_seed_identical_arrays():
    data = small_scenario(
        workload__arrival={"kind": "gamma", "rate": 3.0, "cv": 2.0},
        workload__prompt_tokens={"kind": "lognormal", "mean": 300, "sigma": 1.0},
    )
    a, b = build(data), build(data)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)


def test_different_seed_different_arrays():
    a = build(small_scenario(seed=1))
    b = build(small_scenario(seed=2))
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.prompt_tokens, b.prompt_tokens)


def test_streams_are_independent():
    base = build(small_scenario())
    other_output = build(
        small_scenario(workload__output_tokens={"kind": "lognormal", "mean": 90, "sigma": 0.5})
    )
    np.testing.assert_array_equal(base.arrival_s, other_output.arrival_s)
    np.testing.assert_array_equal(base.prompt_tokens, other_output.prompt_tokens)
    assert not np.array_equal(base.output_tokens, other_output.output_tokens)
    other_prompt = build(small_scenario(workload__prompt_tokens={"kind": "fixed", "value": 10}))
    np.testing.assert_array_equal(base.arrival_s, other_prompt.arrival_s)
    np.testing.assert_array_equal(base.output_tokens, other_prompt.output_tokens)
    other_rate = build(small_scenario(workload__arrival={"kind": "poisson", "rate": 9.0}))
    np.testing.assert_array_equal(base.prompt_tokens, other_rate.prompt_tokens)
    np.testing.assert_array_equal(base.output_tokens, other_rate.output_tokens)


def test_prompt_and_output_streams_differ_for_the_same_distribution():
    spec = {"kind": "uniform", "low": 1, "high": 1000}
    specs = build(small_scenario(workload__prompt_tokens=spec, workload__output_tokens=spec))
    assert not np.array_equal(specs.prompt_tokens, specs.output_tokens)


def test_more_requests_extend_the_same_arrival_sequence():
    short = build(small_scenario(workload__num_requests=20))
    long = build(small_scenario(workload__num_requests=60))
    np.testing.assert_allclose(long.arrival_s[:20], short.arrival_s, rtol=1e-12)


def test_rate_scales_arrivals_exactly_for_poisson():
    slow = build(small_scenario(workload__arrival={"kind": "poisson", "rate": 2.0}))
    fast = build(small_scenario(workload__arrival={"kind": "poisson", "rate": 4.0}))
    np.testing.assert_allclose(fast.arrival_s, slow.arrival_s / 2.0, rtol=1e-9)
    assert math.isfinite(fast.arrival_s[-1])
