"""A run's tables written to parquet without pandas (cbsim.outputs.parquet_tables): the same files,
byte for byte, as pandas writes of their frames, for every kind of run and for drawn tables; a
result folder written before anyone reads a frame; ``cbsim run`` without pandas."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.common.columns import Coded, ColumnTable
from cbsim.cost import profile_cache
from cbsim.outputs import parquet_tables
from cbsim.outputs.iteration_stream import _arrow_table as _stream_table
from cbsim.outputs.parquet_tables import arrow_table, write_parquet
from cbsim.run.loading import load_scenario
from cbsim.run.results import Results
from cbsim.run.simulate import compare_no_spec, simulate, simulate_tables
from cbsim.workload.request_table import STATUS_NAMES, _reason_column, _status_column
from tests.test_columns import VARIANTS, _scenario

ROOT = Path(__file__).resolve().parents[1]


def _pandas_file(table: ColumnTable, path: Path) -> bytes:
    table.frame().to_parquet(path, index=False)
    return path.read_bytes()


def _cbsim_file(table: ColumnTable, path: Path) -> bytes:
    write_parquet(table, path)
    return path.read_bytes()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own cache folder: a schema is made with pandas, then read from the cache."""
    monkeypatch.setenv(profile_cache.CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tables(request: pytest.FixtureRequest) -> Any:
    return simulate_tables(_scenario(request.param))


@pytest.mark.parametrize("name", ["requests", "iterations", "timeseries"])
def test_a_run_table_is_the_file_pandas_writes(tables: Any, name: str, tmp_path: Path) -> None:
    table = getattr(tables, name)
    expected = _pandas_file(table, tmp_path / "pandas.parquet")
    assert _cbsim_file(table, tmp_path / "first.parquet") == expected  # schema made with pandas
    assert _cbsim_file(table, tmp_path / "cached.parquet") == expected  # schema from the cache


def test_a_table_without_rows_is_the_file_pandas_writes(tables: Any, tmp_path: Path) -> None:
    for name in ("requests", "iterations", "timeseries"):
        table = parquet_tables._no_rows(getattr(tables, name))
        assert _cbsim_file(table, tmp_path / "a.parquet") == _pandas_file(
            table, tmp_path / "b.parquet"
        )


def test_the_schema_cache_off_or_corrupt_still_writes_the_same(
    tables: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _pandas_file(tables.requests, tmp_path / "pandas.parquet")
    monkeypatch.setenv(profile_cache.CACHE_ENV, "")
    assert _cbsim_file(tables.requests, tmp_path / "off.parquet") == expected
    monkeypatch.setenv(profile_cache.CACHE_ENV, str(tmp_path / "corrupt"))
    _cbsim_file(tables.requests, tmp_path / "made.parquet")
    for entry in (tmp_path / "corrupt" / profile_cache.SUBFOLDER).iterdir():
        entry.write_bytes(b"\x00not marshal")
    assert _cbsim_file(tables.requests, tmp_path / "corrupt.parquet") == expected


def test_results_write_their_tables_before_any_frame_is_read(tmp_path: Path) -> None:
    results = simulate(_scenario("rejections"))
    results.write(tmp_path / "early")
    assert all(
        isinstance(vars(results)[f"_{n}_held"], ColumnTable) for n in ("requests", "timeseries")
    )
    requests = results.requests  # the frame, built now and kept
    assert isinstance(requests, pd.DataFrame) and results.requests is requests
    results.write(tmp_path / "late")  # from the frames
    for name in ("requests.parquet", "iterations.parquet", "timeseries.parquet"):
        assert (tmp_path / "early" / name).read_bytes() == (tmp_path / "late" / name).read_bytes()
    read = Results.read(tmp_path / "early")
    pd.testing.assert_frame_equal(read.requests, results.requests)
    pd.testing.assert_frame_equal(read.iterations, results.iterations)


def test_results_with_tables_copy_pickle_and_compare_as_frames() -> None:
    results = simulate(_scenario("plain"))
    copied = dataclasses.replace(results, summary={})
    pd.testing.assert_frame_equal(copied.iterations, results.iterations)
    unpickled = pickle.loads(pickle.dumps(simulate(_scenario("plain"))))
    pd.testing.assert_frame_equal(unpickled.requests, results.requests)
    given_frames = Results(
        results.scenario, results.requests, results.iterations, results.timeseries, {}
    )
    assert given_frames.requests is results.requests


def test_a_streamed_run_writes_the_file_a_held_run_writes(tmp_path: Path) -> None:
    scenario = _scenario("speculative")
    held = simulate(scenario)
    held.write(tmp_path / "held")
    streamed = simulate(scenario, stream_to=tmp_path / "stream.parquet")
    streamed.write(tmp_path / "streamed")
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "streamed" / "iterations.parquet"), held.iterations
    )
    columns = {name: np.asarray(held.iterations[name]) for name in held.iterations.columns}
    by_pandas = pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)
    assert _stream_table(columns).equals(by_pandas, check_metadata=True)


