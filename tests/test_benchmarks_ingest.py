"""Reading measured end-to-end serving benchmarks (cbsim.studies.calibration.benchmarks).

Fixtures in tests/data/benchmarks: a hand-written AI Configurator silicon CSV, eight real rows of
the shipped H100 one, a vLLM closed-loop result (``--max-concurrency``), a vLLM open-loop result
saved with ``--save-detailed`` and a normalised CSV typed by hand.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.benchmarks import (
    BENCHMARK_COLUMNS,
    MEASURED_COLUMNS,
    POOL_COLUMNS,
    SHIPPED_H100,
    catalog_model,
    read_benchmarks,
    shared_h100_benchmarks,
)

DATA = Path(__file__).parent / "data" / "benchmarks"
AIC_SMALL = DATA / "aiconfigurator_small.csv"
AIC_REAL = DATA / "aiconfigurator_silicon_h100_sample.csv"
VLLM_CLOSED = DATA / "vllm_closed_loop.json"
VLLM_OPEN = DATA / "vllm_open_loop_detailed.json"
NORMALISED = DATA / "normalised.csv"
RUN = {"gpu": "h100-sxm", "tp": 1, "dtype": "bf16"}


def by_name(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Rows keyed by what follows the file name in ``source``."""
    return {row["source"].rsplit(":", 1)[1]: row for row in frame.to_dict("records")}


def vllm_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(VLLM_CLOSED.read_text())
    record.update(changes)
    return {k: v for k, v in record.items() if v is not ...}


