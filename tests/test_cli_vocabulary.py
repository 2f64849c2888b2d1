"""The spellings campaign: every flag of ``vllm bench serve --help`` on ``cbsim bench``, and AI
Configurator's ``cli default`` flags on ``cbsim plan``; none is refused with an error a user of
those tools would not expect.

Each bench case runs a tiny simulation (three prompts of 16 tokens) with one flag added, and
checks that the run succeeds, that an ignored flag is named on the ``note:`` line and that a
simulated one does what vLLM's does. The plan cases stop the command once every option is read
(the search is replaced by a sentinel), and one AI Configurator command runs a whole plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from cbsim.cli.commands import cli
from cbsim.studies.bench.cli import bench_command
from cbsim.studies.bench.vllm_flags import IGNORED

TINY = ["bench", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--num-prompts", "3",
        "--input-len", "16", "--output-len", "3"]  # fmt: skip

_SERVE_HELP = """
--trust-remote-code --seed --num-prompts --dataset-name --no-stream --dataset-path
--no-oversample --skip-chat-template --enable-multimodal-chat --disable-shuffle --label
--backend --base-url --host --port --endpoint --header --max-concurrency --model --input-len
--output-len --tokenizer --tokenizer-mode --use-beam-search --logprobs --request-rate
--burstiness --probe-request-rate --disable-tqdm --num-warmups --profile --save-result
--save-detailed --append-result --metadata --result-dir --result-filename --ignore-eos
--self-timed --no-self-timed --percentile-metrics --metric-percentiles --goodput
--request-id-prefix --served-model-name --lora-modules --lora-assignment --ramp-up-strategy
--ramp-up-start-rps --ramp-up-end-rps --ready-check-timeout-sec --chat-template-kwargs
--extra-body --skip-tokenizer-init --insecure --plot-timeline --timeline-itl-thresholds
--plot-dataset-stats --custom-output-len --custom-ensure-client-side-data
--spec-bench-output-len --spec-bench-category --sonnet-input-len --sonnet-output-len
--sonnet-prefix-len --sharegpt-output-len --timed-trace-chunk-hash-size
--timed-trace-sec-multiplier --timed-trace-label-timestamp --timed-trace-label-input-length
--timed-trace-label-output-length --timed-trace-label-hash-ids --blazedit-min-distance
--blazedit-max-distance --asr-max-audio-len-sec --asr-min-audio-len-sec --random-input-len
--random-output-len --random-range-ratio --random-prefix-len --random-batch-size --no-reranker
--random-mm-base-items-per-request --random-mm-num-mm-items-range-ratio
--random-mm-limit-mm-per-prompt --random-mm-bucket-config --hf-subset --hf-split --hf-name
--hf-output-len --bfcl-categories --prefix-repetition-prefix-len --prefix-repetition-suffix-len
--prefix-repetition-num-prefixes --prefix-repetition-output-len --speed-bench-dataset-subset
--speed-bench-output-len --speed-bench-category --top-p --top-k --min-p --temperature
--frequency-penalty --presence-penalty --repetition-penalty --dataset
"""
VLLM_SERVE_FLAGS = _SERVE_HELP.split()
"""Every flag of ``vllm bench serve --help`` (docs.vllm.ai/en/latest/cli/bench/serve/, 2026:
``vllm/benchmarks/serve.py`` and the dataset parser), and ``--dataset``, its older name of
``--dataset-path``."""

EXAMPLE_VALUES: dict[str, list[str]] = {
    "--header": ["x-info=1", "y=2"],
    "--lora-modules": ["adapter-a", "adapter-b"],
    "--extra-body": ['{"chat_template_kwargs": {"enable_thinking": false}}'],
    "--chat-template-kwargs": ['{"thinking": true}'],
    "--random-mm-limit-mm-per-prompt": ['{"image": 3, "video": 0}'],
    "--random-mm-bucket-config": ["{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}"],
    "--lora-assignment": ["round-robin"],
    "--tokenizer-mode": ["auto"],
    "--timeline-itl-thresholds": ["25,50"],
    "--speed-bench-dataset-subset": ["throughput_1k"],
}


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _ok(result: Result) -> None:
    assert result.exit_code == 0, result.output
    assert "error:" not in result.stderr, result.stderr


def _notes(result: Result) -> str:
    return "\n".join(line for line in result.stderr.splitlines() if line.startswith("note:"))


def _command_flags(command: click.Command) -> set[str]:
    flags: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            flags.update(f for f in (*param.opts, *param.secondary_opts) if f.startswith("--"))
    return flags


def test_every_vllm_bench_serve_flag_is_a_flag_of_cbsim_bench() -> None:
    missing = set(VLLM_SERVE_FLAGS) - _command_flags(bench_command)
    assert not missing, sorted(missing)


@pytest.mark.parametrize("item", IGNORED, ids=lambda i: i.flag)
def test_every_flag_without_meaning_runs_and_is_named_as_ignored(item: Any) -> None:
    values = [] if item.takes == "flag" else EXAMPLE_VALUES.get(item.flag, ["1"])
    result = invoke(*TINY, item.flag, *values)
    _ok(result)
    notes = _notes(result)
    assert "ignored in a simulation" in notes and item.flag in notes, notes
    assert len(notes.splitlines()) == 1  # one line


def test_many_ignored_flags_make_one_note_line() -> None:
    result = invoke(*TINY, "--backend", "openai-chat", "--host", "0.0.0.0", "--port", "8001",
                    "--endpoint", "/v1/chat/completions", "--tokenizer", "t", "--ignore-eos",
                    "--trust-remote-code", "--disable-tqdm", "--temperature", "0")  # fmt: skip
    _ok(result)
    ignored = [line for line in result.stderr.splitlines() if "ignored in a simulation" in line]
    assert len(ignored) == 1
    for flag in ("--host", "--port", "--endpoint", "--tokenizer", "--ignore-eos",
                 "--trust-remote-code", "--disable-tqdm", "--temperature"):  # fmt: skip
        assert flag in ignored[0]
    assert "requested length" in ignored[0]  # --ignore-eos: what a simulation always does


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A timed_trace (Mooncake) file: timestamps in ms, lengths, hash ids."""
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    rows = [(0, 40, 3, [1]), (300, 80, 2, [1, 2]), (700, 24, 4, [3]), (900, 40, 2, [1])]
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
            + "\n"
            for t, i, o, h in rows
        )
    )
    return path


