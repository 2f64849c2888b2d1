"""Sweeps: grid expansion, point keys, local and Ray runs, resume, invalid points, the command."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner, Result

import cbsim
import cbsim.studies.sweep.execution as sweep_execution
from cbsim.common.errors import CbsimError
from cbsim.studies.sweep.runner import (
    execute_sweep,
    expand_points,
    load_sweep,
    point_key,
    resolve_points,
    run_sweep,
    sweep_command,
    sweep_frame,
)
from tests.conftest import small_scenario, summaries_equal

GRID = {"workload.arrival.rate": [2.0, 8.0], "scheduler.kind": ["prefill_first", "sarathi"]}
INVALID = {"scheduler.max_batch_size": 0}


def tiny_base(**overrides: Any) -> dict[str, Any]:
    """A scenario that simulates in a few milliseconds: 20 requests."""
    return small_scenario(workload__num_requests=20, **overrides)


def grid_sweep(**extra: Any) -> dict[str, Any]:
    """The 2 × 2 grid over two seeds: 8 points."""
    return {"name": "grid", "base": tiny_base(), "grid": GRID, "seeds": [1, 2], **extra}


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def summary_from_disk(point_dir: Path) -> dict[str, Any]:
    data = json.loads((point_dir / "summary.json").read_text())
    return {k: (math.nan if v is None else v) for k, v in data.items()}


def row_summary(frame: pd.DataFrame, key: str, names: list[str]) -> dict[str, Any]:
    row = frame.loc[frame["key"] == key].iloc[0]
    return {n: (row[n].item() if hasattr(row[n], "item") else row[n]) for n in names}


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, float]:
    """The 2 × 2 grid × 2 seeds sweep, plus an invalid point, run once locally (shared: starting
    a process pool takes seconds)."""
    out = tmp_path_factory.mktemp("sweep") / "grid"
    start = time.perf_counter()
    frame = run_sweep(grid_sweep(points=[INVALID]), out=out, workers=2)
    return out, frame, time.perf_counter() - start


# --------------------------------------------------------------------------- expansion


def test_grid_is_the_product_with_seeds_inner() -> None:
    points = expand_points(grid_sweep())
    assert len(points) == 8
    assert [(p.overrides, p.seed) for p in points[:4]] == [
        ({"workload.arrival.rate": 2.0, "scheduler.kind": "prefill_first"}, 1),
        ({"workload.arrival.rate": 2.0, "scheduler.kind": "prefill_first"}, 2),
        ({"workload.arrival.rate": 2.0, "scheduler.kind": "sarathi"}, 1),
        ({"workload.arrival.rate": 2.0, "scheduler.kind": "sarathi"}, 2),
    ]
    for overrides, seed, scenario in points:
        assert scenario.seed == seed
        assert scenario.scheduler.kind == overrides["scheduler.kind"]
        assert scenario.workload.arrival is not None
        assert scenario.workload.arrival.rate == overrides["workload.arrival.rate"]  # type: ignore[union-attr]
    assert len({p.key for p in points}) == 8


def test_points_come_after_the_grid_and_may_stand_alone() -> None:
    extra = [{"scheduler.kind": "sarathi", "scheduler.chunk_size": 256}]
    points = expand_points(grid_sweep(points=extra, seeds=[5]))
    assert len(points) == 5
    assert points[-1].overrides == extra[0]
    assert points[-1].scenario.scheduler.chunk_size == 256
    alone = expand_points({"base": tiny_base(), "points": [*extra, {}]})
    assert [p.overrides for p in alone] == [extra[0], {}]


def test_default_seed_is_the_base_seed_and_no_grid_runs_the_base() -> None:
    points = expand_points({"base": tiny_base(seed=11)})
    assert [(p.overrides, p.seed) for p in points] == [({}, 11)]


def test_key_is_a_short_hash_of_the_resolved_scenario() -> None:
    points = expand_points(grid_sweep())
    key = points[0].key
    assert len(key) == 12 and all(c in "0123456789abcdef" for c in key)
    # same resolved scenario ⇒ same key, whether it came from an override or from the base
    direct = cbsim.load_scenario(
        tiny_base(
            workload__arrival={"kind": "poisson", "rate": 2.0}, scheduler__kind="prefill_first"
        ),
        seed=1,
    )
    assert point_key(direct) == key
    assert point_key(direct.model_copy(update={"seed": 2})) != key


def test_keys_are_stable_across_processes(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "sweep.yaml", grid_sweep())
    here = [p.key for p in expand_points(path)]
    code = (
        "import sys; from cbsim.studies.sweep.runner import expand_points; "
        "print(' '.join(p.key for p in expand_points(sys.argv[1])))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert there == here


def test_relative_base_is_taken_from_the_sweep_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_yaml(tmp_path / "scenarios" / "base.yaml", tiny_base())
    path = write_yaml(
        tmp_path / "sweeps" / "s.yaml", {"base": "../scenarios/base.yaml", "grid": GRID}
    )
    monkeypatch.chdir(tmp_path)
    keys = [p.key for p in expand_points(Path("sweeps/s.yaml"))]
    monkeypatch.chdir(tmp_path / "sweeps")
    assert [p.key for p in expand_points("s.yaml")] == keys
    assert load_sweep(path).sweep_name == "s"


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"base": {}, "gird": {}}, ["gird", "unknown key"]),
        ({"grid": {}}, ["base", "required"]),
        ({"base": 3}, ["base", "scenario file path or a scenario mapping"]),
        ({"base": {}, "grid": {"scheduler.kind": []}}, ["grid", "at least one value"]),
        ({"base": {}, "grid": {"seed": [1, 2]}}, ["grid", "seeds: [...]"]),
        ({"base": {}, "points": [{"a..b": 1}]}, ["points", "[0]", "dotted"]),
        ({"base": {}, "seeds": [1, 1]}, ["seeds", "repeat"]),
        ({"base": {}, "seeds": [-1]}, ["seeds[0]"]),
        ({"base": {}, "name": "a/b"}, ["name", "path separators"]),
    ],
)
def test_sweep_file_errors_name_the_file_and_field(
    tmp_path: Path, data: dict[str, Any], fragments: list[str]
) -> None:
    path = write_yaml(tmp_path / "bad.yaml", data)
    with pytest.raises(CbsimError) as info:
        expand_points(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_base_file_is_a_sweep_error(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "s.yaml", {"base": "nowhere.yaml"})
    with pytest.raises(CbsimError, match=r"s\.yaml: base .*nowhere\.yaml.*: file not found"):
        resolve_points(path)


def test_invalid_points_are_reported_with_their_overrides() -> None:
    sweep = grid_sweep(points=[{"scheduler.kind": "nope"}, {"workload.arrival": 5}])
    valid, invalid = resolve_points(sweep)
    assert len(valid) == 8
    assert [(f.overrides, f.seed) for f in invalid] == [
        ({"scheduler.kind": "nope"}, 1),
        ({"scheduler.kind": "nope"}, 2),
        ({"workload.arrival": 5}, 1),
        ({"workload.arrival": 5}, 2),
    ]
    assert "scheduler.kind: unknown kind 'nope'" in invalid[0].error
    assert '{"scheduler.kind": "nope"} seed 1' in invalid[0].describe()
    with pytest.raises(CbsimError, match=r"invalid point .*nope.*and 3 more"):
        expand_points(sweep)
    assert len(expand_points(sweep, skip_invalid=True)) == 8


# --------------------------------------------------------------------------- running locally


def test_local_run_writes_point_dirs_and_the_table(
    grid_run: tuple[Path, pd.DataFrame, float],
) -> None:
    out, frame, _ = grid_run
    points = expand_points(grid_sweep())
    dirs = sorted(p.name for p in (out / "points").iterdir())
    assert dirs == sorted(p.key for p in points)
    for point in points:
        point_dir = out / "points" / point.key
        for name in ("summary.json", "requests.parquet", "scenario.yaml", "point.json"):
            assert (point_dir / name).is_file(), name
        meta = json.loads((point_dir / "point.json").read_text())
        assert meta == {"key": point.key, "seed": point.seed, "overrides": point.overrides}

    assert frame.equals(pd.read_parquet(out / "sweep.parquet"))
    assert list(frame.columns[:4]) == ["workload.arrival.rate", "scheduler.kind", "seed", "key"]
    assert list(frame["key"]) == [p.key for p in points]
    assert list(frame["seed"]) == [1, 2] * 4
    assert (
        list(frame["scheduler.kind"])
        == ["prefill_first", "prefill_first", "sarathi", "sarathi"] * 2
    )
    summary_names = list(summary_from_disk(out / "points" / points[0].key))
    assert set(summary_names) <= set(frame.columns)
    assert {"ttft_p99_s", "throughput_rps", "goodput_rps"} <= set(frame.columns)
    assert frame.attrs["ran"] == 8 and frame.attrs["resumed"] == 0

    # the invalid point is reported with its overrides (once per seed) and skipped
    failures = frame.attrs["failures"]
    assert [(f["overrides"], f["seed"], f["key"]) for f in failures] == [
        (INVALID, 1, None),
        (INVALID, 2, None),
    ]
    assert all("scheduler.max_batch_size" in f["error"] and not f["internal"] for f in failures)
    assert "scheduler.max_batch_size" not in frame.columns  # columns come from valid points

    # a point's summary is the one a direct run gives (seeds derive from the scenario)
    direct = cbsim.simulate(points[3].scenario).summary
    assert summaries_equal(summary_from_disk(out / "points" / points[3].key), direct)
    assert summaries_equal(row_summary(frame, points[3].key, list(direct)), direct)


def test_resume_skips_completed_points_and_a_changed_base_gets_new_keys(
    grid_run: tuple[Path, pd.DataFrame, float], tmp_path: Path
) -> None:
    out = tmp_path / "grid"
    shutil.copytree(grid_run[0], out)
    stamps = {p.name: (p / "summary.json").stat().st_mtime_ns for p in (out / "points").iterdir()}

    calls: list[tuple[int, int]] = []
    again = run_sweep(
        grid_sweep(points=[INVALID]),
        out=out,
        workers=2,
        progress=lambda d, n: calls.append((d, n)),
    )
    assert again.attrs["ran"] == 0 and again.attrs["resumed"] == 8
    assert calls == [(8, 8)]
    assert again.equals(grid_run[1])
    assert stamps == {
        p.name: (p / "summary.json").stat().st_mtime_ns for p in (out / "points").iterdir()
    }

    # one point lost: only it runs again
    lost = sorted(stamps)[0]
    shutil.rmtree(out / "points" / lost)
    report = execute_sweep(grid_sweep(points=[INVALID]), out=out, workers=2)
    assert (report.ran, report.resumed, report.succeeded, report.invalid) == (1, 7, 8, 2)
    assert report.frame.equals(grid_run[1])

    # a changed base: every point is new, and the table lists only the current points
    changed = grid_sweep(base=tiny_base(workload__output_tokens={"kind": "fixed", "value": 8}))
    report = execute_sweep(changed, out=out, workers=2)
    assert (report.ran, report.resumed) == (8, 0)
    new_keys = {p.key for p in expand_points(changed)}
    assert not new_keys & set(stamps)
    assert set(report.frame["key"]) == new_keys
    assert len(list((out / "points").iterdir())) == 16  # old results kept, never mixed in
    assert set(pd.read_parquet(out / "sweep.parquet")["key"]) == new_keys


def test_mixed_and_structured_override_values_become_text_columns() -> None:
    sweep = {
        "base": tiny_base(),
        "points": [
            {
                "speculative.enabled": True,
                "speculative.policy": {"kind": "fixed", "k": 2},
                "scheduler.max_batched_tokens": 256,
            },
            {"speculative.enabled": False, "scheduler.max_batched_tokens": "512"},
        ],
    }
    points = expand_points(sweep)
    frame = sweep_frame(points, {p.key: {"completed": 20, "name": "small"} for p in points})
    assert list(frame.columns) == [
        "speculative.enabled",
        "speculative.policy",
        "scheduler.max_batched_tokens",
        "seed",
        "key",
        "completed",
        "name",
    ]
    policy = frame["speculative.policy"]
    assert policy.iloc[0] == '{"k":2,"kind":"fixed"}' and pd.isna(policy.iloc[1])
    assert list(frame["scheduler.max_batched_tokens"]) == ["256", "512"]
    assert list(frame["speculative.enabled"]) == [True, False]
    # only points with a summary get a row; an empty table keeps its columns and writes
    empty = sweep_frame(points, {})
    assert len(empty) == 0 and list(empty.columns)[-2:] == ["seed", "key"]


def test_a_run_time_exception_is_an_internal_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(sys.modules["cbsim.run.simulate"], "simulate", broken)
    [point] = expand_points({"base": tiny_base()})
    outcome = sweep_execution._simulate_point(point.scenario, point.key, {}, None, None)
    assert outcome.internal and outcome.error is not None
    assert "RuntimeError: boom" in outcome.error


def test_option_errors() -> None:
    with pytest.raises(CbsimError, match="address: applies only to the ray backend"):
        run_sweep(grid_sweep(), address="127.0.0.1:6379")
    with pytest.raises(CbsimError, match="backend: unknown backend 'dask'"):
        run_sweep(grid_sweep(), backend="dask")
    with pytest.raises(CbsimError, match="workers: must be at least 1"):
        run_sweep(grid_sweep(), workers=0)


def test_ray_missing_gives_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(CbsimError, match=r"pip install 'cbsim\[ray\]'"):
        run_sweep({"base": tiny_base()}, backend="ray", out=tmp_path / "out")


# --------------------------------------------------------------------------- Ray


@pytest.mark.slow  # Ray's start-up is ~10 s of the default run; `.ci/run` runs it in its 2nd stage
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (optional extra: pip install 'cbsim[ray]')",
)
def test_ray_backend_gives_the_same_summaries_as_local(
    grid_run: tuple[Path, pd.DataFrame, float], tmp_path: Path
) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        frame = run_sweep(grid_sweep(), backend="ray", out=tmp_path / "ray")
        assert ray.is_initialized()  # a Ray started by the caller is left running
    finally:
        ray.shutdown()
    local = grid_run[1]
    assert frame.attrs["ran"] == 8
    pd.testing.assert_frame_equal(frame, local)
    for key in local["key"]:
        assert summaries_equal(
            summary_from_disk(tmp_path / "ray" / "points" / key),
            summary_from_disk(grid_run[0] / "points" / key),
        )


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (optional extra: pip install 'cbsim[ray]')",
)
def test_ray_backend_starts_and_stops_its_own_local_ray(tmp_path: Path) -> None:
    import ray

    sweep = {"base": tiny_base(), "grid": {"scheduler.kind": ["prefill_first", "sarathi"]}}
    frame = run_sweep(sweep, backend="ray", workers=2, out=tmp_path / "ray")
    assert not ray.is_initialized()
    assert len(frame) == 2 and frame.attrs["ran"] == 2
    local = run_sweep(sweep, workers=2, out=tmp_path / "local")
    pd.testing.assert_frame_equal(frame, local)


# --------------------------------------------------------------------------- command line


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(sweep_command, [str(a) for a in args])


def test_cli_runs_resumes_and_reports_failures(tmp_path: Path) -> None:
    write_yaml(tmp_path / "base.yaml", tiny_base())
    sweep = {
        "name": "cli",
        "base": "base.yaml",
        "grid": {"scheduler.kind": ["prefill_first", "nope"]},
    }
    path = write_yaml(tmp_path / "s.yaml", sweep)
    out = tmp_path / "out"
    result = invoke(path, "--out", out, "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "sweep cli: 2 points: 1 succeeded (0 resumed), 1 failed (1 invalid)" in result.stdout
    assert f"results: {out / 'sweep.parquet'} (1 rows)" in result.stdout
    failures = [line for line in result.stderr.splitlines() if line.startswith("failed: ")]
    assert failures[0].startswith('failed: {"scheduler.kind": "nope"} seed 3: ')
    assert "base.yaml: scheduler.kind: unknown kind 'nope'" in result.stderr
    assert len(pd.read_parquet(out / "sweep.parquet")) == 1

    quiet = invoke(path, "--out", out, "--quiet")
    assert quiet.exit_code == 0
    assert quiet.stdout.strip() == str(out)


def test_cli_exits_1_when_every_point_fails(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "s.yaml", {"base": tiny_base(), "grid": {"scheduler.kind": ["nope"]}}
    )
    result = invoke(path, "--out", tmp_path / "out", "-q")
    assert result.exit_code == 1
    assert "failed:" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ([], ["s.yaml", "gird", "unknown key"]),
        (["--address", "x:1"], ["--address", "ray backend"]),
    ],
)
def test_cli_user_errors_exit_2(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    data = {"base": tiny_base(), "gird": {}} if not args else {"base": tiny_base()}
    path = write_yaml(tmp_path / "s.yaml", data)
    result = invoke(path, "--out", tmp_path / "out", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    for fragment in fragments:
        assert fragment in line
