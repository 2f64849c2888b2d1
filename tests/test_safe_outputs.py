"""cbsim never deletes what it did not write, replaces its outputs recoverably, cleans up after
killed writers, and a killed sweep leaves no worker behind (issue 11, item 1).

The kill tests run cbsim in a child process that SIGKILLs itself at a chosen step of a write (or
SIGKILL a real ``cbsim sweep``'s parent) and then check what a user finds on disk.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner, Result

import cbsim
from cbsim.cli.commands import cli
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.common.output_folders import MARKER, OutputKind
from cbsim.common.parent_watch import parent_is_gone
from cbsim.run.loading import load_scenario
from cbsim.run.results import RUN_RESULT, Results
from cbsim.run.simulate import simulate
from cbsim.studies.report import write_report
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
    return simulate(load_scenario(tiny()))


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
    # the message names the file that makes the folder unusable (issue 26)
    assert_refused(result, str(folder), "--out", str(scenario), "give a new or empty folder")
    assert tree(folder) == before


def _loop(tmp_path: Path) -> Path:
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return tmp_path / "loop-a" / "out"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("keep")
    return tmp_path / "notes.txt" / "out"


UNWRITABLE = {
    "name-of-300-characters": (lambda tmp: tmp / ("r" * 300), "file system allows at most 255"),
    "in-a-symlink-loop": (_loop, "loop of symbolic links"),
    "under-a-regular-file": (_under_a_file, "notes.txt is not a folder"),
}


@pytest.mark.parametrize("case", list(UNWRITABLE))
def test_run_out_that_cannot_be_written_is_refused_in_one_line(
    case: str, scenario_file: Path, tmp_path: Path, results: Results
) -> None:
    make, reason = UNWRITABLE[case]
    out = make(tmp_path)
    before = tree(tmp_path)
    assert_refused(invoke("run", scenario_file, "--out", out, "-q"), str(out), "--out", reason)
    with pytest.raises(CbsimError, match=reason):  # and from Python
        results.write(out)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("exchange", [True, False], ids=["atomic-exchange", "two-renames"])
def test_a_name_as_long_as_the_file_system_allows_is_written_and_replaced(
    exchange: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not exchange:
        monkeypatch.setattr(outputs, "exchange_names", lambda first, second: False)
    target = tmp_path / ("é" * 127)  # 254 bytes: its temporaries' names must be shorter
    for version in ("old", "new"):
        outputs.replace_folder(target, DEMO, demo_fill(version))
    assert demo_version(target) == "new"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_run_out_in_a_read_only_folder_is_refused_before_the_run(
    scenario_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: play a read-only file system
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, m, **k: Path(p) != locked and access(p, m))
    else:
        locked.chmod(0o555)
    try:
        result = invoke("run", scenario_file, "--out", locked / "out", "--stream", "-q")
    finally:
        locked.chmod(0o755)
    assert_refused(result, str(locked / "out"), "--out", "read-only")
    assert list(locked.iterdir()) == []


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
    from cbsim.studies.sweep.runner import SWEEP

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
    from cbsim.studies.sweep.runner import write_point

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


@pytest.mark.parametrize("case", list(UNWRITABLE))
def test_report_out_that_cannot_be_written_is_refused_in_one_line(
    case: str, run_dir: Path, tmp_path: Path
) -> None:
    make, reason = UNWRITABLE[case]
    out = make(tmp_path).with_suffix(".html")
    assert_refused(invoke("report", run_dir, "--out", out), str(out), reason)


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
    from cbsim.studies.calibration.measure import _write

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
import os, shutil, signal, sys
import pandas as pd
from cbsim.common import output_folders as outputs
from cbsim.run import results as results_module
from cbsim.run.results import Results

step, source, out = sys.argv[1], sys.argv[2], sys.argv[3]
exchange, rmtree, to_parquet = outputs.exchange_names, shutil.rmtree, pd.DataFrame.to_parquet
write_parquet = results_module.write_parquet  # a result's tables written before any frame is read

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def killing_exchange(first, second):
    if step == "exchange":
        die()
    return exchange(first, second)

def killing_rmtree(path, *args, **kwargs):
    if step == "rmtree":
        die()
    return rmtree(path, *args, **kwargs)

def killing_to_parquet(self, *args, **kwargs):
    if step == "writing":
        die()
    return to_parquet(self, *args, **kwargs)

def killing_write_parquet(*args, **kwargs):
    if step == "writing":
        die()
    return write_parquet(*args, **kwargs)

outputs.exchange_names = killing_exchange
shutil.rmtree = killing_rmtree
pd.DataFrame.to_parquet = killing_to_parquet
results_module.write_parquet = killing_write_parquet
if out == "-":  # `cbsim run SOURCE` without --out, killed while writing
    from cbsim.cli.commands import main
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="atomic exchange: Linux")
@pytest.mark.parametrize("step", ["writing", "exchange", "rmtree"])
def test_a_write_killed_at_any_step_leaves_a_complete_result_at_its_name(
    step: str, tmp_path: Path, results: Results
) -> None:
    source = results.write(tmp_path / "source")
    out = results.write(tmp_path / "out")  # the old result: seed 3
    killed = run_child(KILLER, step, source, out, cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # before anything recovers: out holds the old (seed 3) or the new (seed 2) result, complete
    assert {p.name for p in out.iterdir()} >= RUN_FILES
    assert seed_of(out) in (2, 3)
    # and the next write leaves nothing behind: no folder aside, no temporary
    results.write(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "source"]


DEMO = OutputKind("demo", "a demo output", frozenset({"a.txt", "b.txt"}), frozenset({"a.txt"}))


def demo_fill(version: str) -> Callable[[Path], None]:
    def fill(folder: Path) -> None:
        (folder / "a.txt").write_text(version)
        (folder / "b.txt").write_text(version)

    return fill


def demo_version(folder: Path) -> str | None:
    """The version of a complete demo output at ``folder`` (None: missing or incomplete)."""
    texts = {(folder / n).read_text() for n in ("a.txt", "b.txt") if (folder / n).is_file()}
    complete = (folder / "a.txt").is_file() and (folder / "b.txt").is_file()
    return texts.pop() if complete and len(texts) == 1 else None


def _arm_killer(kill_at: int, exchange: bool) -> None:
    """In a forked child: SIGKILL itself just before its ``kill_at``-th file-system step (writing
    a file, renaming, exchanging, deleting); with ``exchange=False`` the system cannot exchange."""
    import pathlib

    steps = 0

    def counted(function: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            nonlocal steps
            steps += 1
            if steps == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)

        return step

    real_exchange = outputs.exchange_names
    outputs.exchange_names = counted(real_exchange if exchange else lambda a, b: False)
    for name in ("write_text", "rename", "unlink"):
        setattr(pathlib.Path, name, counted(getattr(pathlib.Path, name)))
    shutil.rmtree = counted(shutil.rmtree)


def killed_in_child(action: Callable[[], Any], kill_at: int, *, exchange: bool) -> bool:
    """Run ``action`` in a forked child killed before step ``kill_at``; whether it was killed (a
    child that finished first exits 0)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            _arm_killer(kill_at, exchange)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the write failed in the child"
    return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("exchange", [True, False], ids=["atomic-exchange", "two-renames"])