SIMULATED_CASES: list[list[str]] = [
    ["--model", "meta-llama/Llama-3.2-1B-Instruct"],
    ["--backend", "vllm"],
    ["--backend", "sglang"],
    ["--backend", "trtllm"],
    ["--label", "mine"],
    ["--seed", "7"],
    ["--num-prompts", "4"],
    ["--random-input-len", "20", "--random-output-len", "4"],
    ["--random-range-ratio", "0.5"],
    ["--random-range-ratio", '{"input": 0.5, "output": 0.2}'],
    ["--random-prefix-len", "8"],
    ["--dataset-name", "random"],
    ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "16",
     "--prefix-repetition-suffix-len", "8", "--prefix-repetition-num-prefixes", "2",
     "--prefix-repetition-output-len", "2"],
    ["--dataset-name", "sonnet", "--sonnet-input-len", "40", "--sonnet-prefix-len", "10",
     "--sonnet-output-len", "2"],
    ["--request-rate", "50"],
    ["--request-rate", "inf"],
    ["--max-concurrency", "2"],
    ["--request-rate", "50", "--max-concurrency", "2"],
    ["--request-rate", "50", "--burstiness", "0.5"],
    ["--request-rate", "50", "--burstiness", "inf"],
    ["--request-rate", "50", "--burstiness", "inf", "--max-concurrency", "2"],
    ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "20"],
    ["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "20",
     "--max-concurrency", "2"],
    ["--percentile-metrics", "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue",
     "--max-concurrency", "2", "--request-rate", "50"],
    ["--metric-percentiles", "25,50,99.9"],
    ["--goodput", "ttft:300", "tpot:50", "e2el:1000"],
    ["--slo", "ttft_p99=2s,tpot=50ms"],
]  # fmt: skip


@pytest.mark.parametrize("case", SIMULATED_CASES, ids=lambda c: " ".join(c)[:60])
def test_every_simulated_flag_runs(case: list[str]) -> None:
    _ok(invoke(*TINY, *case))


@pytest.mark.parametrize(
    "name",
    ["sharegpt", "burstgpt", "random-mm", "random-rerank", "hf", "custom", "custom_mm",
     "custom_audio", "custom_image", "spec_bench", "speed_bench", "txt-slices", "bfcl"],
)  # fmt: skip
def test_datasets_of_text_run_as_random_prompts_and_say_so(name: str) -> None:
    result = invoke(*TINY, "--dataset-name", name, "--dataset-path", "data.json")
    _ok(result)
    assert f"--dataset-name {name}: its prompts are text" in _notes(result)