def write_json(tmp_path: Path, record: Any, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return path


def write_text(tmp_path: Path, text: str, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the table --------------------------------------------------------------------------------


def test_every_reader_returns_the_normalised_columns_and_types() -> None:
    frame = read_benchmarks([AIC_SMALL, VLLM_CLOSED, NORMALISED], **RUN)
    assert tuple(frame.columns) == BENCHMARK_COLUMNS
    assert list(frame.index) == list(range(len(frame)))
    assert len(frame) == 6 + 1 + 3
    assert str(frame["tp"].dtype) == "Int64"
    assert str(frame["decode_workers"].dtype) == "Int64"
    assert frame["model"].dtype == object
    assert frame[list(MEASURED_COLUMNS)].dtypes.eq(np.float64).all()


def test_a_single_path_may_be_given_without_a_list() -> None:
    assert len(read_benchmarks(str(AIC_SMALL))) == len(read_benchmarks([AIC_SMALL]))


# --- NVIDIA AI Configurator silicon CSV ----------------------------------------------------------


def test_aiconfigurator_names_map_to_cbsim_names() -> None:
    rows = by_name(read_benchmarks(AIC_SMALL))
    assert {name: row["engine"] for name, row in rows.items()} == {
        "llama8b_trtllm_agg_c8": "tensorrt-llm",
        "qwen32b_vllm_agg_dp2": "vllm",
        "gptoss_vllm_b200_fp4": "vllm",
        "dsr1_sglang_disagg": "sglang",
        "llama70b_vllm_a100": "vllm",
        "llama3_8b_trtllm_l40s": "tensorrt-llm",
    }
    assert [row["gpu"] for row in rows.values()] == [
        "h100-sxm", "h200", "b200", "h100-sxm", "a100-80gb", "l40s",
    ]  # fmt: skip
    assert [row["dtype"] for row in rows.values()] == ["bf16", "fp8", "fp4", "fp8", "bf16", "fp8"]
    assert [row["model"] for row in rows.values()] == [
        "llama-3.1-8b", "qwen3-32b", None, None, "llama-3.1-70b", "llama-3-8b",
    ]  # fmt: skip
    assert rows["gptoss_vllm_b200_fp4"]["hf_model"] == "openai/gpt-oss-120b"
    assert rows["qwen32b_vllm_agg_dp2"]["engine_version"] == "0.12.0"
    assert all(row["kv_dtype"] is None for row in rows.values())


def test_aiconfigurator_milliseconds_become_seconds() -> None:
    row = by_name(read_benchmarks(AIC_SMALL))["llama8b_trtllm_agg_c8"]
    assert row["ttft_mean_s"] == pytest.approx(0.0355)
    assert row["tpot_mean_s"] == pytest.approx(0.00625)
    assert (row["isl"], row["osl"], row["concurrency"], row["batch_size"]) == (1024, 128, 8, 8)
    assert (row["tp"], row["pp"], row["dp"], row["ep"], row["mode"]) == (1, 1, 1, 1, "agg")
    assert math.isnan(row["request_rate"]) and math.isnan(row["num_requests"])
    assert all(
        math.isnan(row[c]) for c in MEASURED_COLUMNS if c not in ("ttft_mean_s", "tpot_mean_s")
    )


def test_aiconfigurator_missing_concurrency_is_batch_times_attention_dp() -> None:
    row = by_name(read_benchmarks(AIC_SMALL))["qwen32b_vllm_agg_dp2"]
    assert (row["batch_size"], row["dp"], row["concurrency"]) == (16, 2, 32)
    assert row["ep"] == 1  # moe_ep_size 0: a dense model


def test_aiconfigurator_disaggregated_rows_describe_their_pools() -> None:
    row = by_name(read_benchmarks(AIC_SMALL))["dsr1_sglang_disagg"]
    assert row["mode"] == "disagg"
    assert all(pd.isna(row[c]) for c in ("tp", "pp", "dp", "ep"))
    assert math.isnan(row["batch_size"])
    pools = {c: row[c] for c in POOL_COLUMNS}
    assert pools == {
        "prefill_tp": 8, "prefill_pp": 1, "prefill_dp": 1, "prefill_ep": 8,
        "prefill_workers": 2, "prefill_batch_size": 1.0,
        "decode_tp": 16, "decode_pp": 1, "decode_dp": 1, "decode_ep": 16,
        "decode_workers": 1, "decode_batch_size": 32.0,
    }  # fmt: skip
    assert row["concurrency"] == 32  # decode batch × workers × attention dp


def test_real_aiconfigurator_rows() -> None:
    raw = pd.read_csv(AIC_REAL)
    frame = read_benchmarks(AIC_REAL)
    assert len(frame) == len(raw) == 8
    assert frame["source"].tolist() == [f"{AIC_REAL}:{name}" for name in raw["id"]]
    np.testing.assert_allclose(frame["ttft_mean_s"], raw["silicon_ttft_ms"] / 1e3)
    np.testing.assert_allclose(frame["tpot_mean_s"], raw["silicon_tpot_ms"] / 1e3)
    assert (frame["gpu"] == "h100-sxm").all()
    assert frame["concurrency"].notna().all()
    assert frame["model"].tolist() == [
        None, "qwen3-32b", "qwen3-32b", None, "qwen3-32b", "llama-3.1-8b", "llama-3.1-70b",
        "qwen3-32b",
    ]  # fmt: skip
    llama = frame[frame["model"] == "llama-3.1-8b"].iloc[0]
    assert (llama["engine"], llama["dtype"]) == ("tensorrt-llm", "bf16")  # empty precision
    vllm_70b = frame[frame["model"] == "llama-3.1-70b"].iloc[0]
    assert vllm_70b["engine_version"] is None  # not recorded for these rows
    assert frame["engine"].tolist().count("sglang") == 2


def test_shared_h100_benchmarks() -> None:
    if not (files("cbsim.catalog") / "data" / "calibration" / "e2e" / SHIPPED_H100).is_file():
        pytest.skip(f"{SHIPPED_H100} is not shipped yet")
    frame = shared_h100_benchmarks()
    assert tuple(frame.columns) == BENCHMARK_COLUMNS
    assert len(frame) == 917
    assert (frame["gpu"] == "h100-sxm").all()
    assert set(frame["engine"]) == {"vllm", "sglang", "tensorrt-llm"}
    assert (frame["mode"] == "disagg").sum() == 107
    assert frame["concurrency"].notna().all()
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"} <= set(frame["model"].dropna())
    # the same data as the real rows copied into the fixtures (shipped as float32)
    sample = read_benchmarks(AIC_REAL)
    shipped = frame.set_index(frame["source"].str.split(":").str[-1])
    shipped = shipped.loc[sample["source"].str.split(":").str[-1]].reset_index(drop=True)
    pd.testing.assert_frame_equal(
        shipped.drop(columns="source"), sample.drop(columns="source"), rtol=1e-6
    )


# --- vLLM bench serve results --------------------------------------------------------------------


def test_vllm_closed_loop_result() -> None:
    row = read_benchmarks(VLLM_CLOSED, gpu="h100", tp=1, dtype="bfloat16").iloc[0]
    assert row["source"] == str(VLLM_CLOSED)
    assert (row["engine"], row["gpu"], row["dtype"], row["tp"]) == ("vllm", "h100-sxm", "bf16", 1)
    assert (row["pp"], row["dp"], row["ep"], row["mode"]) == (1, 1, 1, "agg")
    assert (row["hf_model"], row["model"]) == ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b")
    assert (row["isl"], row["osl"], row["num_requests"]) == (1024, 128, 320)
    assert row["concurrency"] == 32 and math.isnan(row["request_rate"])  # closed loop
    assert row["ttft_mean_s"] == pytest.approx(0.1523)
    assert row["ttft_p50_s"] == pytest.approx(0.1408)
    assert row["ttft_p99_s"] == pytest.approx(0.3105)
    assert row["tpot_mean_s"] == pytest.approx(0.0302)
    assert row["itl_p99_s"] == pytest.approx(0.045)
    assert math.isnan(row["e2e_mean_s"])  # e2el is not in the default percentile metrics
    assert row["output_tokens_per_s"] == pytest.approx(1026.6)
    assert row["request_throughput_rps"] == pytest.approx(8.02)
    assert math.isnan(row["batch_size"]) and row["kv_dtype"] is None


def test_vllm_open_loop_detailed_result() -> None:
    record = json.loads(VLLM_OPEN.read_text())
    row = read_benchmarks(VLLM_OPEN, gpu="a100-80gb", tp=2, dtype="fp16", kv_dtype="fp8").iloc[0]
    assert row["request_rate"] == 2.0 and math.isnan(row["concurrency"])
    assert row["model"] == "qwen2.5-7b"  # a local path ending in the repository name
    assert row["isl"] == pytest.approx(1512 / 3)  # the completed requests only
    assert row["osl"] == 4
    assert row["num_requests"] == 4  # sent, the failed one included
    assert (row["tp"], row["kv_dtype"]) == (2, "fp8")
    assert row["e2e_mean_s"] == pytest.approx(record["mean_e2el_ms"] / 1e3)
    assert row["tpot_p99_s"] == pytest.approx(record["p99_tpot_ms"] / 1e3)
    assert row["engine"] == "vllm"  # backend "openai" is an endpoint, not an engine


def test_vllm_statistics_missing_from_the_summary_come_from_per_request_lists(
    tmp_path: Path,
) -> None:
    full = json.loads(VLLM_OPEN.read_text())
    summary_keys = [k for k in full if k.endswith("_ms")]
    bare = {k: v for k, v in full.items() if k not in summary_keys}
    expected = read_benchmarks(VLLM_OPEN, **RUN).iloc[0]
    derived = read_benchmarks(write_json(tmp_path, bare), **RUN).iloc[0]
    for column in MEASURED_COLUMNS:
        assert derived[column] == pytest.approx(expected[column], rel=1e-9), column


@pytest.mark.parametrize("option", ["gpu", "tp", "dtype"])
def test_vllm_results_need_the_options_they_do_not_record(option: str) -> None:
    given = {k: v for k, v in RUN.items() if k != option}
    with pytest.raises(CbsimError, match=rf"give the '{option}' option \(--{option}\)") as err:
        read_benchmarks(VLLM_CLOSED, **given)
    assert err.value.source == str(VLLM_CLOSED)
    assert err.value.field == option


def test_vllm_metadata_records_the_run_and_wins_over_options(tmp_path: Path) -> None:
    record = vllm_record(gpu="h200", tp="2", dtype="fp8", engine_version="0.10.1")
    row = read_benchmarks(write_json(tmp_path, record), gpu="l40s", tp=1).iloc[0]
    assert (row["gpu"], row["tp"], row["dtype"], row["engine_version"]) == (
        "h200",
        2,
        "fp8",
        "0.10.1",
    )


def test_vllm_engine_comes_from_a_backend_naming_an_engine_then_options(tmp_path: Path) -> None:
    path = write_json(tmp_path, vllm_record(backend="sglang"))
    assert read_benchmarks(path, **RUN).loc[0, "engine"] == "sglang"
    assert read_benchmarks(path, engine="sglang", **RUN).loc[0, "engine"] == "sglang"
    assert read_benchmarks(VLLM_CLOSED, engine="my-engine", **RUN).loc[0, "engine"] == "my-engine"


def test_an_engine_option_contradicting_the_backend_is_an_error(tmp_path: Path) -> None:
    """A result whose backend names the engine that served it is never fitted as another."""
    path = write_json(tmp_path, vllm_record(backend="tensorrt-llm"))
    with pytest.raises(CbsimError) as caught:
        read_benchmarks(path, engine="vllm", **RUN)
    assert caught.value.source == str(path) and caught.value.field == "backend"
    assert "--engine tensorrt-llm" in str(caught.value)


def test_vllm_appended_results_are_one_run_per_line(tmp_path: Path) -> None:
    lines = [json.dumps(vllm_record(max_concurrency=c)) for c in (4, 8)]
    path = write_text(tmp_path, "\n".join(lines) + "\n", "appended.json")
    frame = read_benchmarks(path, **RUN)
    assert frame["concurrency"].tolist() == [4, 8]
    assert frame["source"].tolist() == [f"{path}:line 1", f"{path}:line 2"]


def test_vllm_zero_latency_means_not_measured(tmp_path: Path) -> None:
    record = vllm_record(mean_ttft_ms=0.0, median_ttft_ms=0.0, p99_ttft_ms=0.0)
    row = read_benchmarks(write_json(tmp_path, record), **RUN).iloc[0]
    assert math.isnan(row["ttft_mean_s"]) and math.isnan(row["ttft_p99_s"])
    assert row["tpot_mean_s"] == pytest.approx(0.0302)


def test_vllm_infinite_rate_without_a_cap_is_an_open_loop_burst(tmp_path: Path) -> None:
    row = read_benchmarks(write_json(tmp_path, vllm_record(max_concurrency=None)), **RUN).iloc[0]
    assert math.isinf(row["request_rate"]) and math.isnan(row["concurrency"])


def test_vllm_ramp_up_has_no_single_rate(tmp_path: Path) -> None:
    record = vllm_record(max_concurrency=None, ramp_up_strategy="linear", ramp_up_start_rps=1)
    row = read_benchmarks(write_json(tmp_path, record), **RUN).iloc[0]
    assert math.isnan(row["request_rate"]) and math.isnan(row["concurrency"])


def test_vllm_rate_and_cap_are_both_kept(tmp_path: Path) -> None:
    record = vllm_record(request_rate=5.0, max_concurrency=16)
    row = read_benchmarks(write_json(tmp_path, record), **RUN).iloc[0]
    assert (row["request_rate"], row["concurrency"]) == (5.0, 16)


# --- normalised CSV ---------------------------------------------------------------------------


def test_normalised_csv() -> None:
    frame = read_benchmarks(NORMALISED)
    a, b, c = frame.to_dict("records")
    assert [a["source"], b["source"], c["source"]] == [
        f"{NORMALISED}:run-a", f"{NORMALISED}:run-b", f"{NORMALISED}:row 3",
    ]  # fmt: skip
    assert a["engine_version"] == "0.10"  # text stays text
    assert (a["model"], b["model"], c["model"]) == ("llama-3.1-8b", "llama-3-70b", None)
    assert b["hf_model"] is None
    assert (c["engine"], c["gpu"], c["dtype"]) == ("tensorrt-llm", "h100-sxm", "fp16")
    assert (a["pp"], a["dp"], a["ep"], a["mode"]) == (1, 1, 1, "agg")
    assert b["request_rate"] == 4.5 and math.isnan(b["concurrency"])
    assert a["output_tokens_per_s"] == 1180 and math.isnan(b["output_tokens_per_s"])
    assert math.isnan(a["num_requests"]) and a["kv_dtype"] is None


def test_normalised_csv_options_fill_what_the_file_leaves_out(tmp_path: Path) -> None:
    path = write_text(
        tmp_path,
        "hf_model,gpu,isl,osl,concurrency,ttft_mean_s\n"
        "Qwen/Qwen3-32B,,4000,1000,8,0.9\n"
        "Qwen/Qwen3-32B,h200,4000,1000,16,1.1\n",
    )
    frame = read_benchmarks(path, engine="sglang", gpu="h100-sxm", dtype="fp8", tp=2)
    assert frame["gpu"].tolist() == ["h100-sxm", "h200"]  # an empty cell takes the option
    assert set(frame["engine"]) == {"sglang"} and set(frame["tp"]) == {2}
    assert set(frame["model"]) == {"qwen3-32b"}


def test_the_table_written_to_csv_reads_back_the_same(tmp_path: Path) -> None:
    first = read_benchmarks([AIC_SMALL, VLLM_OPEN, NORMALISED], **RUN)
    path = tmp_path / "table.csv"
    first.to_csv(path, index=False)
    again = read_benchmarks(path)
    pd.testing.assert_frame_equal(again.drop(columns="source"), first.drop(columns="source"))
    assert (again["source"] == str(path) + ":" + first["source"]).all()


# --- Hugging Face ids -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hf_id", "name"),
    [
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("meta-llama/Llama-2-13b-chat-hf", "llama-2-13b"),
        ("meta-llama/Llama-3.2-1B", "llama-3.2-1b"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
        ("/data/models/Qwen2.5-7B-Instruct/", "qwen2.5-7b"),
        ("llama-3-70b", "llama-3-70b"),
        ("Qwen/Qwen3-235B-A22B-FP8", None),
        ("deepseek-ai/DeepSeek-R1", None),
        ("mistralai/Mistral-7B-Instruct-v0.2", None),
    ],
)
def test_catalog_model(hf_id: str, name: str | None) -> None:
    assert catalog_model(hf_id) == name


# --- errors -----------------------------------------------------------------------------------


def error_of(path: Path, **options: Any) -> CbsimError:
    with pytest.raises(CbsimError) as err:
        read_benchmarks(path, **options)
    assert err.value.source == str(path)
    return err.value


def test_no_files_is_an_error() -> None:
    with pytest.raises(CbsimError, match="no benchmark files"):
        read_benchmarks([])


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "not found" in str(error_of(tmp_path / "nope.json"))
    assert "is a directory" in str(error_of(tmp_path))


@pytest.mark.parametrize("name", ["empty.json", "empty.csv", "blank.csv"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = write_text(tmp_path, "\n \n" if name == "blank.csv" else "", name)
    assert "is empty" in str(error_of(path))


def test_header_without_rows(tmp_path: Path) -> None:
    path = write_text(tmp_path, AIC_SMALL.read_text().splitlines()[0] + "\n")
    assert "no rows" in str(error_of(path))


@pytest.mark.parametrize("name", ["runs.json", "runs.csv"])
def test_not_utf8(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"engine,gpu\n\xff\xfe,\x81\n")
    assert "not UTF-8" in str(error_of(path))


def test_not_json(tmp_path: Path) -> None:
    error = error_of(write_text(tmp_path, '{"model_id": "x",', "broken.json"), **RUN)
    assert "is not JSON (line 1" in str(error)


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "3"])
def test_not_a_json_object(tmp_path: Path, content: str) -> None:
    assert "expected a JSON object" in str(error_of(write_text(tmp_path, content, "r.json"), **RUN))


def test_a_bad_appended_line_is_located(tmp_path: Path) -> None:
    text = json.dumps(vllm_record()) + "\n[1]\n"
    error = error_of(write_text(tmp_path, text, "r.json"), **RUN)
    assert error.message.startswith("line 2: expected a JSON object")


@pytest.mark.parametrize("key", ["model_id", "completed", "total_input_tokens"])
def test_vllm_missing_key(tmp_path: Path, key: str) -> None:
    error = error_of(write_json(tmp_path, vllm_record(**{key: ...})), **RUN)
    assert error.field == key and "missing key" in error.message


def test_vllm_non_numeric_and_negative_latency(tmp_path: Path) -> None:
    error = error_of(write_json(tmp_path, vllm_record(mean_tpot_ms="fast")), **RUN)
    assert (error.field, error.message) == ("mean_tpot_ms", "'fast' is not a number")
    error = error_of(write_json(tmp_path, vllm_record(p99_itl_ms=-3.0)), **RUN)
    assert error.field == "p99_itl_ms" and "non-negative" in error.message


def test_vllm_nothing_completed(tmp_path: Path) -> None:
    error = error_of(write_json(tmp_path, vllm_record(completed=0)), **RUN)
    assert error.field == "completed"


def test_vllm_nothing_measured(tmp_path: Path) -> None:
    record = {k: v for k, v in vllm_record().items() if not k.endswith(("_ms", "throughput"))}
    assert (
        "no measured latency or throughput" in error_of(write_json(tmp_path, record), **RUN).message
    )


def test_vllm_per_request_lists_must_hold_numbers(tmp_path: Path) -> None:
    error = error_of(write_json(tmp_path, vllm_record(itls=[[0.01, "x"]])), **RUN)
    assert error.field == "itls[0][1]" and "'x' is not a number" in error.message
    error = error_of(write_json(tmp_path, vllm_record(ttfts="0.1")), **RUN)
    assert error.field == "ttfts" and "must be a list" in error.message


def test_unknown_gpu_lists_the_known_ones(tmp_path: Path) -> None:
    text = AIC_SMALL.read_text().replace(",l40s,", ",tpu_v5,")
    error = error_of(write_text(tmp_path, text))
    assert error.field == "system"
    assert "unknown GPU 'tpu_v5'" in error.message
    assert "h100-sxm" in error.message and "a100-80gb" in error.message
    assert "llama3_8b_trtllm_l40s" in error.message  # the row, named


def test_unknown_gpu_option() -> None:
    with pytest.raises(CbsimError, match="unknown GPU 'v100'") as err:
        read_benchmarks(VLLM_CLOSED, gpu="v100", tp=1, dtype="bf16")
    assert err.value.field == "gpu" and err.value.source is None


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("tp", 0, "must be positive"),
        ("dtype", "int3", "unknown dtype"),
        ("model", "gpt-9", "unknown model"),
    ],
)
def test_bad_options(option: str, value: Any, message: str) -> None:
    with pytest.raises(CbsimError, match=message) as err:
        read_benchmarks(VLLM_CLOSED, **{**RUN, option: value})
    assert err.value.field == option


