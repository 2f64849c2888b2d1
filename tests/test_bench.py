"""``cbsim bench``: vLLM's flags in, vLLM's result block and result JSON out.

The saved JSON is compared key for key with real ``vllm bench serve`` result files
(``tests/data/benchmarks/``); the figures are checked for conservation (every prompt completed or
failed, token totals), the per-request ITL rebuilt from the iterations against cbsim's own
every-token ITL, sweeps against single runs, and ``cbsim calibrate e2e`` reads a file it wrote.
A hypothesis test draws flag combinations: valid ones run and keep those invariants, invalid ones
exit 2 naming the flag.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.studies.bench import BenchOptions, LoadPoint, run_bench
from cbsim.studies.bench.load import arrival_spec, length_spec, load_points
from cbsim.studies.bench.run import save_paths
from cbsim.studies.bench.vllm_result import DETAILED_KEYS
from cbsim.studies.calibration.benchmarks import read_benchmarks
from cbsim.studies.calibration.per_request import is_per_request_file

BENCHMARKS = Path(__file__).parent / "data" / "benchmarks"
CLOSED_LOOP = BENCHMARKS / "vllm_closed_loop.json"  # default flags, --max-concurrency 32
DETAILED = BENCHMARKS / "vllm_open_loop_detailed.json"  # --save-detailed, percentiles 50,99, e2el

METADATA = {"simulator", "model", "gpu", "tp", "dtype", "engine", "seed"}
"""The keys ``vllm bench serve --metadata simulator=cbsim model=M gpu=G tp=N dtype=D engine=E
seed=S`` adds: the deployment a real result cannot record (``cbsim calibrate e2e`` reads it) and
the mark that the file is simulated. Nothing of the real files is left out: every one of their
keys makes sense for a simulated run."""

BASE = ["bench", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
SMALL = [*BASE, "--input-len", "256", "--output-len", "24", "--num-prompts", "24"]


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def bench_json(tmp_path: Path, *args: str, name: str = "r.json") -> dict[str, Any]:
    path = tmp_path / name
    result = invoke(*SMALL, *args, "--save-result", path)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def real(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# --------------------------------------------------------------------------- vLLM's keys


def test_keys_equal_a_real_closed_loop_result(tmp_path: Path) -> None:
    """vLLM's defaults (``--percentile-metrics ttft,tpot,itl``, P99) at a concurrency cap give
    exactly the keys of a real closed-loop result file, in its order, with its JSON types."""
    ours = bench_json(tmp_path, "--max-concurrency", "8", "--percentile-metrics", "ttft,tpot,itl")
    theirs = real(CLOSED_LOOP)
    assert set(ours) - METADATA == set(theirs)
    assert [k for k in ours if k not in METADATA] == list(theirs)
    for key, value in theirs.items():
        assert type(ours[key]) is type(value), key


def test_keys_equal_a_real_detailed_result(tmp_path: Path) -> None:
    """``--save-detailed`` with P50 and P99 of ttft, tpot, itl and e2el in an open loop: the keys
    of a real detailed result, per-request lists as lists (``itls`` a list per request)."""
    ours = bench_json(
        tmp_path,
        "--request-rate", "4", "--save-detailed", "--metric-percentiles", "50,99",
    )  # fmt: skip
    theirs = real(DETAILED)
    assert set(ours) - METADATA == set(theirs)
    for key, value in theirs.items():
        assert type(ours[key]) is type(value), key
    assert all(isinstance(gaps, list) for gaps in ours["itls"])
    assert len(ours["ttfts"]) == ours["num_prompts"]


def test_default_adds_e2el_to_vllms_keys(tmp_path: Path) -> None:
    """By default the E2EL section is reported too (vLLM needs ``--percentile-metrics``)."""
    ours = bench_json(tmp_path, "--max-concurrency", "4")
    e2el = {f"{s}_e2el_ms" for s in ("mean", "median", "std", "p99")}
    assert set(ours) - METADATA == set(real(CLOSED_LOOP)) | e2el


def test_prints_vllms_block() -> None:
    result = invoke(*SMALL, "--request-rate", "8")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "============ Serving Benchmark Result ============" in lines
    for label in (
        "Successful requests:", "Benchmark duration (s):", "Total input tokens:",
        "Total generated tokens:", "Request throughput (req/s):",
        "Output token throughput (tok/s):", "Total Token throughput (tok/s):",
        "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", "Mean TPOT (ms):",
        "Mean ITL (ms):", "P99 ITL (ms):", "Mean E2EL (ms):", "P99 E2EL (ms):",
    ):  # fmt: skip
        assert any(line.startswith(label) and line[40:41] == " " for line in lines), label
    assert "Successful requests:                     24" in lines


# --------------------------------------------------------------------------- figures


def _check_conserved(data: dict[str, Any], num_prompts: int) -> None:
    """Every prompt completed or failed; totals are the successful requests' lengths."""
    assert data["completed"] + data["failed"] == num_prompts
    ok = [e == "" for e in data["errors"]]
    inputs = zip(data["input_lens"], ok, strict=True)
    assert data["total_input_tokens"] == sum(n for n, good in inputs if good)
    assert data["total_output_tokens"] == sum(data["output_lens"])
    for good, n, gaps, ttft, latency in zip(
        ok, data["output_lens"], data["itls"], data["ttfts"], data["latencies"], strict=True
    ):
        if good:
            assert len(gaps) == n - 1
            assert math.isclose(ttft + sum(gaps), latency, rel_tol=1e-9, abs_tol=1e-9)
    if data["duration"] > 0:
        rate = data["completed"] / data["duration"]
        assert math.isclose(data["request_throughput"], rate, rel_tol=1e-12)