@pytest.mark.parametrize(
    "flag", [["--self-timed"], ["--timed-trace-chunk-hash-size", "16"],
             ["--timed-trace-sec-multiplier", "0.001"]],
)  # fmt: skip
def test_trace_flags_without_a_trace_are_noted(flag: list[str]) -> None:
    """vLLM refuses --self-timed without timed_trace; cbsim runs and says it has no effect."""
    result = invoke(*TINY, *flag)
    _ok(result)
    assert "only --dataset-name timed_trace reads it" in _notes(result)


@pytest.mark.parametrize(
    ("args", "noted"),
    [
        (["--sonnet-input-len", "300"], "--sonnet-input-len (the sonnet dataset's)"),
        (["--dataset-name", "sonnet", "--sonnet-prefix-len", "4", "--random-input-len", "5"],
         "--random-input-len"),
        (["--dataset-name", "sonnet", "--sonnet-prefix-len", "4",
          "--prefix-repetition-prefix-len", "5"],
         "--prefix-repetition-prefix-len (the prefix_repetition dataset's)"),
        (["--dataset-name", "prefix_repetition", "--sonnet-prefix-len", "5"], "--sonnet-prefix-len"),
    ],
)  # fmt: skip
def test_another_datasets_length_flag_is_noted(args: list[str], noted: str) -> None:
    result = invoke(*TINY, *args)
    _ok(result)
    assert noted in _notes(result) and "does not read" in _notes(result)


def test_a_sonnet_length_below_1_is_blamed_on_its_own_flag() -> None:
    args = [a for a in TINY if a not in ("--input-len", "16")]
    result = invoke(*args, "--dataset-name", "sonnet", "--sonnet-input-len", "-5")
    assert result.exit_code == 2, result.output
    assert "error: --sonnet-input-len: must be at least 1 token" in result.stderr


def test_the_named_datasets_and_the_text_datasets_flags_are_not_noted() -> None:
    for args in (["--dataset-name", "sharegpt", "--random-input-len", "5"],
                 ["--dataset-name", "sonnet", "--sonnet-input-len", "40", "--sonnet-prefix-len", "4"]):  # fmt: skip
        result = invoke(*TINY, *args)
        _ok(result)
        assert "does not read" not in _notes(result)


def test_an_unknown_dataset_is_refused_as_vllm_refuses_it() -> None:
    result = invoke(*TINY, "--dataset-name", "randon")
    assert result.exit_code == 2 and "--dataset-name" in result.stderr
    assert "did you mean 'random'" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [[], ["--self-timed"], ["--timed-trace-chunk-hash-size", "16"],
     ["--timed-trace-sec-multiplier", "0.001"], ["--no-self-timed", "--request-rate", "20"],
     ["--no-self-timed", "--max-concurrency", "2"]],
)  # fmt: skip
def test_timed_trace_replays_the_trace(trace_file: Path, extra: list[str]) -> None:
    result = invoke(*TINY, "--dataset-name", "timed_trace", "--dataset-path", trace_file, *extra)
    _ok(result)
    assert "Successful requests:" in result.stdout


def test_timed_trace_reads_vllms_second_multiplier(tmp_path: Path, trace_file: Path) -> None:
    """Timestamps 0..900 in ms: with multiplier 1 (vLLM's seconds) the replay lasts 900 s."""

    def duration(*extra: str) -> float:
        path = tmp_path / f"r{len(extra)}.json"
        result = invoke(*TINY, "--num-prompts", "4", "--dataset-name", "timed_trace",
                        "--dataset", trace_file, "--save-result", path, *extra)  # fmt: skip
        _ok(result)
        return float(json.loads(path.read_text())["duration"])

    assert duration() < 2.0  # read as milliseconds (the Mooncake convention)
    assert duration("--timed-trace-sec-multiplier", "1") > 900.0


