"""``cbsim calibrate report`` on a base install: no ``tabulate`` (a test extra only), and progress
on stderr while the fits run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import cbsim.studies.calibration.fit as fit
from cbsim.cli.commands import cli
from cbsim.studies.calibration.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_tabulate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing tabulate fails, as on ``pip install -e .`` without the test extra."""
    monkeypatch.setitem(sys.modules, "tabulate", None)
    with pytest.raises(ImportError):
        pd.DataFrame({"a": [1]}).to_markdown()


def fake_fit_profile(gpu: str, data_dir: object = None, **kw: object) -> tuple[object, ...]:
    """A fit's outputs in miniature, telling its progress as the real one does."""
    progress = kw["progress"]
    assert callable(progress)
    progress(f"{gpu}: fitting GEMM bf16, holding out whole weight shapes (5-fold)")
    errors = pd.DataFrame(
        {
            "gpu": [gpu] * 2,
            "engine": ["vllm"] * 2,
            "family": ["gemm bf16"] * 2,
            "method": ["calibrated", "uncalibrated"],
            "median_ape": [0.025, 0.35],
            "p90_ape": [0.09, 0.91],
            "points": [400, 400],
        }
    )
    measured = np.geomspace(1e-5, 1e-2, 20)
    points = pd.DataFrame(
        {"family": "gemm bf16", "measured_s": measured, "predicted_s": 1.03 * measured}
    )
    return None, errors, points


def test_kernel_report_needs_no_tabulate_and_says_what_it_is_doing(
    no_tabulate: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(fit, "fit_profile", fake_fit_profile)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["calibrate", "report", "--gpu", "h100-sxm", "--out", out])
    assert result.exit_code == 0, result.output
    assert "h100-sxm: fitting GEMM bf16, holding out whole weight shapes (5-fold) ..." in (
        result.stderr
    )
    report = (out / "report.md").read_text()
    assert report.startswith("# Calibration of h100-sxm: error on held-out data")
    assert re.search(r"^\| gpu +\| engine +\| family +\|", report, re.MULTILINE)
    assert "gemm bf16" in report
    assert (out / "predicted_vs_measured.png").is_file()


def test_no_module_of_the_package_needs_tabulate() -> None:
    """pandas' to_markdown imports tabulate, which only the test extra installs."""
    for path in sorted((ROOT / "cbsim").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert ".to_markdown(" not in text, path
        assert not re.search(r"^\s*(import|from) tabulate", text, re.MULTILINE), path


def test_markdown_table() -> None:
    frame = pd.DataFrame(
        {"gpu": ["h100-sxm", "a|b"], "median": [2.5123, np.nan], "points": [10, 2000]}
    )
    assert markdown_table(frame).splitlines() == [
        "| gpu      | median | points |",
        "|----------|-------:|-------:|",
        "| h100-sxm | 2.5123 |     10 |",
        "| a\\|b     |    nan |   2000 |",
    ]


@pytest.mark.slow
def test_real_kernel_report_without_tabulate(no_tabulate: None, tmp_path: Path) -> None:
    """The whole fit of one GPU (minutes), with its progress, on a base install."""
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["calibrate", "report", "--gpu", "l40s", "--out", out])
    assert result.exit_code == 0, result.output
    steps = [line for line in result.stderr.splitlines() if line.endswith(" ...")]
    assert any("GEMM" in s for s in steps) and any("attention" in s for s in steps)
    assert "gemm bf16" in (out / "report.md").read_text()