def test_a_kill_at_every_step_of_a_replace_leaves_the_old_or_the_new_output(
    exchange: bool, tmp_path: Path
) -> None:
    if exchange and not outputs.exchange_names(*_two_folders(tmp_path)):
        pytest.skip("this file system cannot exchange names atomically")
    target = tmp_path / "out"
    kill_at, killed = 0, True
    while killed:
        kill_at += 1
        shutil.rmtree(tmp_path)
        tmp_path.mkdir()
        outputs.replace_folder(target, DEMO, demo_fill("old"))
        replace = functools.partial(outputs.replace_folder, target, DEMO, demo_fill("new"))
        killed = killed_in_child(replace, kill_at, exchange=exchange)
        found = demo_version(target)
        if exchange:  # at every instant the name holds one complete output
            assert found in ("old", "new"), kill_at
        elif found is None:  # only between the two renames: the old output is aside...
            assert not target.exists(), kill_at
            outputs.recover(target)  # ...and every read path puts it back (what they call)
            assert demo_version(target) == "old", kill_at
        else:
            assert found in ("old", "new"), kill_at
        # the next write leaves only its output: every temporary and folder aside is gone
        outputs.replace_folder(target, DEMO, demo_fill("next"))
        assert [p.name for p in tmp_path.iterdir()] == ["out"], kill_at
        assert demo_version(target) == "next" and sorted(p.name for p in target.iterdir()) == [
            MARKER,
            "a.txt",
            "b.txt",
        ]
    assert kill_at > 5  # every step was tried, up to a write that finished


