"""``cbsim calibrate measure``: timing a tiny model on the CPU, the output schema, and errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from cbsim.catalog.models import get_model
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.data import load_table
from cbsim.studies.calibration.measure import (
    OUTPUT_FILES,
    IterationBatch,
    MeasureGrid,
    default_grid,
    measure,
    measure_command,
)

TINY_CONFIG = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
}
KERNEL_TABLES = ("gemm", "decode_attention", "prefill_attention")


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_CONFIG))
    return path


def layer_shapes(config: Path) -> set[tuple[int, int]]:
    """(n, k) of QKV, O, gate+up, down and the LM head."""
    s = get_model(str(config))
    return {
        (s.q_dim + 2 * s.kv_dim, s.hidden_size),
        (s.hidden_size, s.q_dim),
        (2 * s.intermediate_size, s.hidden_size),
        (s.hidden_size, s.intermediate_size),
        (s.vocab_size, s.hidden_size),
    }


def check_output(out: Path, config: Path, dtype: str = "bf16", device: str = "cpu") -> None:
    assert {p.name for p in out.iterdir()} == OUTPUT_FILES | {outputs.MARKER}
    tables = {t: load_table(t, "unused", data_dir=out) for t in KERNEL_TABLES}
    for table in tables.values():
        assert (table["latency_ms"] > 0).all()
    gemm = tables["gemm"]
    grid = default_grid("quick", device)
    assert set(gemm["m"]) == set(grid.gemm_m)
    assert set(gemm["dtype"]) == {dtype}
    for m in grid.gemm_m:
        at_m = gemm[gemm["m"] == m]
        assert set(zip(at_m["n"], at_m["k"], strict=True)) == layer_shapes(config)
    assert set(gemm["op"]) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}
    for name in ("decode_attention", "prefill_attention"):
        table = tables[name]
        assert set(table["num_heads"]) == {4}
        assert set(table["num_kv_heads"]) == {2}
        assert set(table["head_dim"]) == {16}
        assert set(table["kv_dtype"]) == {dtype}
    decode = tables["decode_attention"]
    assert set(zip(decode["batch_size"], decode["tokens"], strict=True)) == {
        (b, c) for b in grid.decode_batch for c in grid.decode_context
    }
    iterations = pd.read_parquet(out / "iterations.parquet")
    assert list(iterations.columns) == [
        "num_prefill_tokens",
        "num_decode_tokens",
        "batch_size",
        "decode_context_tokens",
        "latency_ms",
        "layers_timed",
    ]
    assert len(iterations) == len(grid.iteration_batches)
    assert (iterations["latency_ms"] > 0).all()
    assert (iterations["layers_timed"] == 1).all()
    mixed = iterations[
        (iterations["num_prefill_tokens"] > 0) & (iterations["num_decode_tokens"] > 0)
    ]
    assert len(mixed) == 1
    meta = json.loads((out / "meta.json").read_text())
    assert meta["model"] == "tiny"
    assert meta["dtype"] == dtype
    assert meta["device"] == ("cuda:0" if device == "cuda" else "cpu")
    assert meta["grid"] == "quick"
    assert meta["torch_version"]
    assert meta["date"]
    assert meta["device_name"]
    assert meta["rows"]["gemm"] == len(gemm)


def test_measure_function_writes_loadable_tables(tiny_config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "calib"
    lines: list[str] = []
    written = measure(
        str(tiny_config),
        "cpu",
        out,
        grid="quick",
        repeats=3,
        warmup=1,
        threads=1,
        log=lines.append,
    )
    assert written == out
    check_output(out, tiny_config)
    assert json.loads((out / "meta.json").read_text())["cpu_threads"] == 1
    assert any("gemm" in line for line in lines)
    # no temporary directories are left beside the result
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib", "tiny"]


def test_measure_command_via_click(tiny_config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "calib"
    result = CliRunner().invoke(
        measure_command,
        [
            *("--model", str(tiny_config), "--device", "cpu", "--out", str(out), "--quick"),
            *("--repeats", "3", "--warmup", "1", "--dtype", "fp32", "--threads", "1"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    check_output(out, tiny_config, dtype="fp32")


def test_measure_replaces_an_earlier_measurement(tiny_config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "calib"
    measure(str(tiny_config), "cpu", out, dtype="fp32", grid="quick", repeats=1, warmup=0)
    measure(str(tiny_config), "cpu", out, dtype="fp32", grid="quick", repeats=1, warmup=0)
    check_output(out, tiny_config, dtype="fp32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib", "tiny"]


def test_measure_custom_grid(tiny_config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    grid = MeasureGrid(
        name="custom",
        gemm_m=(2,),
        decode_batch=(2,),
        decode_context=(8, 4096, 8192),  # 8192 is past max_position_embeddings (4096): skipped
        decode_max_tokens=1 << 20,
        prefill_batch=(1,),
        prefill_length=(8,),
        prefill_max_tokens=1 << 20,
        iteration_batches=(IterationBatch(prefill_lengths=(4, 6), decodes=3, context=10),),
        iteration_layers=5,  # capped at the model's 2 layers
    )
    out = measure(str(tiny_config), "cpu", tmp_path / "o", dtype="fp32", grid=grid, repeats=1)
    decode = load_table("decode_attention", "x", data_dir=out)
    assert sorted(decode["tokens"]) == [8, 4096]
    iterations = pd.read_parquet(out / "iterations.parquet")
    assert iterations.to_dict("records")[0] | {"latency_ms": 0} == {
        "num_prefill_tokens": 10,
        "num_decode_tokens": 3,
        "batch_size": 5,
        "decode_context_tokens": 10,
        "latency_ms": 0,
        "layers_timed": 2,
    }


def test_without_torch_the_error_names_the_extra(
    tiny_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes ``import torch`` raise ImportError
    with pytest.raises(CbsimError, match=r'pip install "cbsim\[measure\]"'):
        measure(str(tiny_config), "cpu", tmp_path / "o", grid="quick")
    result = CliRunner().invoke(
        measure_command, ["-m", str(tiny_config), "--device", "cpu", "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")
    assert 'pip install "cbsim[measure]"' in result.stderr
    assert not (tmp_path / "o").exists()


def test_cuda_requested_without_a_gpu(tiny_config: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(CbsimError, match="CUDA was requested") as info:
        measure(str(tiny_config), "cuda", tmp_path / "o", grid="quick")
    assert info.value.field == "device"
    result = CliRunner().invoke(
        measure_command, ["-m", str(tiny_config), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "CUDA was requested" in result.stderr


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"model": "no-such-model"}, "model: unknown model 'no-such-model'"),
        ({"dtype": "fp8"}, "dtype: unknown dtype"),
        ({"grid": "huge"}, "grid: unknown grid"),
        ({"repeats": 0}, "repeats: must be"),
        ({"warmup": -1}, "warmup: must be"),
        ({"threads": 0}, "threads: must be"),
        ({"timer": "wall"}, "timer: unknown timer"),
    ],
)
def test_bad_arguments_are_cbsim_errors(
    tiny_config: Path, tmp_path: Path, kwargs: dict[str, object], fragment: str
) -> None:
    """Checked before torch is imported: these need no torch."""
    args: dict[str, object] = {"model": str(tiny_config), "device": "cpu", "out": tmp_path / "o"}
    args |= kwargs
    with pytest.raises(CbsimError, match=fragment):
        measure(**args)  # type: ignore[arg-type]
    assert not (tmp_path / "o").exists()


def test_bad_device_is_a_cbsim_error(tiny_config: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    for device in ("tpu", "cuda:x", ""):
        with pytest.raises(CbsimError, match="device: unknown device"):
            measure(str(tiny_config), device, tmp_path / "o", grid="quick")
    result = CliRunner().invoke(
        measure_command, ["-m", str(tiny_config), "-d", "tpu", "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert result.stderr == "error: device: unknown device 'tpu'; use cuda, cuda:N or cpu\n"


def test_bad_model_config_is_a_cbsim_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(CbsimError, match=r"config\.json: num_hidden_layers: missing"):
        measure(str(bad), "cpu", tmp_path / "o", grid="quick")
    result = CliRunner().invoke(measure_command, ["-m", "nope", "-d", "cpu", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown model 'nope'" in result.stderr


def test_out_holding_other_files_is_refused_before_measuring(
    tiny_config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CbsimError, match=r"cbsim did not write \(notes\.txt\)"):
        measure(str(tiny_config), "cpu", out, grid="quick")
    assert (out / "notes.txt").read_text() == "mine"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(CbsimError, match="not a directory"):
        measure(str(tiny_config), "cpu", a_file, grid="quick")


@pytest.mark.parametrize("timer", ["graph", "events"])
def test_measure_on_a_gpu(tiny_config: Path, tmp_path: Path, timer: str) -> None:
    """Only where a GPU is: both ways of timing write the same tables and say which they used."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    out = tmp_path / "calib"
    measure(str(tiny_config), "cuda", out, grid="quick", repeats=3, warmup=1, timer=timer)
    check_output(out, tiny_config, device="cuda")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["timer"] == f"cuda_{timer}"
    if timer == "graph":
        # tiny kernels: every point fits the budget eight times over
        assert meta["graph_instances_max"] == 8
    else:
        assert meta["graph_instances_max"] is None