# drawn tables: numbers of every width the frames hold, NaN and infinities, booleans, coded
# columns (categorical and text), attrs, no rows


@st.composite
def _tables(draw: st.DrawFn) -> ColumnTable:
    rows = draw(st.integers(0, 40))
    columns: dict[str, np.ndarray | Coded] = {}
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["i8", "f8", "b1", "status", "reason", "i4", "f4"]))
        name = f"c{i}_{kind}"
        if kind in ("i8", "i4"):
            bound = 2**31 if kind == "i8" else 2**15
            values = draw(st.lists(st.integers(-bound, bound - 1), min_size=rows, max_size=rows))
            columns[name] = np.array(values, dtype=f"<{kind}")
        elif kind in ("f8", "f4"):
            width = 64 if kind == "f8" else 32
            floats = st.floats(allow_nan=True, allow_infinity=True, width=width)
            values = draw(st.lists(floats, min_size=rows, max_size=rows))
            columns[name] = np.array(values, dtype=f"<{kind}")
        elif kind == "b1":
            columns[name] = np.array(
                draw(st.lists(st.booleans(), min_size=rows, max_size=rows)), dtype=bool
            )
        elif kind == "status":
            codes = draw(
                st.lists(st.integers(0, len(STATUS_NAMES) - 1), min_size=rows, max_size=rows)
            )
            columns[name] = Coded(np.array(codes, dtype=np.int8), STATUS_NAMES, _status_column)
        else:
            names = ["", *draw(st.lists(st.text(min_size=1, max_size=12), max_size=3, unique=True))]
            codes = draw(st.lists(st.integers(0, len(names) - 1), min_size=rows, max_size=rows))
            columns[name] = Coded(np.array(codes, dtype=np.int8), tuple(names), _reason_column)
    attrs = draw(st.sampled_from([{}, {"run": "drawn", "seed": 3}]))
    return ColumnTable(columns, rows, dict(attrs))


@settings(max_examples=60, deadline=None)
@given(table=_tables())
def test_a_drawn_table_is_the_file_pandas_writes(table: ColumnTable, tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("drawn")
    os.environ[profile_cache.CACHE_ENV] = str(folder / "cache")
    try:
        expected = _pandas_file(table, folder / "pandas.parquet")
        assert _cbsim_file(table, folder / "first.parquet") == expected
        assert _cbsim_file(table, folder / "cached.parquet") == expected
        read = pq.read_table(folder / "first.parquet")
        assert read.schema.metadata == arrow_table(table).schema.metadata
    finally:
        del os.environ[profile_cache.CACHE_ENV]


def test_cbsim_run_does_not_import_pandas(tmp_path: Path) -> None:
    """The second ``cbsim run`` on a machine (the schemas cached by the first) writes its result
    without importing pandas."""
    env = {**os.environ, profile_cache.CACHE_ENV: str(tmp_path / "cache")}
    script = (
        "import sys; sys.argv = ['cbsim', 'run', sys.argv[1], '--out', sys.argv[2], '-q']\n"
        "import cbsim_launcher\n"
        "try:\n    cbsim_launcher.main()\nexcept SystemExit as end:\n    assert not end.code, end.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))\n"
    )
    scenario = str(ROOT / "scenarios" / "static-baseline.yaml")
    outputs = []
    for attempt in ("first", "second"):
        done = subprocess.run(
            [sys.executable, "-c", script, scenario, str(tmp_path / attempt)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[1] == "[]"
    for name in ("requests.parquet", "iterations.parquet", "timeseries.parquet"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()


def test_compare_no_spec_reads_columns_not_frames() -> None:
    """``--compare-no-spec``'s decode time comes from the requests' columns: no frame is built
    (no pandas needed), and the figure is the one the frames give."""
    results = simulate(_scenario("speculative"))
    figures = compare_no_spec(results)
    assert isinstance(vars(results)["_requests_held"], ColumnTable)
    data = results.scenario.to_dict()
    data["speculative"] = {"enabled": False}
    baseline = simulate(load_scenario(data))
    done = [r[r["status"] == "finished"] for r in (baseline.requests, results.requests)]
    saved = [float((d["finish_s"] - d["first_token_s"]).sum()) for d in done]
    assert figures["time_saved_s"] == saved[0] - saved[1]
    columns = results.columns("requests")
    assert isinstance(columns, ColumnTable) and len(columns) == len(results.requests)
    with pytest.raises(ValueError, match="no table"):
        results.columns("summary")
