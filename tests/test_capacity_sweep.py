"""The grid behind the 70B capacity plan runs on Ray and gives the same summaries as locally."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from cbsim.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "scenarios" / "sweeps" / "capacity-70b-grid.yaml"


def small_grid() -> dict[str, object]:
    """The shipped grid (GPU × TP × speculation) on a 10-second window, so it runs in seconds."""
    sweep = yaml.safe_load(GRID.read_text())
    sweep["base"] = str((GRID.parent / sweep["base"]).resolve())
    sweep["grid"]["workload.duration_s"] = [10]
    sweep["grid"]["cluster.gpu"] = ["h100-sxm", "h200"]
    sweep["grid"]["cluster.tp"] = [4, 8]
    return sweep


def test_capacity_grid_on_ray_matches_local(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'cbsim[ray]')")
    local = run_sweep(small_grid(), backend="local", workers=2, out=tmp_path / "local")
    remote = run_sweep(small_grid(), backend="ray", workers=2, out=tmp_path / "ray")
    assert len(local) == 8  # 2 GPUs × 2 TP × speculation on/off
    summary = ["key", "completed", "ttft_p99_s", "tpot_p99_s", "output_tokens_per_s", "mean_k"]
    pd.testing.assert_frame_equal(
        local[summary].sort_values("key").reset_index(drop=True),
        remote[summary].sort_values("key").reset_index(drop=True),
    )
    # speculation is really on in half the points
    assert (local.loc[local["speculative.enabled"] == True, "mean_k"] > 0).all()  # noqa: E712
