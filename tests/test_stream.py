"""Streaming the iterations to parquet during a run (``stream_to``, ``cbsim run --stream``): the
same results as holding them, the file equal to the held frame."""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

import cbsim.cli.commands as cli_module
import cbsim.engine.recorder
from cbsim.cli.commands import cli
from cbsim.common.output_folders import temporary_name_pattern
from cbsim.cost.engine_profile import (
    Frontend,
    StepOverhead,
    load_engine_profile,
    write_engine_profile,
)
from cbsim.run.results import Results
from cbsim.run.simulate import compare_no_spec, simulate

SCENARIO: dict[str, Any] = {
    "name": "stream",
    "seed": 1,
    "workload": {
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate": 8.0},
        "prompt_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8000},
        "output_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.7, "max": 1000},
    },
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
    "scheduler": {"kind": "prefill_first"},
    "output": {"timeseries_window_s": 2.0},
}
SPECULATIVE: dict[str, Any] = {
    "enabled": True,
    "proposer": {"kind": "eagle"},
    "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
    "policy": {"kind": "goodput", "k_max": 8},
}
ROWS = 97  # rows per row group in these tests: many groups

# summed chunk by chunk: equal up to float rounding (see cbsim.engine.recorder)
ROUNDED = {"draft_time_s", "target_time_s", "busy_fraction"}


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cbsim.engine.recorder, "STREAM_ROWS", ROWS)


def scenario(replicas: int = 1, speculative: bool = False, **top: Any) -> dict[str, Any]:
    data = copy.deepcopy(SCENARIO)
    data["cluster"]["replicas"] = replicas
    if replicas > 1:
        data["cluster"]["router"] = "least_loaded"
    if speculative:
        data["speculative"] = copy.deepcopy(SPECULATIVE)
    return data | top


