"""``cbsim calibrate compare``: the shipped profiles against measurements taken on real GPUs.

``measurements/`` holds what ``cbsim calibrate measure`` wrote on an H100 and an H200 (see its
README). The GEMMs there are cuBLAS, the library vLLM's bf16 linear layers run, timed the way
engines run them (CUDA-graph replays), on a machine and software stack the shipped profiles never
saw: a held-out check of the GEMM calibration that a refit can fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.cost.profile import load_profile
from cbsim.cost.roofline import CostModel
from cbsim.studies.calibration.compare import LAYER_PARTS, compare_measurements, layer_predictions

ROOT = Path(__file__).resolve().parent.parent / "measurements"
GRAPH_TIMED = sorted(p for p in ROOT.glob("*/cuda_graph/*") if (p / "meta.json").is_file())


def test_the_measurements_are_there() -> None:
    assert {p.parts[-3] for p in GRAPH_TIMED} == {"h100-sxm", "h200"}
    assert len(GRAPH_TIMED) == 17  # five models on the H100, twelve on the H200


@pytest.mark.parametrize("folder", GRAPH_TIMED, ids=lambda p: f"{p.parts[-3]}-{p.name}")
def test_shipped_gemm_fit_predicts_measured_cublas(folder: Path) -> None:
    """Measured 3.5-9.1% median, 9.7-17.6% P90 over the seventeen folders."""
    gpu = folder.parts[-3]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["timer"] == "cuda_graph"
    assert get_gpu(gpu).name in {"h100-sxm", "h200"}
    frame = compare_measurements(gpu, folder).set_index("table")
    gemm = frame.loc["gemm"]
    assert gemm["points"] == 70
    assert gemm["median_ape_pct"] <= 10.0
    assert gemm["p90_ape_pct"] <= 20.0
    assert 0.85 <= gemm["median_ratio"] <= 1.1


def test_layer_prediction_is_the_breakdowns_layer_parts() -> None:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    profile = load_profile("h100-sxm")
    assert profile is not None
    iterations = pd.DataFrame(
        {
            "num_prefill_tokens": [512, 0],
            "num_decode_tokens": [128, 32],
            "batch_size": [130, 32],
            "decode_context_tokens": [1024, 2048],
            "latency_ms": [1.0, 1.0],
            "layers_timed": [4, 4],
        }
    )
    predicted = layer_predictions(iterations, model, gpu, profile, "bf16")
    cost = CostModel(model, gpu, calibration=profile, engine=None)
    mixed = cost.breakdown([(256, 0), (256, 0)] + [(1, 1024)] * 128)
    decode = cost.breakdown([(1, 2048)] * 32)
    for got, parts in zip(predicted, (mixed, decode), strict=True):
        expected = sum(parts[key] for key in LAYER_PARTS) / model.num_layers
        assert got == pytest.approx(expected, rel=1e-12)
        assert got < sum(parts.values()) / model.num_layers  # LM head left out


def test_a_dtype_without_a_fit_is_skipped_not_guessed(tmp_path: Path) -> None:
    source = GRAPH_TIMED[0]
    folder = tmp_path / "fp32"
    folder.mkdir()
    gemm = pd.read_parquet(source / "gemm.parquet")
    gemm.assign(dtype="fp32").to_parquet(folder / "gemm.parquet")
    frame = compare_measurements("h100-sxm", folder)
    assert list(frame["table"]) == ["gemm"]
    assert frame.loc[0, "note"] == "no fit for this dtype"
    assert np.isnan(frame.loc[0, "median_ape_pct"])


def test_bad_folders_are_cbsim_errors(tmp_path: Path) -> None:
    with pytest.raises(CbsimError, match="not a folder of measurements"):
        compare_measurements("h100-sxm", tmp_path / "missing")
    with pytest.raises(CbsimError, match="no gemm, decode_attention"):
        compare_measurements("h100-sxm", tmp_path)
    shutil.copy(GRAPH_TIMED[0] / "iterations.parquet", tmp_path / "iterations.parquet")
    with pytest.raises(CbsimError, match=r"meta\.json"):
        compare_measurements("h100-sxm", tmp_path)


def test_compare_command() -> None:
    folder = next(p for p in GRAPH_TIMED if p.parts[-3] == "h100-sxm")
    result = CliRunner().invoke(
        cli, ["calibrate", "compare", "-g", "h100-sxm", "--data", str(folder)], terminal_width=160
    )
    assert result.exit_code == 0, result.output
    for table in ("gemm", "decode_attention", "prefill_attention", "iterations"):
        assert table in result.output
    missing = CliRunner().invoke(cli, ["calibrate", "compare", "-g", "h100-sxm", "--data", "/nope"])
    assert missing.exit_code == 2
    assert "not a folder of measurements" in missing.output
