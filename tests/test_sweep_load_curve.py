"""A concurrency sweep is drawn as a load curve, and ``cbsim sweep`` prints its points (issue 27,
defect 4: "no rate-like override column"; the CLI printed only "5 succeeded")."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml
from click.testing import CliRunner

from cbsim.studies.report.markdown import render_markdown
from cbsim.studies.report.sweep import sweep_report
from cbsim.studies.sweep.runner import sweep_command

BASE = {
    "name": "closed",
    "seed": 1,
    "workload": {
        "num_requests": 24,
        "arrival": {"kind": "closed_loop", "concurrency": 1},
        "prompt_tokens": {"kind": "fixed", "value": 128},
        "output_tokens": {"kind": "fixed", "value": 16},
    },
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
    "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
}


def test_concurrency_sweep_prints_its_points_and_draws_a_load_curve(tmp_path: Path) -> None:
    sweep = {"name": "conc", "base": BASE, "grid": {"workload.arrival.concurrency": [1, 4, 16]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    out = tmp_path / "out"
    # a pipe's width, whatever COLUMNS the test runner (or its workers) set
    result = CliRunner(env={"COLUMNS": None}).invoke(
        sweep_command, [str(path), "--out", str(out), "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "3 succeeded" in result.stdout
    for header in ("workload.arrival.concurrency", "stable", "TTFT p99 ms", "SLO (p99)"):
        assert header in result.stdout, header
    assert result.stdout.count(" met") >= 3  # one verdict per point, nothing squeezed away

    frame = pd.read_parquet(out / "sweep.parquet")
    text, figures = render_markdown(sweep_report(frame, directory=out, name="conc"))
    assert "No rate-like override column" not in text
    assert "against workload.arrival.concurrency" in text
    assert any("load-" in name for name in figures)
    assert "SLO (p99)" in text and "stable" in text