def test_conservation(tmp_path: Path) -> None:
    data = bench_json(tmp_path, "--max-concurrency", "6", "--save-detailed")
    assert data["completed"] == 24 and data["failed"] == 0
    assert data["total_input_tokens"] == 24 * 256
    assert data["total_output_tokens"] == 24 * 24
    assert data["max_concurrent_requests"] == 6
    _check_conserved(data, 24)


def test_itl_is_cbsims_every_token_itl() -> None:
    """Without speculation the rebuilt chunk gaps are every output token's gap: their mean,
    median and P99 are the summary's ``itl_*`` (vllm, sglang without mixed prefill, sarathi)."""
    for engine, overrides in (
        ("vllm", ()),
        ("sglang", ()),
        ("vllm", ("scheduler.kind=sarathi",)),
    ):
        options = BenchOptions(
            model="llama-3.1-8b", gpu="h100-sxm", engine=engine, input_len=400, output_len=40,
            num_prompts=40, random_range_ratio=0.5, overrides=overrides,
        )  # fmt: skip
        (run,) = run_bench(options, [LoadPoint(request_rate=20.0)])
        assert run.records.approximated == 0
        gaps = np.concatenate([g for g in run.records.itls if len(g)])
        summary = run.results.summary
        assert math.isclose(gaps.mean(), summary["itl_mean_s"], rel_tol=1e-9)
        assert math.isclose(np.median(gaps), summary["itl_p50_s"], rel_tol=1e-9)
        assert math.isclose(np.percentile(gaps, 99), summary["itl_p99_s"], rel_tol=1e-9)
        assert math.isclose(run.benchmark["mean_itl_ms"], 1000 * summary["itl_mean_s"])


def test_preempted_requests_get_equal_gaps() -> None:
    """A request that sat out steps gets equal shares of its decode time: its gap count and sum
    stay exact, so the mean ITL is still the summary's."""
    options = BenchOptions(
        model="llama-3.1-8b", gpu="h100-sxm", input_len=2000, output_len=100, num_prompts=60,
        overrides=("cluster.gpu_memory_utilization=0.3",),
    )  # fmt: skip
    (run,) = run_bench(options, [LoadPoint()])
    assert int(run.results.requests["preemptions"].sum()) >= 1
    assert run.records.approximated >= 1
    assert all(len(g) == 99 for g in run.records.itls)
    gaps = np.concatenate(run.records.itls)
    assert math.isclose(gaps.mean(), run.results.summary["itl_mean_s"], rel_tol=1e-9)


