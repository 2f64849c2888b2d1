"""The ``cbsim`` command line: run, validate, cost, exit codes and error messages."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner, Result

import cbsim
import cbsim.cli.commands as cli_module
from cbsim.cli.commands import cli, main, run_id
from cbsim.common.output_folders import publish_new_folder
from cbsim.run.results import RUN_RESULT

TINY = """\
name: tiny
seed: 1
workload:
  num_requests: 30
  arrival: {kind: poisson, rate: 5}
  prompt_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 16}
cluster: {model: llama-3-8b, gpu: h100-sxm}
"""

RESULT_FILES = (
    "requests.parquet",
    "iterations.parquet",
    "timeseries.parquet",
    "summary.json",
    "scenario.yaml",
)


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_user_error(result: Result, *fragments: str) -> None:
    """Exit 2, one ``error:`` line on stderr containing every fragment, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# --------------------------------------------------------------------------- run


def test_run_writes_results_and_prints_only_the_directory_when_quiet(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = invoke("run", scenario_file, "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{out}\n"
    assert result.stderr == ""
    for name in RESULT_FILES:
        assert (out / name).is_file(), name
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 30
    assert len(pd.read_parquet(out / "iterations.parquet")) > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 30
    assert cbsim.load_scenario(out / "scenario.yaml").name == "tiny"


def test_run_prints_a_summary_table(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", scenario_file, "--out", out)
    assert result.exit_code == 0, result.output
    for label in ("completed", "30 / 30", "throughput", "goodput", "TTFT", "TPOT", "E2E"):
        assert label in result.stdout
    assert "preemptions" in result.stdout and "wall time" in result.stdout
    assert f"results: {out}" in result.stdout


def test_set_overrides_reach_the_written_scenario(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke(
        "run",
        scenario_file,
        "--out",
        out,
        "-q",
        "--set",
        "scheduler.kind=sarathi",
        "--set",
        "scheduler.chunk_size=256",
    )
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["scheduler"]["kind"] == "sarathi"
    assert written["scheduler"]["chunk_size"] == 256


def test_seed_changes_results_and_same_seed_repeats_them(
    scenario_file: Path, tmp_path: Path
) -> None:
    frames = {}
    for label, seed in (("a", "1"), ("b", "1"), ("c", "7")):
        out = tmp_path / label
        assert invoke("run", scenario_file, "--out", out, "-q", "--seed", seed).exit_code == 0
        frames[label] = pd.read_parquet(out / "requests.parquet")
    pd.testing.assert_frame_equal(frames["a"], frames["b"])
    assert not frames["a"]["arrival_s"].equals(frames["c"]["arrival_s"])
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["seed"] == 7


def test_default_output_directory_is_results_name_run_id(
    scenario_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", scenario_file, "-q", "--seed", "3")
    assert result.exit_code == 0, result.output
    written = Path(result.stdout.strip())
    assert re.fullmatch(r"results/tiny/\d{8}-\d{6}-s3", written.as_posix())
    assert (tmp_path / written / "summary.json").is_file()


def test_run_id_and_collision_suffixes(tmp_path: Path) -> None:
    rid = run_id(5, datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC))
    assert rid == "20250304-050607-s5"
    dirs = [
        publish_new_folder(tmp_path / "results" / "x", rid, RUN_RESULT, lambda folder: None)
        for _ in range(3)
    ]
    assert [d.name for d in dirs] == [rid, f"{rid}-2", f"{rid}-3"]


def test_progress_callback_path(
    scenario_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_module, "progress_enabled", lambda quiet: True)
    out = tmp_path / "out"
    result = invoke("run", scenario_file, "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "summary.json").is_file()


def test_interrupt_exits_130_and_writes_nothing(
    scenario_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "simulate", interrupted)
    out = tmp_path / "out"
    result = invoke("run", scenario_file, "--out", out)
    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted"
    assert not out.exists()
    monkeypatch.chdir(tmp_path)
    assert invoke("run", scenario_file).exit_code == 130
    assert not (tmp_path / "results").exists()


def test_out_that_is_a_file_is_a_usage_error(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.write_text("x")
    result = invoke("run", scenario_file, "--out", out)
    assert result.exit_code == 2
    assert "is a file" in result.stderr and "Traceback" not in result.output
    assert out.read_text() == "x"


def test_out_may_replace_a_result_directory_but_not_other_data(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    assert invoke("run", scenario_file, "--out", out, "-q", "--seed", "9").exit_code == 0
    assert json.loads((out / "summary.json").read_text())["seed"] == 9
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me")
    assert_user_error(invoke("run", scenario_file, "--out", precious), "thesis.tex")
    assert (precious / "thesis.tex").read_text() == "keep me"


# --------------------------------------------------------------------------- validate


def test_validate_ok(scenario_file: Path) -> None:
    result = invoke("validate", scenario_file)
    assert result.exit_code == 0, result.output
    first, second, *described = result.stdout.strip().splitlines()
    assert first == f"OK: {scenario_file} (tiny)"
    for fragment in ("llama-3-8b", "h100-sxm", "tp=1", "1 replica", "vllm", "speculation off"):
        assert fragment in second
    requests, prompts, outputs, cluster, kv_line, breakdown = described
    assert requests.startswith("requests: 30 over ") and "poisson arrivals" in requests
    assert prompts == "prompt tokens: p50 128, p90 128, p99 128, max 128"
    assert outputs == "output tokens: p50 16, p90 16, p99 16, max 16"
    assert cluster == "cluster: llama-3-8b on h100-sxm, tp 1 x 1 replica = 1 GPU in total"
    # the KV cache as the engine prints it at start-up, and where each GPU's memory goes
    assert kv_line.startswith("KV cache: GPU KV cache size: ")
    assert "Maximum concurrency for 8,192 tokens per request" in kv_line
    assert "requests of the mean 144 tokens at once" in breakdown
    assert "gpu_memory_utilization 0.900: weights 14.96" in breakdown


def test_validate_with_overrides(scenario_file: Path) -> None:
    result = invoke(
        "validate",
        scenario_file,
        "--set",
        "speculative.enabled=true",
        "--set",
        "cluster.replicas=2",
    )
    assert result.exit_code == 0, result.output
    assert "2 replicas" in result.stdout and "speculation on" in result.stdout


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("command", ["validate", "run"])
def test_unknown_key_names_the_field(command: str, scenario_file: Path, tmp_path: Path) -> None:
    extra = ["--out", str(tmp_path / "o")] if command == "run" else []
    result = invoke(command, scenario_file, "--set", "scheduler.max_batch_sise=4", *extra)
    assert_user_error(result, str(scenario_file), "scheduler.max_batch_sise", "unknown key")
    assert not (tmp_path / "o").exists()


def test_negative_rate_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "neg.yaml"
    path.write_text(TINY.replace("rate: 5", "rate: -5"))
    assert_user_error(invoke("run", path, "-q"), str(path), "workload.arrival.rate")


def test_unknown_gpu_lists_known_ones(scenario_file: Path) -> None:
    result = invoke("validate", scenario_file, "--set", "cluster.gpu=h100")
    assert_user_error(result, "cluster.gpu", "'h100'", "h100-sxm", "a100-80gb", "mi300x")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert_user_error(invoke("run", missing), str(missing), "file not found")
    assert_user_error(invoke("validate", missing), "file not found")


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\nworkload: {\n")
    assert_user_error(invoke("validate", path), str(path), "invalid YAML")


def test_malformed_override(scenario_file: Path) -> None:
    assert_user_error(invoke("validate", scenario_file, "--set", "noequals"), "--set")


def test_usage_errors_exit_2(scenario_file: Path) -> None:
    assert invoke("run").exit_code == 2
    assert invoke("frobnicate").exit_code == 2
    assert invoke("run", scenario_file, "--seed", "many").exit_code == 2


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert cbsim.__version__ in result.stdout


# --------------------------------------------------------------------------- cost


def test_cost_table_prints_ops_and_total() -> None:
    result = invoke(
        "cost", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", "1x1000,1x2000"
    )
    assert result.exit_code == 0, result.output
    assert "mlp" in result.stdout and "lm_head" in result.stdout
    assert re.search(r"total iteration time: \d+\.\d+ ms", result.stdout)


def test_cost_json_sums_to_total_and_matches_the_cost_model() -> None:
    result = invoke(
        "cost",
        "-m",
        "llama-3-8b",
        "-g",
        "h100-sxm",
        "--tp",
        "2",
        "--batch",
        "1x1000,1x2000",
        "--batch",
        "512x0",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    total = data.pop("total_s")
    assert total > 0
    assert math.isclose(sum(data.values()), total, rel_tol=1e-9)
    # the command prices like the Python API's default: vLLM's kernels and overhead on this GPU
    model = cbsim.cost.CostModel(model="llama-3-8b", gpu="h100-sxm", tp=2)
    expected = model.iteration_time([(1, 1000), (1, 2000), (512, 0)])
    assert math.isclose(total, expected, rel_tol=1e-12)


def test_cost_decode_context_and_prefill_shorthands() -> None:
    args = ["cost", "-m", "llama-3-8b", "-g", "h100-sxm", "--json"]
    short = json.loads(invoke(*args, "--decode", "3", "--context", "500", "--prefill", "64").stdout)
    long = json.loads(invoke(*args, "--batch", "1x500,1x500,1x500,64x0").stdout)
    assert short == long


@pytest.mark.parametrize(
    "extra",
    [
        ["--batch", "1y1000"],
        ["--batch", "0x10"],
        ["--decode", "4"],
        ["--context", "100", "--prefill", "8"],
        [],
    ],
)
def test_cost_bad_batches_are_usage_errors(extra: list[str]) -> None:
    result = invoke("cost", "-m", "llama-3-8b", "-g", "h100-sxm", *extra)
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_cost_unknown_gpu() -> None:
    result = invoke("cost", "-m", "llama-3-8b", "-g", "h100", "--prefill", "8")
    assert_user_error(result, "--gpu", "h100-sxm")


# --------------------------------------------------------------------------- entry point


def test_main_exit_codes(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["validate", str(scenario_file)])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("OK: ")

    with pytest.raises(SystemExit) as info:
        main(["validate", str(tmp_path / "nope.yaml")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "file not found" in err

    with pytest.raises(SystemExit) as info:
        main(["run"])
    assert info.value.code == 2
    assert "Missing argument" in capsys.readouterr().err

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0


def test_main_interrupt(
    scenario_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "load_scenario", interrupted)
    with pytest.raises(SystemExit) as info:
        main(["validate", str(scenario_file)])
    assert info.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_real_subprocess(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sub"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "cbsim.cli.commands"]
    done = subprocess.run(
        [*cmd, "run", str(scenario_file), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{out}\n"
    assert (out / "requests.parquet").is_file()

    bad = subprocess.run(
        [*cmd, "run", str(scenario_file), "--set", "scheduler.max_batch_sise=1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: ") and "scheduler.max_batch_sise" in bad.stderr


# --------------------------------------------------------------------------- engines in the CLI


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--engine", "tensorrt"], "--engine"),
        (["--dtype", "fp4"], "--dtype"),
        (["--tp", "3"], "--tp"),
    ],
)
def test_cost_rejects_bad_engine_dtype_and_tp(extra: list[str], field: str) -> None:
    result = invoke("cost", "-m", "llama-3-8b", "-g", "h100-sxm", "--decode", "4", "--context",
                    "100", *extra)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert field in result.output and "Traceback" not in result.output
    if extra[0] == "--engine":
        assert "tensorrt-llm" in result.output  # the known names are listed


def test_cost_kv_dtype_and_fp4_on_blackwell() -> None:
    args = ["cost", "-m", "llama-3.1-8b", "--decode", "64", "--context", "2000", "--json"]
    bf16 = json.loads(invoke(*args, "-g", "h100-sxm", "--dtype", "fp8").stdout)
    fp8 = json.loads(invoke(*args, "-g", "h100-sxm", "--dtype", "fp8", "--kv-dtype", "fp8").stdout)
    assert fp8["attn_decode"] < bf16["attn_decode"]
    fp4 = invoke(*args, "-g", "b200", "--dtype", "fp4")
    assert fp4.exit_code == 0, fp4.output
    fp8_b200 = json.loads(invoke(*args, "-g", "b200", "--dtype", "fp8").stdout)
    assert json.loads(fp4.stdout)["mlp"] < fp8_b200["mlp"]


def test_cost_engine_none_has_no_overhead() -> None:
    data = json.loads(
        invoke(
            "cost",
            "-m",
            "llama-3-8b",
            "-g",
            "h100-sxm",
            "--decode",
            "8",
            "--context",
            "100",
            "--engine",
            "none",
            "--json",
        ).stdout
    )
    assert data["overhead"] == 0.0


def test_run_and_validate_print_scheduler_warnings(tmp_path: Path) -> None:
    path = tmp_path / "tight.yaml"
    path.write_text(
        "name: tight\nworkload:\n  num_requests: 10\n  arrival: {kind: poisson, rate: 5}\n"
        "  prompt_tokens: {kind: fixed, value: 512}\n  output_tokens: {kind: fixed, value: 8}\n"
        "scheduler: {kind: orca, max_batched_tokens: 512}\n"
    )
    checked = invoke("validate", path)
    assert checked.exit_code == 0
    assert "warning: scheduler.max_batched_tokens (512) leaves no room" in checked.stderr
    ran = invoke("run", path, "--out", tmp_path / "out", "--quiet")
    assert ran.exit_code == 0
    assert "warning:" in ran.stderr


def test_fp4_scenario_needs_blackwell(tmp_path: Path) -> None:
    path = tmp_path / "fp4.yaml"
    path.write_text(
        "workload:\n  num_requests: 4\n  arrival: {kind: poisson, rate: 5}\n"
        "  prompt_tokens: {kind: fixed, value: 64}\n  output_tokens: {kind: fixed, value: 8}\n"
        "cluster: {model: llama-3.1-8b, gpu: h100-sxm, dtype: fp4}\n"
    )
    result = invoke("validate", path)
    assert result.exit_code == 2
    assert "cluster.dtype" in result.output and "FP4" in result.output
    ok = invoke("validate", path, "--set", "cluster.gpu=b200")
    assert ok.exit_code == 0, ok.output


# --------------------------------------------------------------------------- names, limits, catalog


def test_catalog_lists_every_name_with_facts() -> None:
    from cbsim.catalog.hardware import GPU_NAMES
    from cbsim.catalog.models import MODEL_NAMES
    from cbsim.cost.engine_profile import engine_names
    from cbsim.workload.traces import TRACE_NAMES

    result = invoke("catalog")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for name in (*GPU_NAMES, *MODEL_NAMES, *engine_names(), *TRACE_NAMES):
        assert any(line.split()[:1] == [name] for line in lines), name
    assert "80 GiB at 3.35 TB/s" in result.stdout and "8.03B parameters" in result.stdout
    only = invoke("catalog", "GPUs")
    assert only.exit_code == 0 and "models" not in only.stdout


def test_names_compare_without_case_and_unknown_ones_suggest(scenario_file: Path) -> None:
    result = invoke("validate", scenario_file, "--set", "cluster.gpu=H100-SXM")
    assert result.exit_code == 0, result.output
    assert "on h100-sxm" in result.stdout
    assert_user_error(
        invoke("validate", scenario_file, "--set", "cluster.gpu=h100"),
        str(scenario_file),
        "cluster.gpu",
        "did you mean 'h100-sxm' or 'h100-pcie'?",  # three H100s now: SXM first
    )


def test_validate_refuses_what_run_refuses_before_saying_ok(tmp_path: Path) -> None:
    path = tmp_path / "late.yaml"
    path.write_text(
        "workload: {trace: {path: azure-conv-2023, start_s: 1.0e+7}}\n"
        "cluster: {model: llama-3-8b, gpu: h100-sxm}\n"
    )
    for args in (("validate", path), ("run", path, "--out", tmp_path / "o")):
        result = invoke(*args)
        assert_user_error(result, str(path), "workload.trace", "holds no requests")
        assert "OK" not in result.stdout


def test_validate_warns_about_a_doubtful_time_unit(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,input_length,output_length\n"
        + "".join(f"{i * 0.01:.2f},100,10\n" for i in range(500))
    )
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {{trace: {{path: {trace}}}}}\n")
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output
    assert "requests: 500 over 4.99 s" in result.stdout
    assert "warning: trace file" in result.stderr and "read as seconds" in result.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--decode", "1000000000", "--context", "10"), "--decode"),
        (("--decode", "4", "--context", "10000000000"), "--context"),
        (("--prefill", "99999999999"), "--prefill"),
        (("--batch", "1x99999999999"), "--batch"),
    ],
)
def test_cost_options_are_bounded(args: tuple[str, ...], option: str) -> None:
    result = invoke("cost", "--model", "llama-3-8b", "--gpu", "h100-sxm", *args)
    assert result.exit_code == 2, result.output
    assert option in result.output and "must be between" in result.output
    assert "Traceback" not in result.output


def test_cost_prices_mixture_of_experts_configs(
    tmp_path: Path,
) -> None:
    mixtral = {
        "architectures": ["MixtralForCausalLM"],
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
    }
    config = tmp_path / "config.json"
    config.write_text(json.dumps(mixtral))
    result = invoke("cost", "--model", config, "--gpu", "h100-sxm", "--tp", "2", "--prefill", "8")
    assert result.exit_code == 0, result.output
    assert "moe" in result.output
    gpt_oss = {
        **mixtral,
        "architectures": ["GptOssForCausalLM"],
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "sliding_window": 128,
    }
    config.write_text(json.dumps(gpt_oss))
    result = invoke("cost", "--model", config, "--gpu", "h100-sxm", "--tp", "2", "--prefill", "8")
    assert result.exit_code == 0, result.output


INTERRUPT_WHILE_IMPORTING = """
import importlib, sys

class CtrlC:
    # Ctrl-C pressed while the command imports its dependencies (pandas: the first heavy one)
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["cbsim", "--help"]
module, _, function = {entry!r}.partition(":")
getattr(importlib.import_module(module), function)()
"""


def test_ctrl_c_while_starting_exits_130_without_a_traceback() -> None:
    """The seconds the ``cbsim`` console script spends importing pandas, numba and the rest are
    covered by its Ctrl-C handling: ``interrupted`` and status 130, as during a run (not a
    traceback and death by SIGINT)."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["scripts"]
    code = INTERRUPT_WHILE_IMPORTING.format(entry=scripts["cbsim"])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=pyproject.parent,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "interrupted"


def test_commands_import_their_modules_only_when_run() -> None:
    """The subcommands' modules (the calibration reports' above all) load when looked up, so
    `cbsim run` does not pay for them; `--help` still lists every command."""
    import subprocess
    import sys

    code = (
        "import sys, cbsim.cli.commands\n"
        "heavy = ['cbsim.studies.calibration.e2e_report', 'cbsim.studies.report', 'cbsim.studies.sweep.runner', 'cbsim.studies.plan']\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "print(sorted(cbsim.cli.commands.cli.list_commands(None)))\n"
        "print(sorted(cbsim.cli.commands.calibrate.list_commands(None)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]"
    for name in ("bench", "capacity", "catalog", "plan", "report", "run", "spec-advise", "sweep"):
        assert f"'{name}'" in out[1]
    assert "'e2e'" in out[2] and "'measure'" in out[2]