def test_aiconfigurator_negative_and_non_numeric_latency(tmp_path: Path) -> None:
    text = AIC_SMALL.read_text().replace(",35.5,6.25,", ",-35.5,6.25,")
    error = error_of(write_text(tmp_path, text))
    assert error.field == "silicon_ttft_ms" and error.message.startswith("row 1 (")
    text = AIC_SMALL.read_text().replace(",900.0,20.0,", ",soon,20.0,")
    error = error_of(write_text(tmp_path, text))
    assert error.field == "silicon_ttft_ms" and "'soon' is not a number" in error.message


def test_aiconfigurator_missing_columns_and_layout(tmp_path: Path) -> None:
    raw = pd.read_csv(AIC_SMALL, dtype=str)
    raw.drop(columns="system").to_csv(tmp_path / "a.csv", index=False)
    assert "missing column(s) system" in error_of(tmp_path / "a.csv").message
    raw.assign(tp_size=None).to_csv(tmp_path / "b.csv", index=False)
    error = error_of(tmp_path / "b.csv")
    assert error.field == "tp_size" and "agg" in error.message
    raw.assign(mode="mixed").to_csv(tmp_path / "c.csv", index=False)
    assert error_of(tmp_path / "c.csv").field == "mode"


def test_normalised_csv_unknown_and_missing_columns(tmp_path: Path) -> None:
    text = NORMALISED.read_text().replace("ttft_mean_s", "ttft_mean_ms")
    assert "unknown column(s) 'ttft_mean_ms'" in error_of(write_text(tmp_path, text)).message
    raw = pd.read_csv(NORMALISED, dtype=str)
    raw.drop(columns=["gpu", "hf_model", "model"]).to_csv(tmp_path / "m.csv", index=False)
    message = error_of(tmp_path / "m.csv").message
    assert "missing column(s) gpu, hf_model or model" in message
    raw[["engine", "gpu", "dtype", "tp", "isl", "osl", "model"]].to_csv(
        tmp_path / "n.csv", index=False
    )
    assert "no measured column" in error_of(tmp_path / "n.csv").message


