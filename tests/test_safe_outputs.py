"""cbsim never deletes what it did not write, replaces its outputs recoverably, cleans up after
killed writers, and a killed sweep leaves no worker behind (issue 11, item 1).

The kill tests run cbsim in a child process that SIGKILLs itself at a chosen step of a write (or
SIGKILL a real ``cbsim sweep``'s parent) and then check what a user finds on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner, Result

import cbsim
from cbsim import outputs
from cbsim.cli import cli
from cbsim.errors import CbsimError
from cbsim.outputs import MARKER, OutputKind
from cbsim.parent_watch import parent_is_gone
from cbsim.report import write_report
from cbsim.results import RUN_RESULT, Results
from tests.conftest import small_scenario

REPO = Path(cbsim.__file__).resolve().parents[1]
RUN_FILES = {"requests.parquet", "iterations.parquet", "timeseries.parquet", "summary.json"}


def tiny(**overrides: Any) -> dict[str, Any]:
    return small_scenario(name="tiny", workload__num_requests=12, **overrides)


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2 with one ``error:`` line holding every fragment, and no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in result.output


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content (hidden ones included)."""
    return {
        str(p.relative_to(folder)): p.read_bytes().decode("utf-8", "replace")
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def results() -> Results:
    return cbsim.simulate(cbsim.load_scenario(tiny()))


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "tiny.yaml", tiny())


def seed_of(folder: Path) -> int:
    return int(json.loads((folder / "summary.json").read_text())["seed"])


# --------------------------------------------------------------------------- 1. run --out


def test_run_out_refuses_a_folder_holding_the_input_scenario(tmp_path: Path) -> None:
    folder = tmp_path / "experiment"
    scenario = write_yaml(folder / "scenario.yaml", tiny())
    before = tree(folder)
    result = invoke("run", scenario, "--out", folder, "-q")
    assert_refused(result, str(folder), "--out", "give a new or empty folder")
    assert tree(folder) == before


def test_run_out_refuses_a_users_folder_named_like_a_result_file(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)
    (out / "summary.json" / "notes.txt").write_text("mine")
    result = invoke("run", scenario_file, "--out", out, "-q")
    assert_refused(result, str(out), "summary.json", "cbsim did not write")
    assert (out / "summary.json" / "notes.txt").read_text() == "mine"


