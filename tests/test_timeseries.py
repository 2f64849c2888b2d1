"""The timeseries, summed a chunk of iterations at a time, is the one summed over whole columns
(the construction before chunking, kept here) bit for bit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

import cbsim
from cbsim.engine import recorder as metrics
from cbsim.engine.recorder import timeseries
from cbsim.outputs import timeseries_windows
from tests.conftest import small_scenario


def reference_window_overlap(
    start: np.ndarray, duration: np.ndarray, window_s: float, windows: int
) -> Callable[[np.ndarray], np.ndarray]:
    end = start + duration
    first = np.minimum((start // window_s).astype(np.int64), windows - 1)
    last = np.minimum((end // window_s).astype(np.int64), windows - 1)
    inside = first == last
    pieces: list[tuple[int, int, float]] = []
    for i in np.flatnonzero(~inside):
        for w in range(int(first[i]), int(last[i]) + 1):
            lo = max(float(start[i]), w * window_s)
            hi = min(float(end[i]), (w + 1) * window_s) if w < windows - 1 else float(end[i])
            if hi > lo:
                pieces.append((int(i), w, hi - lo))
    rows = np.array([p[0] for p in pieces], dtype=np.int64)
    cols = np.array([p[1] for p in pieces], dtype=np.int64)
    secs = np.array([p[2] for p in pieces], dtype=np.float64)

    def integrate(values: np.ndarray) -> np.ndarray:
        out = np.bincount(
            first[inside], weights=values[inside] * duration[inside], minlength=windows
        )
        if len(rows):
            out = out + np.bincount(cols, weights=values[rows] * secs, minlength=windows)
        return out[:windows]

    return integrate


def reference_timeseries(
    requests: pd.DataFrame, iterations: pd.DataFrame, window_s: float, replicas: int
) -> pd.DataFrame:
    ends = [0.0]
    if len(iterations):
        ends.append(float((iterations["start_s"] + iterations["duration_s"]).max()))
    if len(requests):
        ends.append(float(requests["arrival_s"].max()))
    windows = int(max(ends) // window_s) + 1
    span = np.full(windows, window_s)  # the last window ends with the run
    if max(ends) > (windows - 1) * window_s:
        span[-1] = min(window_s, max(ends) - (windows - 1) * window_s)

    def total(times: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        bins = np.minimum((times // window_s).astype(np.int64), windows - 1)
        return np.bincount(bins, weights=weights, minlength=windows)[:windows]

    start = iterations["start_s"].to_numpy(dtype=float)
    duration = iterations["duration_s"].to_numpy(dtype=float)
    batch = iterations["batch_size"].to_numpy(dtype=float)
    kv_frac = iterations["kv_blocks_used"].to_numpy(dtype=float) / np.maximum(
        iterations["kv_blocks_total"].to_numpy(dtype=float), 1.0
    )
    integral = reference_window_overlap(start, duration, window_s, windows)
    busy = integral(np.ones_like(start))
    finished = requests["finish_s"].to_numpy(dtype=float)
    finished = finished[~np.isnan(finished)]
    drafted = total(start, iterations["drafted_tokens"].to_numpy(dtype=float))
    accepted = total(start, iterations["accepted_tokens"].to_numpy(dtype=float))
    k_weight = integral(iterations["mean_k"].to_numpy(dtype=float))
    reused = prompted = np.zeros(windows)
    if "cached_tokens" in requests:
        admitted = (requests["server_arrival_s"] + requests["queue_s"]).to_numpy(dtype=float)
        seen = ~np.isnan(admitted)
        reused = total(admitted[seen], requests["cached_tokens"].to_numpy(dtype=float)[seen])
        prompted = total(admitted[seen], requests["prompt_tokens"].to_numpy(dtype=float)[seen])
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame(
            {
                "t_s": np.arange(windows) * window_s,
                "output_tokens_per_s": total(
                    start + duration, iterations["emitted_tokens"].to_numpy(dtype=float)
                )
                / span,
                "requests_completed": total(finished).astype(np.int64),
                "arrivals": total(requests["arrival_s"].to_numpy(dtype=float)).astype(np.int64),
                "waiting": integral(iterations["waiting"].to_numpy(dtype=float)) / span,
                "kv_utilization": integral(kv_frac) / (span * replicas),
                "batch_size": np.where(busy > 0, integral(batch) / busy, 0.0),
                "mean_k": np.where(busy > 0, k_weight / busy, 0.0),
                "acceptance_rate": np.where(drafted > 0, accepted / drafted, np.nan),
                "prefix_hit_rate": np.where(prompted > 0, reused / prompted, np.nan),
                "span_s": span,
                "replicas": np.full(windows, float(replicas)),  # a fixed fleet
            }
        )


@pytest.mark.parametrize(
    "overrides",
    [
        {"workload.num_requests": 200, "output.timeseries_window_s": 0.05},
        {"workload.num_requests": 150, "cluster.replicas": 2, "output.timeseries_window_s": 0.3},
        {
            "workload.num_requests": 40,
            "output.timeseries_window_s": 0.02,
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "draft_model", "model": "llama-3.2-1b"},
                "acceptance": {"kind": "per_request", "mean": 0.7},
            },
        },
    ],
)
def test_chunked_timeseries_is_the_reference_bit_for_bit(
    overrides: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeseries_windows, "CHUNK_ROWS", 64)  # many chunks
    results = cbsim.simulate(cbsim.load_scenario(small_scenario(overrides)))
    window = results.scenario.output.timeseries_window_s
    replicas = results.scenario.cluster.replicas
    expected = reference_timeseries(results.requests, results.iterations, window, replicas)
    actual = timeseries(results.requests, results.iterations, window, replicas)
    pd.testing.assert_frame_equal(actual, expected, check_exact=True)
    for name in expected.columns:
        assert actual[name].to_numpy().tobytes() == expected[name].to_numpy().tobytes(), name
    assert len(results.iterations) > 64 * 3


def test_empty_run_timeseries() -> None:
    requests = pd.DataFrame({"arrival_s": [], "finish_s": []}, dtype=float)
    iterations = pd.DataFrame(
        {name: np.zeros(0) for name in metrics.ITERATION_COLUMNS}
        | {"draft_s": np.zeros(0), "delivered_s": np.zeros(0)}
    )
    pd.testing.assert_frame_equal(
        timeseries(requests, iterations, 1.0, 1),
        reference_timeseries(requests, iterations, 1.0, 1),
        check_exact=True,
    )


def test_last_window_is_divided_by_the_time_it_covers() -> None:
    """A steady run cut mid-window: the last window's rate and time averages are over the part of
    the window the run covers, so a steady throughput does not drop at the end."""
    window, step, tokens = 1.0, 0.01, 8
    starts = np.arange(0.0, 2.5, step)  # 250 back-to-back steps: the run ends at 2.5 s
    n = len(starts)
    iterations = pd.DataFrame(
        {name: np.zeros(n) for name in metrics.ITERATION_COLUMNS}
        | {
            "start_s": starts,
            "duration_s": np.full(n, step),
            "emitted_tokens": np.full(n, tokens),
            "waiting": np.full(n, 3.0),
            "kv_blocks_used": np.full(n, 50),
            "kv_blocks_total": np.full(n, 100),
            "batch_size": np.full(n, tokens),
        }
    )
    requests = pd.DataFrame({"arrival_s": [0.0], "finish_s": [2.5]})
    frame = timeseries(requests, iterations, window, 1)
    assert frame["t_s"].tolist() == [0.0, 1.0, 2.0]
    np.testing.assert_allclose(frame["span_s"], [1.0, 1.0, 0.5])
    np.testing.assert_allclose(frame["output_tokens_per_s"], tokens / step, rtol=0.03)
    np.testing.assert_allclose(frame["waiting"], 3.0)
    np.testing.assert_allclose(frame["kv_utilization"], 0.5)


def test_window_sums_refuse_a_run_past_the_window_limit_before_allocating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An iteration ending past the windows the limit allows is an error as it is added, before
    the sums grow to it (a 1 ms window reached 11.5 GiB before the error at the end)."""
    windows = timeseries_windows.WINDOWS
    monkeypatch.setattr(
        timeseries_windows, "WINDOWS", windows.__class__("windows", 1, 1000, "windows", "test")
    )
    sums = timeseries_windows.WindowSums(1.0)
    row = {name: np.ones(1) for name in timeseries_windows._WINDOW_COLUMNS}
    sums.add({**row, "start_s": np.array([10.0])})
    with pytest.raises(cbsim.CbsimError, match="windows") as caught:
        sums.add({**row, "start_s": np.array([5000.0])})
    assert caught.value.field == "output.timeseries_window_s"
    assert max(len(v) for v in sums.sums.values()) <= 1000
