"""A run's tables as columns (cbsim.common.columns): the frames are made of them, every summary
reads them as it reads the frames, and a capacity search never imports pandas."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.common.columns import Coded, ColumnTable, equals, frame_of
from cbsim.cost import profile_cache
from cbsim.outputs.metric_columns import PERCENTILES
from cbsim.outputs.stability import with_stability
from cbsim.outputs.summary import _percentiles, rejection_counts, summarize
from cbsim.outputs.timeseries_windows import timeseries, timeseries_columns
from cbsim.run.loading import load_scenario
from cbsim.run.results import Results
from cbsim.run.simulate import simulate, simulate_tables
from cbsim.studies.capacity.checks import _check_run
from cbsim.studies.capacity.diagnosis import diagnose
from cbsim.workload import traces
from cbsim.workload.request_table import STATUS_NAMES, status_dtype
from tests.conftest import small_scenario

ROOT = Path(__file__).resolve().parents[1]

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "speculative": {"speculative": {"enabled": True, "proposer": {"kind": "eagle"}}},
    "rejections": {"cluster.max_model_len": 600, "workload.prompt_tokens": {"kind": "uniform", "low": 64, "high": 900}},
    "timeouts": {"workload.client": {"timeout_s": 0.05}, "workload.arrival": {"kind": "poisson", "rate": 400}},
    "trace": {"workload": {"trace": {"path": "azure-conv-2023"}, "duration_s": 20}},
    "prefix": {"workload": {"trace": {"path": "mooncake-conversation"}, "duration_s": 20}, "cluster.prefix_caching": True},
    "disaggregated": {
        "cluster": {
            "model": "llama-3-8b",
            "gpu": "h100-sxm",
            "disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        }
    },
}  # fmt: skip


def _scenario(variant: str) -> Any:
    return load_scenario(small_scenario(VARIANTS[variant]))


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (summaries hold NaN for undefined figures)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def run(request: pytest.FixtureRequest) -> tuple[Any, Results]:
    variant = request.param
    return simulate_tables(_scenario(variant)), simulate(_scenario(variant))


def test_the_frames_are_made_of_the_columns(run: tuple[Any, Results]) -> None:
    tables, results = run
    pd.testing.assert_frame_equal(tables.requests.frame(), results.requests)
    pd.testing.assert_frame_equal(tables.iterations.frame(), results.iterations)
    pd.testing.assert_frame_equal(tables.timeseries.frame(), results.timeseries)
    assert results.requests["status"].dtype == status_dtype()
    assert _same(tables.summary, results.summary)


def test_every_summary_reads_columns_as_it_reads_frames(run: tuple[Any, Results]) -> None:
    tables, results = run
    scenario = results.scenario
    kinds = (tables, results)
    summaries = [summarize(r.requests, r.iterations, scenario, 3, warnings=("w",)) for r in kinds]
    assert _same(*summaries)
    stable = [
        with_stability({"throughput_rps": 1.5}, r.requests, r.timeseries, scenario) for r in kinds
    ]
    assert _same(*stable)
    window = scenario.output.timeseries_window_s
    series = [timeseries_columns(r.requests, r.iterations, window, 1).frame() for r in kinds]
    pd.testing.assert_frame_equal(series[0], series[1])
    pd.testing.assert_frame_equal(
        series[1], timeseries(results.requests, results.iterations, window, 1)
    )
    assert rejection_counts(tables.requests) == rejection_counts(results.requests)
    assert diagnose(tables.requests) == diagnose(results.requests)
    slo = {"ttft_p99_s": 0.01, "tpot_p99_s": 1.0}
    assert _same(_check_run(tables, 10.0, slo), _check_run(results, 10.0, slo))


REACHES: dict[str, Any] = {
    "plain": lambda s: s["completed"] == s["requests"] == 40,
    "speculative": lambda s: 0 < s["acceptance_rate"] < 1,
    "rejections": lambda s: s["rejected"] == s.get("rejected_context_length", 0) > 0,
    "timeouts": lambda s: s["timed_out"] > 0,
    "trace": lambda s: (
        s["requests"] == (traces.trace_table("azure-conv-2023")["arrival_s"] <= 20).sum()
    ),
    "prefix": lambda s: s["prefix_hit_rate"] > 0,
    "disaggregated": lambda s: s["kv_transfer_p50_s"] > 0,
}


def test_the_variants_reach_what_they_are_for(run: tuple[Any, Results]) -> None:
    """Each variant exercises its part of the summaries (rejections, timeouts, transfers...)."""
    results = run[1]
    variant = next(name for name in VARIANTS if results.scenario == _scenario(name))
    assert REACHES[variant](results.summary), (variant, results.summary)


def test_a_coded_column_reads_as_its_names() -> None:
    codes = np.array([0, 2, 1, 2], dtype=np.int8)
    column = Coded(
        codes, STATUS_NAMES, lambda c: pd.Categorical.from_codes(c.codes, dtype=status_dtype())
    )
    table = ColumnTable({"status": column, "x": np.arange(4.0)}, 4)
    assert list(table["status"]) == [STATUS_NAMES[c] for c in codes]
    assert equals(table, "status", STATUS_NAMES[2]).tolist() == [False, True, False, True]
    assert not equals(table, "status", "no such status").any()
    frame = frame_of(table)
    assert frame["status"].dtype == status_dtype()
    assert (
        equals(frame, "status", STATUS_NAMES[2]) == equals(table, "status", STATUS_NAMES[2])
    ).all()
    assert len(table) == 4 and "x" in table and "y" not in table and not table.empty
    assert ColumnTable.of_frame(frame)["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(profile_cache.CACHE_ENV, str(tmp_path / "cache"))
    traces._shipped_table.cache_clear()
    yield tmp_path / "cache" / profile_cache.SUBFOLDER
    traces._shipped_table.cache_clear()


@pytest.mark.parametrize("name", traces.TRACE_NAMES)
def test_a_shipped_trace_from_the_cache_is_the_trace_parsed(cache: Path, name: str) -> None:
    parsed = traces.load_trace(name)  # parsed and kept
    assert len(list(cache.glob("*.marshal"))) == 1
    traces._shipped_table.cache_clear()
    kept = traces.trace_table(name)  # read back from the cache
    pd.testing.assert_frame_equal(kept.frame(), parsed)
    assert kept.attrs == parsed.attrs
    assert not kept["arrival_s"].flags.writeable  # shared: nobody may change it
    again = traces.load_trace(name)
    again.loc[0, "prompt_tokens"] = 1  # the caller's own copy
    assert kept["prompt_tokens"][0] == parsed.loc[0, "prompt_tokens"] != 1


def test_a_corrupt_trace_entry_is_parsed_again(cache: Path) -> None:
    expected = traces.load_trace("azure-code-2023")
    (entry,) = cache.glob("*.marshal")
    entry.write_bytes(b"\x00not marshal")
    traces._shipped_table.cache_clear()
    pd.testing.assert_frame_equal(traces.load_trace("azure-code-2023"), expected)


def test_no_cache_parses_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profile_cache.CACHE_ENV, "")
    traces._shipped_table.cache_clear()
    try:
        assert len(traces.trace_table("azure-code-2023")) == 8819
    finally:
        traces._shipped_table.cache_clear()


PARSE = """
import sys
from cbsim.workload.traces import trace_table
trace_table("azure-conv-2023")
print("pandas" in sys.modules)
"""
SEARCH = """
import sys
from cbsim.studies.capacity import find_max_rate
result = find_max_rate(
    {"name": "s", "seed": 1, "workload": {"trace": {"path": "azure-conv-2023"}},
     "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"}},
    {"ttft_p99_s": 2.0}, window_s=20.0, min_requests=40,
)
print(result.feasible, "pandas" in sys.modules, "pyarrow" in sys.modules)
"""


def test_a_capacity_search_never_imports_pandas(tmp_path: Path) -> None:
    """Its runs are summarised from columns and the shipped trace comes from the cache (the
    first process parses it, with pandas; the next one, a search, imports neither pandas nor
    pyarrow)."""
    env = {**os.environ, profile_cache.CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    answers = []
    for code in (PARSE, SEARCH):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        answers.append(done.stdout.split())
    assert answers[0] == ["True"]  # parsed the trace
    assert answers[1] == ["True", "False", "False"]  # feasible, without pandas or pyarrow


def test_nan_is_the_same_as_nan() -> None:
    assert _same({"a": math.nan}, {"a": math.nan}) and not _same({"a": 1.0}, {"a": math.nan})


@given(
    st.lists(
        st.one_of(
            st.floats(min_value=0.0, max_value=1e4, allow_nan=False),
            st.just(math.nan),
            st.sampled_from([0.0, 0.5, 1.0]),
        ),
        max_size=60,
    )
)
@settings(max_examples=200, deadline=None)
def test_a_summary_percentile_is_numpys_for_that_percentile_alone(values: list[float]) -> None:
    """The summary takes every percentile of a column in one call (one partition); each is the
    float numpy gives for that percentile asked alone, NaNs left out, NaN for an empty column."""
    column = np.array(values, dtype=float)
    out: dict[str, float] = {}
    _percentiles(column, "x", out)
    kept = column[~np.isnan(column)]
    for p in PERCENTILES:
        got = out[f"x_p{p}_s"]
        if len(kept):
            assert got == float(np.percentile(kept, p))
        else:
            assert math.isnan(got)