def test_vllms_spellings_underscores_equals_and_several_values(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    result = invoke(*TINY, "--num_prompts=4", "--random_range_ratio", "0.2", "--goodput",
                    "ttft:300", "tpot:50", "--metadata", "version=0.3.3", "tp=1", "--header",
                    "a=1", "b=2", "--save-result", path)  # fmt: skip
    _ok(result)
    data = json.loads(path.read_text())
    assert data["num_prompts"] == 4 and data["version"] == "0.3.3"
    assert data["request_goodput"] is not None
    assert data["tp"] == 1  # cbsim's own tp wins over a --metadata key of the same name


def test_save_result_as_vllm_names_the_file(tmp_path: Path) -> None:
    result = invoke(*TINY, "--request-rate", "20", "--max-concurrency", "2", "--save-result",
                    "--result-dir", tmp_path)  # fmt: skip
    _ok(result)
    (written,) = tmp_path.iterdir()
    assert written.name.startswith("vllm-20.0qps-concurrency2-llama-3.2-1b-")
    named = invoke(*TINY, "--save-result", "--result-dir", tmp_path, "--result-filename", "x.json")
    _ok(named)
    assert (tmp_path / "x.json").is_file()


def test_append_result_adds_a_line(tmp_path: Path) -> None:
    path = tmp_path / "all.json"
    for _ in range(2):
        _ok(invoke(*TINY, "--save-result", "--result-filename", path, "--append-result"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["completed"] == 3 for line in lines)


def test_rate_with_max_concurrency_is_vllms_semaphore(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    args = ["--num-prompts", "12", "--request-rate", "200", "--max-concurrency", "2",
            "--save-detailed", "--percentile-metrics", "ttft,client_queue_time"]  # fmt: skip
    _ok(invoke(*TINY, *args, "--save-result", path))
    data = json.loads(path.read_text())
    assert data["max_concurrency"] == 2 and data["request_rate"] == 200.0
    assert data["max_concurrent_requests"] <= 2
    assert max(data["queue_times"]) > 0 and data["mean_client_queue_time_ms"] > 0


def test_ramp_up_records_vllms_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    ramp = ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps", "40"]
    _ok(invoke(*TINY, "--num-prompts", "30", *ramp, "--save-result", path, "--save-detailed"))
    data = json.loads(path.read_text())
    assert (data["ramp_up_strategy"], data["ramp_up_start_rps"], data["ramp_up_end_rps"]) == (
        "linear",
        2,
        40,
    )
    starts = data["start_times"]
    first, last = starts[9] - starts[0], starts[29] - starts[20]  # gaps shrink as the rate rises
    assert last < first


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5",
          "--request-rate", "3"], "--request-rate"),
        (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0",
          "--ramp-up-end-rps", "5"], "--ramp-up-start-rps"),
        (["--ramp-up-strategy", "linear"], "--ramp-up-start-rps"),
        (["--dataset-name", "random", "--dataset-path", "x.json"], "--dataset-path"),
        (["--dataset-name", "timed_trace"], "--dataset-path"),
        (["--metadata", "novalue"], "--metadata"),
        (["--dataset-name", "sonnet", "--sonnet-prefix-len", "-3"], "--sonnet-prefix-len"),
        (["--dataset-name", "sonnet", "--input-len", "-5"], "--input-len"),
        (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "-1"],
         "--prefix-repetition-prefix-len"),
        (["--random-prefix-len", "-1"], "--random-prefix-len"),
    ],
)  # fmt: skip
def test_what_vllm_refuses_is_refused_naming_the_flag(args: list[str], field: str) -> None:
    result = invoke(*TINY, *args)
    assert result.exit_code == 2 and f"error: {field}" in result.stderr, result.stderr