def with_streaming_front_end(data: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The scenario behind a front end that delivers every token (client times differ)."""
    profile = load_engine_profile("none").model_copy(
        update={
            "frontend": Frontend(request_s=0.002, output_token_s=2e-4),
            "overhead": StepOverhead(),
        }
    )
    write_engine_profile(profile, tmp_path / "engine.json")
    data["cluster"]["engine"] = str(tmp_path / "engine.json")
    return data


def assert_summaries_match(streamed: dict[str, Any], held: dict[str, Any]) -> None:
    assert streamed.keys() == held.keys()
    for key, value in held.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(streamed[key]), key
        elif key in ROUNDED:
            assert streamed[key] == pytest.approx(value, rel=1e-9), key
        else:
            assert streamed[key] == value, key


def assert_streamed_equals_held(streamed: Results, held: Results, replicas: int) -> None:
    """Everything a streamed run gives equals the held run's (the summary's rounded figures and,
    with several replicas, the timeseries up to rounding)."""
    assert streamed.iterations.empty
    pd.testing.assert_series_equal(streamed.iterations.dtypes, held.iterations.dtypes)
    rows = streamed.load_iterations()
    if replicas > 1:
        rows = rows.sort_values(["start_s", "replica"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(rows, held.iterations, check_exact=True)
    pd.testing.assert_frame_equal(streamed.requests, held.requests, check_exact=True)
    assert_summaries_match(streamed.summary, held.summary)
    if replicas == 1:  # the same additions in the same order
        pd.testing.assert_frame_equal(streamed.timeseries, held.timeseries, check_exact=True)
    else:
        pd.testing.assert_frame_equal(streamed.timeseries, held.timeseries, rtol=1e-9)
    assert streamed.run_info["simulated_s"] == held.run_info["simulated_s"]
    assert streamed.run_info["streamed"] is True
    assert "streamed" not in held.run_info


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "spec"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_streamed_run_equals_held_run(tmp_path: Path, replicas: int, speculative: bool) -> None:
    data = scenario(replicas, speculative)
    held = simulate(data)
    streamed = simulate(data, stream_to=tmp_path / "it.parquet")
    assert streamed.iterations_path == tmp_path / "it.parquet"
    groups = pq.ParquetFile(tmp_path / "it.parquet").metadata
    assert groups.num_row_groups > 3
    sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
    assert min(sizes[:-1]) >= ROWS  # a group per ROWS rows, or a little more (a decode run)
    assert_streamed_equals_held(streamed, held, replicas)


def test_rows_sorted_within_each_row_group(tmp_path: Path) -> None:
    simulate(scenario(replicas=3), stream_to=tmp_path / "it.parquet")
    file = pq.ParquetFile(tmp_path / "it.parquet")
    for group in range(file.num_row_groups):
        chunk = file.read_row_group(group).to_pandas()
        ordered = chunk.sort_values(["start_s", "replica"], kind="stable")
        assert (ordered.index == chunk.index).all()


@pytest.mark.parametrize("replicas", [1, 2])
def test_front_end_delivery_times_kept_for_client_times(tmp_path: Path, replicas: int) -> None:
    data = with_streaming_front_end(scenario(replicas), tmp_path)
    held = simulate(data)
    streamed = simulate(data, stream_to=tmp_path / "it.parquet")
    assert (held.requests["first_token_s"] > held.requests["server_first_token_s"]).all()
    assert_streamed_equals_held(streamed, held, replicas)


def test_horizon_and_closed_loop(tmp_path: Path) -> None:
    cut = scenario(replicas=2, horizon_s=10.0)
    assert_streamed_equals_held(simulate(cut, stream_to=tmp_path / "a.parquet"), simulate(cut), 2)
    closed = scenario()
    closed["workload"]["arrival"] = {"kind": "closed_loop", "concurrency": 8}
    closed["workload"]["num_requests"] = 60
    assert_streamed_equals_held(
        simulate(closed, stream_to=tmp_path / "b.parquet"), simulate(closed), 1
    )


def test_run_without_iterations_writes_an_empty_file(tmp_path: Path) -> None:
    data = scenario(horizon_s=1e-6)
    held = simulate(data)
    assert held.iterations.empty
    streamed = simulate(data, stream_to=tmp_path / "it.parquet")
    pd.testing.assert_frame_equal(streamed.load_iterations(), held.iterations)
    assert_summaries_match(streamed.summary, held.summary)


def test_write_moves_the_streamed_file(tmp_path: Path) -> None:
    held = simulate(scenario())
    streamed = simulate(scenario(), stream_to=tmp_path / "it.parquet")
    streamed.write(tmp_path / "out")
    assert not (tmp_path / "it.parquet").exists()
    assert streamed.iterations_path == (tmp_path / "out" / "iterations.parquet").resolve()
    streamed.write(tmp_path / "again")  # a second write copies; the first stays whole
    streamed.write(tmp_path / "again")  # and again onto itself
    for name in ("out", "again"):
        read = Results.read(tmp_path / name)
        pd.testing.assert_frame_equal(read.iterations, held.iterations)
        pd.testing.assert_frame_equal(read.requests, held.requests)
    info = json.loads((tmp_path / "out" / "run_info.json").read_text())
    assert info["streamed"] is True


class Unwritable:
    def to_parquet(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")


def test_failed_write_keeps_the_streamed_file(tmp_path: Path) -> None:
    streamed = simulate(scenario(), stream_to=tmp_path / "it.parquet")
    expected = streamed.load_iterations()
    timeseries = streamed.timeseries
    streamed.timeseries = Unwritable()  # type: ignore[assignment]
    with pytest.raises(OSError, match="disk full"):
        streamed.write(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it.parquet"]
    assert streamed.iterations_path == tmp_path / "it.parquet"
    streamed.timeseries = timeseries
    streamed.write(tmp_path / "out")
    pd.testing.assert_frame_equal(Results.read(tmp_path / "out").iterations, expected)


def test_cli_stream_flag_writes_a_result_that_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(replicas=2)))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "--quiet", "--stream"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "s.yaml"]  # no stray files
    held = simulate(scenario(replicas=2))
    read = Results.read(out)
    rows = read.iterations.sort_values(["start_s", "replica"], kind="stable")
    pd.testing.assert_frame_equal(rows.reset_index(drop=True), held.iterations)
    pd.testing.assert_frame_equal(read.requests, held.requests)
    assert json.loads((out / "run_info.json").read_text())["streamed"] is True


def test_cli_streams_automatically_above_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_module, "AUTO_STREAM_REQUESTS", 100)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "streaming iterations" in result.output
    assert json.loads((out / "run_info.json").read_text())["streamed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "s.yaml"]
    # below it, held
    monkeypatch.setattr(cli_module, "AUTO_STREAM_REQUESTS", 200)
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "streaming" not in result.output
    assert "streamed" not in json.loads((out / "run_info.json").read_text())


def test_cli_stream_compare_no_spec_streams_the_baseline_too(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(speculative=True)))
    out = tmp_path / "run"
    args = ["run", str(path), "--out", str(out), "--quiet", "--stream", "--compare-no-spec"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "s.yaml"]
    held = simulate(scenario(speculative=True))
    expected = compare_no_spec(held)
    summary = Results.read(out).summary
    for key, value in expected.items():
        assert summary[key] == value, key


def test_cli_stream_without_out_writes_a_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario()))
    result = CliRunner().invoke(cli, ["run", "s.yaml", "--quiet", "--stream"])
    assert result.exit_code == 0, result.output
    written = Path(result.output.strip().splitlines()[-1])
    assert [p.name for p in (tmp_path / "results" / "stream").iterdir()] == [written.name]
    pd.testing.assert_frame_equal(Results.read(written).iterations, simulate(scenario()).iterations)


# --------------------------------------------------------------------------- writing safely


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_runs_stream_file_is_a_temporary_the_next_run_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    streamed_to: list[Path] = []
    real = cli_module.simulate

    def spy(*args: Any, **kwargs: Any) -> Results:
        streamed_to.append(kwargs["stream_to"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cli_module, "simulate", spy)
    # what a `cbsim run --stream --out run` killed during its run leaves beside run/
    killed = tmp_path / f".run.iterations.parquet.cbsim-{dead_pid()}-abc.tmp"
    killed.write_bytes(b"PAR1 half a file")
    args = ["run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--stream"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    # its own stream file is named as cbsim's temporaries are: a kill leaves one the next deletes
    match = temporary_name_pattern().match(streamed_to[0].name)
    assert match is not None and int(match["pid"]) == os.getpid()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "s.yaml"]


def _refuse_to_create(*args: Any, **kwargs: Any) -> Any:
    raise PermissionError(errno.EROFS, "Read-only file system")


def _disk_full(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("fault", ["read-only", "disk-full"])
def test_cli_stream_that_cannot_write_is_one_error_line(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    if fault == "read-only":  # a read-only file system refuses even root
        monkeypatch.setattr(tempfile, "mkstemp", _refuse_to_create)
        where, reason = str(tmp_path), "Read-only file system"
    else:
        monkeypatch.setattr(pq.ParquetWriter, "write_table", _disk_full)
        where, reason = ".run.iterations.parquet.cbsim-", "No space left on device"
    args = ["run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--stream"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert where in lines[0] and reason in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