def _two_folders(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "probe-1", tmp_path / "probe-2"
    first.mkdir()
    second.mkdir()
    return first, second


@pytest.fixture
def half_replaced(tmp_path: Path, results: Results) -> Path:
    """A run result at ``work/out`` whose replacement was killed between its two renames."""
    source = results.write(tmp_path / "source")
    out = results.write(tmp_path / "work" / "out")

    def copy_source(folder: Path) -> None:
        for name in RUN_FILES:
            shutil.copy(source / name, folder / name)

    pid = os.fork()
    if pid == 0:
        try:
            outputs.exchange_names = lambda a, b: False
            real = Path.rename

            def rename(self: Path, target: Path) -> Path:
                if self.name.endswith(".tmp") and Path(target).name == "out":
                    os.kill(os.getpid(), signal.SIGKILL)  # the second rename
                return real(self, target)

            Path.rename = rename  # type: ignore[method-assign]
            outputs.replace_folder(out, RUN_RESULT, copy_source)
        finally:
            os._exit(1)
    os.waitpid(pid, 0)
    assert not out.exists()
    (aside,) = [p for p in out.parent.iterdir() if p.name.endswith(".old")]
    assert aside.name == ".out.cbsim-aside.old" and (aside / outputs.REPLACING).is_file()
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("reader", ["Results.read", "cbsim report", "run --out", "next write"])
def test_a_replace_killed_between_its_renames_is_restored_by_every_read_and_write(
    reader: str, half_replaced: Path, results: Results
) -> None:
    from cbsim.studies.report.sources import detect

    out = half_replaced
    if reader == "Results.read":
        assert Results.read(out).summary["seed"] == 3
    elif reader == "cbsim report":
        assert detect(out) == ("run", out)
    elif reader == "run --out":  # what `cbsim run --out` and `--compare-no-spec` check first
        outputs.check_replaceable(out, RUN_RESULT)
    else:
        results.write(out.parent / "other")  # any write into the same folder
    assert seed_of(out) == 3
    assert outputs.REPLACING not in {p.name for p in out.iterdir()}
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".old")]
    results.write(out)  # and the next write deletes the killed writer's staging
    assert sorted(p.name for p in out.parent.iterdir()) in (["out"], ["other", "out"])


# --------------------------------------------------------------------------- cbsim's names only


@pytest.fixture
def users_backup(tmp_path: Path, results: Results) -> Path:
    """The user's backup of an earlier run, kept beside it as ``.out.old`` (cbsim's marker
    inside, as a copy of a result has), plus a note of theirs."""
    backup = results.write(tmp_path / "backup")
    (backup / "why.txt").write_text("the run before the fix")
    return backup.rename(tmp_path / ".out.old")


def test_a_users_dot_old_folder_is_not_taken_for_an_interrupted_replace(
    users_backup: Path, results: Results, scenario_file: Path
) -> None:
    before = tree(users_backup)
    out = users_backup.with_name("out")  # missing: cbsim once moved .out.old into it
    with pytest.raises((CbsimError, OSError)):  # reading the missing result finds none...
        Results.read(out)
    assert not out.exists()  # ...and does not take the user's backup for it
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    assert "why.txt" not in {p.name for p in out.iterdir()}
    results.write(out)  # replacing out never touches the user's .out.old either
    assert tree(users_backup) == before