def test_burstiness_inf_sends_at_constant_gaps(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    _ok(invoke(*TINY, "--num-prompts", "5", "--request-rate", "10", "--burstiness", "inf",
               "--save-result", path, "--save-detailed"))  # fmt: skip
    starts = json.loads(path.read_text())["start_times"]
    assert starts == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert json.loads(path.read_text())["burstiness"] is None  # inf: plain JSON has none


def test_hugging_face_ids_and_ai_configurator_names_on_bench() -> None:
    result = invoke("bench", "--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--gpu",
                    "h200_sxm", "--engine", "trtllm", "--num-prompts", "3", "--input-len", "16",
                    "--output-len", "3")  # fmt: skip
    _ok(result)


def test_a_missing_gpu_says_why_it_is_needed() -> None:
    result = invoke("bench", "--model", "llama-3.2-1b", "--num-prompts", "3")
    assert result.exit_code == 2 and "--gpu: required" in result.stderr


# --------------------------------------------------------------------------- AI Configurator

AIC_DEFAULT = ["plan", "--model", "Qwen/Qwen3-32B", "--total-gpus", "8", "--system", "h200_sxm",
               "--backend", "trtllm", "--isl", "4000", "--osl", "1000", "--ttft", "2000ms",
               "--tpot", "30ms"]  # fmt: skip

AIC_FLAGS: list[list[str]] = [
    ["--model-path", "Qwen/Qwen3-32B"],
    ["--total_gpus", "8"],
    ["--model_path", "Qwen/Qwen3-32B"],
    ["--backend", "vllm"],
    ["--backend", "sglang"],
    ["--backend", "auto"],
    ["--backend-version", "1.0"],
    ["--backend_version", "1.0"],
    ["--decode-system", "h100_sxm"],
    ["--database-mode", "HYBRID"],
    ["--request-latency", "12000ms"],
    ["--strict-sla"],
    ["--prefix", "500"],
    ["--nextn", "2"],
    ["--nextn-accept-rates", "0.85,0.3,0,0,0"],
    ["--enable-chunked-prefill"],
    ["--free-gpu-memory-fraction", "0.9"],
    ["--max-seq-len", "5000"],
    ["--enable-wideep"],
    ["--moe-backend", "deepep_moe"],
    ["--top-n", "5"],
    ["--systems-paths", "default"],
    ["--deployment-target", "dynamo-j2"],
    ["--generator-config", "g.yaml"],
    ["--generator-set", "ServiceConfig.model_path=x"],
    ["--debug"],
    ["--no-color"],
    ["--system", "b200_sxm"],
    ["--system", "gb200_sxm"],
    ["--system", "a100_sxm"],
    ["--system", "l40s"],
]  # fmt: skip


class _Reached(Exception):
    """Raised in place of the search: every option was read."""


@pytest.fixture
def stop_before_search(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def plan_deployment(base: dict[str, Any], slo: dict[str, float], **kw: Any) -> None:
        seen.update(base=base, slo=slo, **kw)
        raise _Reached

    monkeypatch.setattr("cbsim.studies.plan.cli.plan_deployment", plan_deployment)
    return seen


@pytest.mark.parametrize("case", AIC_FLAGS, ids=lambda c: " ".join(c))
def test_every_ai_configurator_flag_is_read(
    case: list[str], tmp_path: Path, stop_before_search: dict[str, Any]
) -> None:
    result = invoke(*AIC_DEFAULT, *case, "--save-dir", tmp_path / "plan")
    assert isinstance(result.exception, _Reached), result.output
    assert "error:" not in result.stderr
    assert stop_before_search["space"].gpus[0] in ("h200", "b200", "gb200", "a100-80gb", "l40s")


def test_ai_configurator_command_reads_as_ai_configurator_means_it(
    tmp_path: Path, stop_before_search: dict[str, Any]
) -> None:
    result = invoke(*AIC_DEFAULT, "--request-latency", "12s", "--backend-version", "1.0",
                    "--top-n", "3", "--save-dir", tmp_path / "plan")  # fmt: skip
    assert isinstance(result.exception, _Reached), result.output
    seen = stop_before_search
    assert seen["base"]["cluster"]["engine"] == "tensorrt-llm@1.0"
    assert seen["base"]["cluster"]["model"] == "Qwen/Qwen3-32B"
    assert seen["space"].gpus == ["h200"] and seen["space"].max_gpus == 8
    assert seen["slo"] == pytest.approx({"ttft_p99_s": 2.0, "tpot_p99_s": 0.03, "e2e_p99_s": 12.0})
    assert "--top-n (every layout is printed)" in result.stderr


def test_bare_ai_configurator_milliseconds_are_read_as_seconds_and_warned(
    tmp_path: Path, stop_before_search: dict[str, Any]
) -> None:
    args = [a if a not in ("2000ms", "30ms") else a.removesuffix("ms") for a in AIC_DEFAULT]
    result = invoke(*args, "--save-dir", tmp_path / "plan")
    assert isinstance(result.exception, _Reached)
    assert stop_before_search["slo"]["ttft_p99_s"] == 2000.0  # seconds: never guessed
    assert "--ttft = 2000 s" in result.stderr and "--tpot = 30 s" in result.stderr


def test_an_ai_configurator_command_plans(tmp_path: Path) -> None:
    """Its spellings end to end, on a small search."""
    result = invoke("plan", "--model", "meta-llama/Llama-3.2-1B-Instruct", "--total_gpus", "1",
                    "--system", "h100_sxm", "--backend", "trtllm", "--isl", "200", "--osl", "20",
                    "--ttft", "500ms", "--tpot", "50ms", "--save-dir", tmp_path / "plan",
                    "--strict-sla", "--no-disagg", "--refine", "0", "--seeds", "1",
                    "--window-s", "5", "--tolerance", "0.5", "--workers", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["best"]["launch"]["engine"] == "tensorrt-llm"