def test_normalised_csv_bad_cells(tmp_path: Path) -> None:
    raw = pd.read_csv(NORMALISED, dtype=str)
    cases = [
        ("tpot_mean_s", "slow", "'slow' is not a number"),
        ("tpot_mean_s", "-0.01", "must be positive"),
        ("tp", "1.5", "whole number"),
        ("gpu", "h900", "unknown GPU 'h900'"),
        ("dtype", "int4", "unknown dtype 'int4'"),
        ("isl", None, "is empty"),
    ]
    for column, value, message in cases:
        bad = raw.copy()
        bad.loc[1, column] = value
        bad.to_csv(tmp_path / "bad.csv", index=False)
        error = error_of(tmp_path / "bad.csv")
        assert error.field == column, column
        assert error.message.startswith("row 2: ") and message in error.message, error.message


def test_normalised_row_without_measurement_or_required_cell(tmp_path: Path) -> None:
    raw = pd.read_csv(NORMALISED, dtype=str)
    bad = raw.copy()
    bad.loc[2, ["ttft_mean_s", "tpot_mean_s", "output_tokens_per_s"]] = None
    bad.to_csv(tmp_path / "bad.csv", index=False)
    assert "row 3: no measured latency" in error_of(tmp_path / "bad.csv").message
    bad = raw.copy()
    bad.loc[0, "engine"] = None
    bad.to_csv(tmp_path / "bad.csv", index=False)
    error = error_of(tmp_path / "bad.csv")
    assert error.field == "engine" and "give the 'engine' option" in error.message