@pytest.mark.parametrize("exchange", [True, False], ids=["atomic-exchange", "two-renames"])
def test_a_users_folder_named_like_a_cbsim_aside_is_never_taken_or_overwritten(
    exchange: bool, tmp_path: Path, results: Results, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = results.write(tmp_path / "out")
    mine = tmp_path / ".out.cbsim-aside.old"  # cbsim's name, but no journal: the user's
    mine.mkdir()
    (mine / "data.csv").write_text("keep")
    shutil.rmtree(out)
    outputs.recover(out)  # out missing: not taken for a replacement killed half way
    assert not out.exists()
    results.write(out)
    if not exchange:
        monkeypatch.setattr(outputs, "exchange_names", lambda first, second: False)
    if exchange:
        results.write(out)  # needs no name aside
    else:
        with pytest.raises(CbsimError, match=r"\.out\.cbsim-aside\.old is in the way"):
            results.write(out)
    assert sorted(p.name for p in mine.iterdir()) == ["data.csv"]
    assert seed_of(out) == 3 and sorted(p.name for p in tmp_path.iterdir()) == [mine.name, "out"]


# --------------------------------------------------------------------------- 3. stale temporaries


def test_a_killed_run_without_out_leaves_no_empty_run_folder(
    scenario_file: Path, tmp_path: Path
) -> None:
    killed = run_child(KILLER, "writing", scenario_file, "-", cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    runs = tmp_path / "results" / "tiny"
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []
    # the killed run's temporary goes with the next run, which writes a complete folder
    next_run = run_child(
        "from cbsim.cli.commands import main; main(['run', 'tiny.yaml', '-q'])", cwd=tmp_path
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


def moved_aside_by_a_killed_writer(target: Path) -> Path:
    """``target`` as a replacement killed between its two renames leaves it: moved aside with
    the journal of a writer that is gone."""
    aside = target.with_name(f".{target.name}.cbsim-aside.old")
    outputs._write_journal(target, aside)
    journal = json.loads((target / outputs.REPLACING).read_text())
    journal["pid"] = dead_pid()
    (target / outputs.REPLACING).write_text(json.dumps(journal))
    return target.rename(aside)


@pytest.fixture
def zombie() -> Iterator[int]:
    """The id of a child that has exited but is not reaped (as workers orphaned in a container
    whose first process does not reap stay)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while (_stat(child.pid) or ["?"])[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield child.pid
    child.wait()


def test_a_resumed_sweep_removes_temporaries_and_restores_points(
    tmp_path: Path, zombie: int
) -> None:
    out = tmp_path / "sw"
    sweep = sweep_file(tmp_path)
    assert invoke("sweep", sweep, "--out", out, "-j", "1", "-q").exit_code == 0
    points = out / "points"
    key = sorted(p.name for p in points.iterdir())[0]
    moved_aside_by_a_killed_writer(points / key)  # a point write killed between its renames
    stale = points / f".x.cbsim-{dead_pid()}-k.tmp"
    stale.mkdir()
    of_a_zombie = points / f".y.cbsim-{zombie}-k.tmp"  # a killed worker, never reaped
    of_a_zombie.mkdir()
    users = points / f".{key}.old"  # named as cbsim once named its own: the user's
    users.mkdir()
    stale_table = out / f".sweep.parquet.cbsim-{dead_pid()}-t.tmp"
    stale_table.write_text("half")
    result = invoke("sweep", sweep, "--out", out, "-j", "1")
    assert result.exit_code == 0, result.output
    assert "2 resumed" in result.stdout
    assert not stale.exists() and not stale_table.exists() and not of_a_zombie.exists()
    assert (points / key / "summary.json").is_file() and users.is_dir()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_temporary_of_a_killed_writer_never_reaped_is_removed(
    tmp_path: Path, zombie: int
) -> None:
    of_a_zombie = tmp_path / f".point.cbsim-{zombie}-w.tmp"
    of_a_zombie.mkdir()
    assert outputs.remove_stale_temporaries(tmp_path) == [of_a_zombie]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_temporary_whose_pid_was_reused_is_removed(tmp_path: Path, results: Results) -> None:
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reused = tmp_path / f".out.cbsim-{later.pid}-r.tmp"  # written an hour before it started
        reused.mkdir()
        an_hour_ago = time.time() - 3600
        os.utime(reused, (an_hour_ago, an_hour_ago))
        running = tmp_path / f".out.cbsim-{later.pid}-s.tmp"  # written since: its own
        running.mkdir()
        results.write(tmp_path / "out")
        assert not reused.exists() and running.exists()
    finally:
        later.kill()
        later.wait()


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


def children_of(parent: int) -> list[tuple[int, bytes]]:
    """Live children of a process, with their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[1]) == parent:
                with contextlib.suppress(OSError):
                    found.append((int(entry.name), (entry / "cmdline").read_bytes()))
    return found


def workers_of(parent: int) -> list[int]:
    """A sweep's worker processes: spawned by it, or forked by its fork server."""
    found = []
    for pid, command in children_of(parent):
        if b"spawn_main" in command:
            found.append(pid)
        elif b"forkserver" in command:
            found += [worker for worker, _ in children_of(pid)]
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
        [sys.executable, "-m", "cbsim.cli.commands", "sweep", str(sweep), "-j", "2", "-q"],
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


@pytest.mark.slow  # .ci/run's second stage runs it
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
    deadline = time.monotonic() + 30  # generous: a loaded machine (parallel tests) is slow
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