def test_failed_requests_are_vllms_failures(tmp_path: Path) -> None:
    """A prompt beyond the model's context is rejected: a failure, with its reason."""
    path = tmp_path / "f.json"
    result = invoke(
        *BASE, "--num-prompts", "3", "--input-len", "200000", "--save-result", path,
        "--save-detailed",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "requests failed" in result.stderr
    data = real(path)
    assert (data["completed"], data["failed"]) == (0, 3)
    assert all(e.startswith("rejected") for e in data["errors"])
    assert data["output_lens"] == [0, 0, 0] and data["total_input_tokens"] == 0


def test_one_prompt_at_several_concurrencies_takes_its_own_time(tmp_path: Path) -> None:
    """Duration is vLLM's wall time from the start to the last response: one prompt's latency
    at every cap, with the throughputs of that duration, in each appended record."""
    path = tmp_path / "one.json"
    args = ["--num-prompts", "1", "--max-concurrency", "1,4,16", "--request-rate", "inf"]
    result = invoke(*BASE, *args, "--save-result", path, "--append-result", "--save-detailed")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["max_concurrency"] for r in records] == [1, 4, 16]
    for data in records:
        assert data["completed"] == 1
        assert data["duration"] == data["start_times"][0] + data["latencies"][0] > 0
        assert data["output_throughput"] == data["total_output_tokens"] / data["duration"]


def test_goodput(tmp_path: Path) -> None:
    loose = bench_json(tmp_path, "--goodput", "ttft:100000 tpot:100000", name="a.json")
    tight = bench_json(tmp_path, "--goodput", "ttft:0.001", name="b.json")
    assert loose["request_goodput"] == pytest.approx(loose["request_throughput"])
    assert tight["request_goodput"] == 0.0


# --------------------------------------------------------------------------- loads


def test_loads_as_vllm_sends_them() -> None:
    assert arrival_spec(LoadPoint(), 1.0) == {"kind": "offline"}
    assert arrival_spec(LoadPoint(request_rate=3.0), 1.0) == {"kind": "poisson", "rate": 3.0}
    assert arrival_spec(LoadPoint(request_rate=3.0), 4.0) == {
        "kind": "gamma",
        "rate": 3.0,
        "cv": 0.5,
    }
    assert arrival_spec(LoadPoint(max_concurrency=8), 0.5) == {
        "kind": "closed_loop",
        "concurrency": 8,
    }
    assert length_spec(100, 0.0, option="--input-len", floor_one=False) == {
        "kind": "fixed",
        "value": 100,
    }
    assert length_spec(101, 0.5, option="--input-len", floor_one=False) == {
        "kind": "uniform",
        "low": 50,
        "high": 152,
    }
    assert length_spec(1, 0.9, option="--output-len", floor_one=True)["low"] == 1
    with pytest.raises(CbsimError, match="--random-range-ratio"):
        length_spec(1, 0.9, option="--input-len", floor_one=False)
    # a finite rate behind a cap: vLLM's semaphore in front of the open loop
    assert load_points([2.0], [4]) == [LoadPoint(request_rate=2.0, max_concurrency=4)]
    assert arrival_spec(LoadPoint(request_rate=2.0, max_concurrency=4), 1.0) == {
        "kind": "poisson",
        "rate": 2.0,
        "max_concurrency": 4,
    }
    with pytest.raises(CbsimError, match="--max-concurrency"):
        load_points([2.0, 3.0], [4, 8])  # a sweep varies one of them
    assert load_points([math.inf, 2.0, 2.0], []) == [LoadPoint(), LoadPoint(request_rate=2.0)]
    points = load_points([], [1, 16])
    assert [p.label for p in points] == ["concurrency1", "concurrency16"]
    assert save_paths(Path("x/s.json"), [LoadPoint(), LoadPoint(request_rate=2.5)]) == [
        Path("x/s-infqps.json"),
        Path("x/s-2.5qps.json"),
    ]