def test_run_out_refuses_an_earlier_result_holding_the_users_files(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    (out / "analysis.ipynb").write_text("{}")
    assert_refused(invoke("run", scenario_file, "--out", out, "-q"), "analysis.ipynb")
    assert (out / "analysis.ipynb").read_text() == "{}"
    assert {p.name for p in out.iterdir()} >= RUN_FILES


def test_run_out_refuses_another_kind_of_cbsim_output(tmp_path: Path, results: Results) -> None:
    from cbsim.sweep import SWEEP

    sweep_dir = outputs.prepare_folder(tmp_path / "sweep", SWEEP)
    with pytest.raises(CbsimError, match="holds a cbsim sweep output"):
        results.write(sweep_dir)


def test_write_refuses_a_folder_of_other_files_from_python(
    tmp_path: Path, results: Results
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.csv").write_text("a,b\n")
    with pytest.raises(CbsimError, match=r"data\.csv") as raised:
        results.write(out)
    assert str(out) in str(raised.value)
    assert [p.name for p in out.iterdir()] == ["data.csv"]


def test_an_earlier_result_is_replaced_as_a_whole(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    assert (out / MARKER).is_file() and seed_of(out) == 3
    assert invoke("run", scenario_file, "--out", out, "-q", "--seed", "9").exit_code == 0
    assert seed_of(out) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tiny.yaml"]


def test_a_result_written_before_markers_existed_is_still_replaced(
    tmp_path: Path, results: Results
) -> None:
    out = results.write(tmp_path / "out")
    (out / MARKER).unlink()  # as cbsim wrote results until now
    assert outputs.holds_output(out, RUN_RESULT)
    (out / "extra.txt").write_text("x")
    assert not outputs.holds_output(out, RUN_RESULT)
    (out / "extra.txt").unlink()
    results.write(out)
    assert (out / MARKER).is_file()


def test_an_empty_folder_may_be_the_out(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    assert {p.name for p in out.iterdir()} >= RUN_FILES


# --------------------------------------------------------------------------- 1. sweeps


def sweep_file(tmp_path: Path, **extra: Any) -> Path:
    data = {"name": "s", "base": tiny(), "grid": {"workload.arrival.rate": [2.0, 4.0]}, **extra}
    return write_yaml(tmp_path / "sweep.yaml", data)


def test_sweep_out_refuses_a_folder_of_the_users_files(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "sweep.parquet").write_text("my own table")
    (out / "thesis.tex").write_text("keep")
    before = tree(out)
    result = invoke("sweep", sweep_file(tmp_path), "--out", out, "-j", "1", "-q")
    assert_refused(result, str(out), "cbsim did not write", "thesis.tex")
    assert tree(out) == before


def test_sweep_out_refuses_a_run_result(tmp_path: Path, results: Results) -> None:
    out = results.write(tmp_path / "run")
    before = tree(out)
    result = invoke("sweep", sweep_file(tmp_path), "--out", out, "-j", "1", "-q")
    assert_refused(result, "holds a cbsim run output")
    assert tree(out) == before


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "written-before-markers"])
def test_sweep_resumes_into_its_own_folder_beside_the_users_report(
    marked: bool, tmp_path: Path
) -> None:
    out = tmp_path / "sweep-out"
    assert invoke("sweep", sweep_file(tmp_path), "--out", out, "-j", "1", "-q").exit_code == 0
    if not marked:
        (out / MARKER).unlink()
    (out / "report.html").write_text("the user's notes")
    result = invoke("sweep", sweep_file(tmp_path), "--out", out, "-j", "1")
    assert result.exit_code == 0, result.output
    assert "2 resumed" in result.stdout
    assert (out / "report.html").read_text() == "the user's notes"


def test_a_sweep_point_holding_a_users_file_is_not_replaced(
    tmp_path: Path, results: Results
) -> None:
    from cbsim.sweep import write_point

    points = tmp_path / "points"
    (points / "abc").mkdir(parents=True)
    (points / "abc" / "mine.txt").write_text("keep")
    with pytest.raises(CbsimError, match=r"mine\.txt"):
        write_point(points, "abc", results, {"key": "abc"})
    assert [p.name for p in (points / "abc").iterdir()] == ["mine.txt"]
    write_point(points, "new", results, {"key": "new"})
    write_point(points, "new", results, {"key": "new"})  # its own earlier result: replaced
    assert json.loads((points / "new" / "point.json").read_text()) == {"key": "new"}


# --------------------------------------------------------------------------- 1. reports & files


@pytest.fixture(scope="module")
def run_dir(results: Results, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return results.write(tmp_path_factory.mktemp("report") / "run")


def test_report_out_never_overwrites_a_file_cbsim_did_not_write(
    run_dir: Path, tmp_path: Path
) -> None:
    mine = tmp_path / "report.html"
    mine.write_text("<html>my own page</html>")
    result = invoke("report", run_dir, "--out", mine)
    assert_refused(result, str(mine), "not a report cbsim wrote")
    assert mine.read_text() == "<html>my own page</html>"
    source = run_dir / "summary.json"
    text = source.read_text()
    assert_refused(invoke("report", source, "--out", source), "not a report cbsim wrote")
    assert source.read_text() == text


def test_markdown_report_keeps_the_users_pngs_and_replaces_its_own(
    run_dir: Path, tmp_path: Path
) -> None:
    out = write_report(run_dir, tmp_path / "r.md")
    figures = sorted(p.name for p in tmp_path.glob("r-*.png"))
    assert figures
    write_report(run_dir, out, title="again")  # its own report and figures: replaced
    assert "# again" in out.read_text()
    other = tmp_path / "q.md"
    (tmp_path / figures[0].replace("r-", "q-")).write_bytes(b"my own figure")
    with pytest.raises(CbsimError, match="not a figure of an earlier report"):
        write_report(run_dir, other)
    assert not other.exists()
    assert (tmp_path / figures[0].replace("r-", "q-")).read_bytes() == b"my own figure"


def test_profiles_overwrite_only_profiles(tmp_path: Path) -> None:
    from cbsim.cost.engine_profile import load_engine_profile, write_engine_profile

    profile = load_engine_profile("vllm")
    target = write_engine_profile(profile, tmp_path / "engine.json")
    write_engine_profile(profile, target)  # a profile: replaced
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "data"}')
    with pytest.raises(CbsimError, match="not a cbsim engine profile"):
        write_engine_profile(profile, mine)
    assert mine.read_text() == '{"my": "data"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.json", "mine.json"]


def test_measurements_never_replace_a_users_folder_named_like_their_files(
    tmp_path: Path,
) -> None:
    from cbsim.calibration.measure import _write

    table = {"gemm": pd.DataFrame({"m": [1], "latency_ms": [0.1]})}
    out = tmp_path / "calib"
    (out / "meta.json").mkdir(parents=True)
    (out / "meta.json" / "thesis.tex").write_text("keep")
    with pytest.raises(CbsimError, match=r"meta\.json"):
        _write(out, table, {"device": "cpu"})
    assert (out / "meta.json" / "thesis.tex").read_text() == "keep"
    fresh = _write(tmp_path / "fresh", table, {"device": "cpu"})
    _write(fresh, table, {"device": "cuda"})  # an earlier measurement: replaced
    assert json.loads((fresh / "meta.json").read_text()) == {"device": "cuda"}


def test_files_written_among_other_files_replace_only_their_own(tmp_path: Path) -> None:
    kind = OutputKind("calibration report", "a calibration report", frozenset(), frozenset())
    folder = tmp_path / "calibration"
    folder.mkdir()
    (folder / "profile.json").write_text("{}")
    outputs.write_files_into(folder, kind, {"report.md": b"one"})
    outputs.write_files_into(folder, kind, {"report.md": b"two", "errors.csv": b"a\n"})
    assert (folder / "report.md").read_bytes() == b"two"
    with pytest.raises(CbsimError, match=r"profile\.json: exists and cbsim did not write it"):
        outputs.write_files_into(folder, kind, {"errors.csv": b"b\n", "profile.json": b"x"})
    assert (folder / "profile.json").read_text() == "{}"
    assert (folder / "errors.csv").read_bytes() == b"a\n"


# --------------------------------------------------------------------------- 2. killed writes

KILLER = """
import os, pathlib, shutil, signal, sys
import pandas as pd
from cbsim.results import Results

step, source, out = sys.argv[1], sys.argv[2], sys.argv[3]
renames = 0
rename, rmtree, to_parquet = pathlib.Path.rename, shutil.rmtree, pd.DataFrame.to_parquet

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def killing_rename(self, target):
    global renames
    renames += 1
    if step == f"rename{renames}":
        die()
    return rename(self, target)

def killing_rmtree(path, *args, **kwargs):
    if step == "rmtree" and str(path).endswith(".old"):
        die()
    return rmtree(path, *args, **kwargs)

def killing_to_parquet(self, *args, **kwargs):
    if step == "writing":
        die()
    return to_parquet(self, *args, **kwargs)

pathlib.Path.rename = killing_rename
shutil.rmtree = killing_rmtree
pd.DataFrame.to_parquet = killing_to_parquet
if out == "-":  # `cbsim run SOURCE` without --out, killed while writing
    from cbsim.cli import main
    main(["run", source, "-q"])
results = Results.read(source)
results.summary["seed"] = 2
results.write(out)
"""


def run_child(script: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("step", ["writing", "rename1", "rename2", "rmtree"])
def test_a_write_killed_at_any_step_leaves_a_complete_result_findable(
    step: str, tmp_path: Path, results: Results
) -> None:
    source = results.write(tmp_path / "source")
    out = results.write(tmp_path / "out")  # the old result: seed 3
    killed = run_child(KILLER, step, source, out, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # reading finds the old (seed 3) or the new (seed 2) result, complete
    assert Results.read(out).summary["seed"] in (2, 3)
    assert {p.name for p in out.iterdir()} >= RUN_FILES
    # and the next write leaves nothing behind: no .out.old, no temporary
    results.write(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "source"]


def test_a_write_killed_between_its_renames_is_restored_by_the_next_write(
    tmp_path: Path, results: Results
) -> None:
    source = results.write(tmp_path / "source")
    out = results.write(tmp_path / "out")
    assert run_child(KILLER, "rename2", source, out, cwd=tmp_path).returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / ".out.old" / "summary.json").is_file()
    outputs.check_replaceable(out, RUN_RESULT)  # what `cbsim run --out` does first
    assert seed_of(out) == 3
    assert not (tmp_path / ".out.old").exists()


def test_a_killed_run_without_out_leaves_no_empty_run_folder(
    scenario_file: Path, tmp_path: Path
) -> None:
    killed = run_child(KILLER, "writing", scenario_file, "-", cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    runs = tmp_path / "results" / "tiny"
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []
    # the killed run's temporary goes with the next run, which writes a complete folder
    next_run = run_child(
        "from cbsim.cli import main; main(['run', 'tiny.yaml', '-q'])", cwd=tmp_path
    )
    assert next_run.returncode == 0, next_run.stderr
    (written,) = list(runs.iterdir())
    assert {p.name for p in written.iterdir()} >= RUN_FILES


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporaries_of_dead_writers_are_removed_by_the_next_write(
    tmp_path: Path, results: Results
) -> None:
    dead, alive = dead_pid(), os.getppid()
    stale_dir = tmp_path / f".out.cbsim-{dead}-abc1.tmp"
    stale_dir.mkdir()
    (stale_dir / "requests.parquet").write_text("half")
    stale_file = tmp_path / f".r.html.cbsim-{dead}-x_9.tmp"
    stale_file.write_text("half")
    running = tmp_path / f".other.cbsim-{alive}-q.tmp"
    running.mkdir()
    ancient = tmp_path / f".old.cbsim-{alive}-z.tmp"
    ancient.mkdir()
    two_days_ago = time.time() - 2 * 86400
    os.utime(ancient, (two_days_ago, two_days_ago))
    not_ours = tmp_path / ".notes.tmp"
    not_ours.write_text("keep")
    results.write(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".notes.tmp", running.name, "out"])


def test_a_resumed_sweep_removes_temporaries_and_restores_points(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    sweep = sweep_file(tmp_path)
    assert invoke("sweep", sweep, "--out", out, "-j", "1", "-q").exit_code == 0
    points = out / "points"
    key = sorted(p.name for p in points.iterdir())[0]
    (points / key).rename(points / f".{key}.old")  # a point write killed between its renames
    stale = points / f".x.cbsim-{dead_pid()}-k.tmp"
    stale.mkdir()
    stale_table = out / f".sweep.parquet.cbsim-{dead_pid()}-t.tmp"
    stale_table.write_text("half")
    result = invoke("sweep", sweep, "--out", out, "-j", "1")
    assert result.exit_code == 0, result.output
    assert "2 resumed" in result.stdout
    assert not stale.exists() and not stale_table.exists()
    assert (points / key / "summary.json").is_file()


# --------------------------------------------------------------------------- 4. orphaned workers


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the state on


def session_members(session: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[3]) == session:
                members.append(int(entry.name))
    return members


def workers_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                with_args = (entry / "cmdline").read_bytes()
                if b"spawn_main" in with_args:
                    found.append(int(entry.name))
    return found


@pytest.fixture
def sweep_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    base = small_scenario(name="long", workload__num_requests=20_000)
    rates = [float(r) for r in range(2, 14)]
    sweep = write_yaml(
        tmp_path / "long.yaml",
        {"name": "long", "base": base, "grid": {"workload.arrival.rate": rates}},
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "cbsim.cli", "sweep", str(sweep), "-j", "2", "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        for pid in session_members(process.pid):
            os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_exit_when_the_sweep_process_is_killed(
    sweep_process: subprocess.Popen[bytes],
) -> None:
    deadline = time.monotonic() + 60
    while len(workers_of(sweep_process.pid)) < 2:
        assert sweep_process.poll() is None, "the sweep ended before its workers started"
        assert time.monotonic() < deadline, "no workers started"
        time.sleep(0.1)
    time.sleep(1.0)  # they are computing points now
    assert sweep_process.poll() is None and len(workers_of(sweep_process.pid)) == 2
    os.kill(sweep_process.pid, signal.SIGKILL)  # the parent alone, as the OOM killer does
    sweep_process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while session_members(sweep_process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_members(sweep_process.pid) == []


def test_parent_is_gone_tells_the_parent_apart() -> None:
    assert not parent_is_gone(os.getppid())
    assert parent_is_gone(dead_pid())


# --------------------------------------------------------------------------- the module


def test_markers_list_what_cbsim_wrote(tmp_path: Path, results: Results) -> None:
    out = results.write(tmp_path / "out")
    marker = json.loads((out / MARKER).read_text())
    assert marker["kind"] == "run"
    assert set(marker["entries"]) == {p.name for p in out.iterdir()} - {MARKER}
    assert marker["written_by"].startswith("cbsim ")


def test_temporary_names_carry_the_writers_pid(tmp_path: Path) -> None:
    seen: list[str] = []

    def spy(path: Path) -> None:
        seen.append(path.name)
        path.write_text("x")

    outputs.write_file(tmp_path / "f.txt", spy)
    match = outputs.temporary_name_pattern().match(seen[0])
    assert match is not None and int(match["pid"]) == os.getpid()
    assert (tmp_path / "f.txt").read_text() == "x"
