"""Rate-curve arrivals (``workload.arrival.kind: rate_curve``): a non-homogeneous Poisson process
whose rate is piecewise linear between (t_s, rate) points — a day of traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.common.rng import stream
from cbsim.run.results import Results
from cbsim.workload.arrivals import RateCurve, rate_curve_arrivals
from cbsim.workload.build import build_workload, read_workload
from cbsim.workload.drawn import RequestSpecs
from cbsim.workload.size_checks import expected_span_s
from tests.conftest import small_scenario

DIURNAL = [[0, 2.0], [100, 12.0], [200, 2.0], [300, 0.0], [400, 6.0]]


def curved(points: Any = None, **workload: Any) -> dict[str, Any]:
    """A small scenario whose arrivals follow a rate curve (no request count unless given)."""
    arrival = {"kind": "rate_curve", "points": points if points is not None else DIURNAL}
    data = small_scenario({"workload.arrival": arrival})
    del data["workload"]["num_requests"]
    data["workload"].update(workload)
    return data


def arrivals_of(data: dict[str, Any]) -> np.ndarray:
    specs = build_workload(cbsim.load_scenario(data))
    assert isinstance(specs, RequestSpecs)
    return specs.arrival_s


def test_counts_per_window_match_the_integrated_rate() -> None:
    """Counts in 40 windows of 10 s are independent Poisson with mean the rate's integral over
    the window (1,800 expected in all). With a fixed seed (7: 1,711 drawn, chi-square 42.5 on 40
    degrees of freedom) the statistic must stay below chi2(40)'s 99.9% quantile (73.4) — all of
    200 seeds tried pass, their mean 39.7 as a correct draw gives — while a wrong shape fails
    it by far (the points read as steps: 1,872); the total must lie within 4 standard deviations
    of the integral (+-170), which a rate 10% off misses."""
    curve = RateCurve.of(np.array([p[0] for p in DIURNAL]), np.array([p[1] for p in DIURNAL]))
    assert curve.expected == pytest.approx(100 * 7 + 100 * 7 + 100 * 1 + 100 * 3)
    edges = np.linspace(0, 400, 41)
    expected = np.diff(curve.integral(edges))
    times = rate_curve_arrivals(curve, None, stream(7, "arrivals"))
    counts, _ = np.histogram(times, edges)
    assert counts.sum() == len(times)
    assert abs(len(times) - curve.expected) < 4 * np.sqrt(curve.expected)
    positive = expected > 0
    chi2 = float(np.sum((counts[positive] - expected[positive]) ** 2 / expected[positive]))
    assert chi2 < stats.chi2.ppf(0.999, positive.sum())
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] <= 400


def test_a_constant_curve_is_a_poisson_process() -> None:
    """A flat curve at 5 req/s: exponential gaps of mean 0.2 s (Kolmogorov-Smirnov at 1%),
    coefficient of variation 1 and a count within 4 standard deviations of 5 x 2,000."""
    times = arrivals_of(curved([[0, 5.0], [2000, 5.0]]))
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert abs(len(times) - 10_000) < 4 * 100
    assert stats.kstest(gaps, "expon", args=(0, 0.2)).pvalue > 0.01
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_before_the_first_point_the_first_rate_and_arrivals_end_at_the_last() -> None:
    times = arrivals_of(curved([[100, 4.0], [200, 4.0]]))
    assert times[-1] <= 200
    assert abs(np.sum(times < 100) - 400) < 4 * 20  # 4 req/s from time 0
    assert (
        expected_span_s(read_workload(cbsim.load_scenario(curved([[100, 4.0], [200, 4.0]])))) == 200
    )


def test_duration_and_count_cut_the_curve_and_extend_the_same_draws() -> None:
    whole = arrivals_of(curved())
    cut = arrivals_of(curved(duration_s=150))
    counted = arrivals_of(curved(num_requests=100))
    assert cut[-1] <= 150 and len(cut) < len(whole)
    np.testing.assert_array_equal(cut, whole[: len(cut)])
    np.testing.assert_array_equal(counted, whole[:100])
    span = expected_span_s(read_workload(cbsim.load_scenario(curved(num_requests=100))))
    assert span is not None and span == pytest.approx(whole[99], rel=0.3)


def test_the_same_seed_draws_the_same_arrivals() -> None:
    np.testing.assert_array_equal(arrivals_of(curved()), arrivals_of(curved()))
    other = curved()
    other["seed"] = 4
    assert not np.array_equal(arrivals_of(curved())[:50], arrivals_of(other)[:50])


def test_fast_forward_is_identical_to_stepping() -> None:
    data = curved([[0, 1.0], [10, 8.0], [20, 1.0]])
    results = []
    for ff in (True, False):
        results.append(cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": ff})))
    pd.testing.assert_frame_equal(results[0].requests, results[1].requests)
    assert len(results[0].requests) > 50


def test_a_written_scenario_reads_back(tmp_path: Path) -> None:
    csv = tmp_path / "day.csv"
    csv.write_text("t_s,rate\n0,1\n10,6\n20,1\n")
    for arrival in (
        {"kind": "rate_curve", "points": [[0, 1], [10, 6], [20, 1]]},
        {"kind": "rate_curve", "csv": str(csv)},
    ):
        data = curved()
        data["workload"]["arrival"] = arrival
        results = cbsim.simulate(cbsim.load_scenario(data))
        back = Results.read(results.write(tmp_path / arrival.get("csv", "points")[-6:]))
        assert back.scenario == results.scenario
        assert cbsim.load_scenario(back.scenario.model_dump(mode="json")) == results.scenario


def test_csv_points_equal_yaml_points_and_resolve_relative_to_the_scenario(
    tmp_path: Path,
) -> None:
    (tmp_path / "day.csv").write_text("t_s,rate\n0,1\n10,6\n20,1\n")
    data = curved([[0, 1], [10, 6], [20, 1]])
    from_points = arrivals_of(data)
    data["workload"]["arrival"] = {"kind": "rate_curve", "csv": "day.csv"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    specs = build_workload(cbsim.load_scenario(path))
    assert isinstance(specs, RequestSpecs)
    np.testing.assert_array_equal(specs.arrival_s, from_points)


@pytest.mark.parametrize(
    ("points", "field", "words"),
    [
        ([[0, 1], [10, 2], [5, 1]], "workload.arrival.points", "points[2]"),
        ([[0, 1]], "workload.arrival.points", "at least 2"),
        ([[0, 0], [10, 0]], "workload.arrival.points", "every rate"),
        ([[0, -1], [10, 2]], "workload.arrival.points", "points[0]"),
        ([[0, 1], [1e9, 2]], "workload.arrival.points", "points[1]"),
        ([[0, 1], [10, 2e6]], "workload.arrival.points", "points[1]"),
        ([[0, 1], [10]], "workload.arrival.points[1]", "pair"),
        ([[0, 1], [10, True]], "workload.arrival.points[1]", "numbers"),
    ],
)
def test_bad_points_name_the_field(points: Any, field: str, words: str) -> None:
    with pytest.raises(CbsimError) as err:
        cbsim.load_scenario(curved(points))
    assert err.value.field == field
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("t_s,rate\n0,1\n10,2\n5,1\n", "row 4"),
        ("t,rate\n0,1\n10,2\n", "t_s"),
        ("t_s,rate\n0,x\n10,2\n", "numbers"),
        ("t_s,rate\n0,1\n", "at least 2"),
    ],
)
def test_bad_csv_names_the_file_and_row(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "curve.csv"
    path.write_text(text)
    data = curved()
    data["workload"]["arrival"] = {"kind": "rate_curve", "csv": str(path)}
    with pytest.raises(CbsimError) as err:
        build_workload(cbsim.load_scenario(data))
    assert err.value.field == "workload.arrival.csv"
    assert "curve.csv" in str(err.value) and words in str(err.value)


def test_points_or_csv_exactly_one_and_too_many_requests_refused() -> None:
    data = curved()
    data["workload"]["arrival"]["csv"] = "x.csv"
    with pytest.raises(CbsimError, match="one"):
        cbsim.load_scenario(data)
    with pytest.raises(CbsimError) as err:
        build_workload(cbsim.load_scenario(curved([[0, 1e5], [1e5, 1e5]])))
    assert err.value.field == "workload.arrival.points"