def test_sweep_files_and_folder_match_single_runs(tmp_path: Path) -> None:
    """A rate sweep writes one result per point, the same figures as each value run alone, and
    with --out a sweep folder with a rate column."""
    result = invoke(
        *SMALL, "--request-rate", "4,inf", "--save-result", tmp_path / "s.json",
        "--out", tmp_path / "sweep",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "request_rate  completed" in result.stdout
    alone = bench_json(tmp_path, "--request-rate", "4", name="alone.json")
    swept = real(tmp_path / "s-4qps.json")
    for key in ("duration", "completed", "mean_ttft_ms", "p99_itl_ms", "mean_e2el_ms"):
        assert swept[key] == alone[key], key
    assert real(tmp_path / "s-infqps.json")["request_rate"] == "inf"
    import pandas as pd

    table = pd.read_parquet(tmp_path / "sweep" / "sweep.parquet")
    assert len(table) == 2 and "workload.arrival.rate" in table.columns


def test_out_single_point_is_a_run_result(tmp_path: Path) -> None:
    from cbsim.run.results import Results

    result = invoke(*SMALL, "--max-concurrency", "3", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert Results.read(tmp_path / "run").summary["completed"] == 24


def test_never_overwrites_a_measured_result(tmp_path: Path) -> None:
    measured = tmp_path / "measured.json"
    measured.write_text(CLOSED_LOOP.read_text())
    result = invoke(*SMALL, "--save-result", measured)
    assert result.exit_code == 2 and "--save-result" in result.stderr
    assert measured.read_text() == CLOSED_LOOP.read_text()
    ours = tmp_path / "ours.json"
    for _ in range(2):  # a file cbsim bench wrote is replaced
        assert invoke(*SMALL, "--save-result", ours).exit_code == 0


# --------------------------------------------------------------------------- round trip


def test_calibrate_e2e_reads_a_bench_result(tmp_path: Path) -> None:
    """The saved file reads as a measured vLLM benchmark, deployment included; the detailed
    one as per-request data; ``cbsim calibrate e2e`` fits a profile from it."""
    path = tmp_path / "bench.json"
    assert invoke(*SMALL, "--max-concurrency", "4", "--save-result", path).exit_code == 0
    data = real(path)
    (row,) = read_benchmarks([path]).to_dict("records")
    assert (row["engine"], row["gpu"], row["model"], row["dtype"]) == (
        "vllm",
        "h100-sxm",
        "llama-3.1-8b",
        "bf16",
    )
    assert (row["isl"], row["osl"], row["concurrency"]) == (256, 24, 4)
    assert row["ttft_mean_s"] == pytest.approx(data["mean_ttft_ms"] / 1000)
    assert row["output_tokens_per_s"] == pytest.approx(data["output_throughput"])
    detailed = tmp_path / "detailed.json"
    saved = invoke(*SMALL, "--request-rate", "8", "--save-detailed", "--save-result", detailed)
    assert saved.exit_code == 0, saved.output
    assert is_per_request_file(detailed)
    result = invoke(
        "calibrate", "e2e", "--engine", "vllm", "--data", path, "--out", tmp_path / "p.json"
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.json").is_file()


# --------------------------------------------------------------------------- fuzz

VALID = st.fixed_dictionaries(
    {
        "--input-len": st.integers(1, 600),
        "--output-len": st.integers(1, 40),
        "--num-prompts": st.integers(1, 16),
        "--random-range-ratio": st.sampled_from(["0", "0.3", "0.9"]),
        "--seed": st.integers(0, 2**31),
        "--engine": st.sampled_from(["vllm", "sglang", "tensorrt-llm", "none"]),
        "--dtype": st.sampled_from(["bf16", "fp8"]),
        "--metric-percentiles": st.sampled_from(["99", "50,90,99", "99.9"]),
        "--percentile-metrics": st.sampled_from(
            ["ttft,tpot,itl", "ttft,tpot,itl,e2el", "e2el,client_queue_time"]
        ),
    }
)
LOAD = st.one_of(
    st.lists(st.sampled_from(["0.5", "5", "40", "inf"]), min_size=1, max_size=2).map(
        lambda rates: ["--request-rate", ",".join(rates)]
    ),
    st.lists(st.integers(1, 20), min_size=1, max_size=2).map(
        lambda caps: ["--max-concurrency", ",".join(map(str, caps))]
    ),
)
INVALID = st.sampled_from(
    [
        ("--input-len", "0"),
        ("--output-len", "-3"),
        ("--num-prompts", "0"),
        ("--random-range-ratio", "1.5"),
        ("--request-rate", "fast"),
        ("--request-rate", "-1"),
        ("--max-concurrency", "0"),
        ("--burstiness", "0"),
        ("--tp", "3"),
        ("--gpu", "h100"),
        ("--model", "llama-9"),
        ("--engine", "vllmm"),
        ("--seed", "-2"),
        ("--metric-percentiles", "200"),
        ("--percentile-metrics", "ttfb"),
        ("--goodput", "ttft=3"),
    ]
)


def _expected_keys(flags: dict[str, Any], capped: bool) -> set[str]:
    """vLLM's keys for these flags: the real file's without its metric keys, then ``mean_``,
    ``median_``, ``std_`` and each percentile of every reported metric (the client queue only
    behind a concurrency cap; E2EL including it never: cbsim caps only an infinite rate)."""
    keys = set(real(CLOSED_LOOP)) - {k for k in real(CLOSED_LOOP) if k.endswith("_ms")}
    percentiles = flags["--metric-percentiles"].split(",")
    for metric in flags["--percentile-metrics"].split(","):
        if metric == "client_queue_time" and not capped:
            continue
        stats = ["mean", "median", "std", *(f"p{p}" for p in percentiles)]
        keys |= {f"{s}_{metric}_ms" for s in stats}
    return keys | METADATA


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(flags=VALID, load=LOAD)
def test_fuzz_valid_flags(tmp_path: Path, flags: dict[str, Any], load: list[str]) -> None:
    path = tmp_path / "f.json"
    args = [*BASE, *(x for kv in flags.items() for x in (kv[0], str(kv[1]))), *load]
    result = invoke(*args, "--save-result", path, "--save-detailed")
    if math.floor(flags["--input-len"] * (1 - float(flags["--random-range-ratio"]))) < 1:
        assert result.exit_code == 2 and "--random-range-ratio" in result.stderr  # as vLLM
        return
    assert result.exit_code == 0, result.output
    capped = load[0] == "--max-concurrency"
    points = load_points([], [int(c) for c in load[1].split(",")]) if capped else None
    values = points or load_points([float(r) for r in load[1].split(",")], [])
    files = save_paths(path, values)
    for point, file in zip(values, files, strict=True):
        data = real(file)
        assert set(data) == _expected_keys(flags, capped) | set(DETAILED_KEYS), point
        _check_conserved(data, flags["--num-prompts"])


@settings(max_examples=30, deadline=None)
@given(flags=VALID, load=LOAD, bad=INVALID)
def test_fuzz_invalid_flags_name_the_flag(
    flags: dict[str, Any], load: list[str], bad: tuple[str, str]
) -> None:
    """Valid flags and one bad one (given last, so it wins): exit 2 naming the bad flag."""
    option, value = bad
    valid = {**flags, "--random-range-ratio": "0"}
    args = [*BASE, *(x for kv in valid.items() for x in (kv[0], str(kv[1])))]
    if option not in ("--request-rate", "--max-concurrency"):
        args += load  # (a second load flag would make a valid sweep or a mixed load)
    result = invoke(*args, option, value)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    error = result.stderr.strip().splitlines()[-1]
    assert option in error, error
