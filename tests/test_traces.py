"""Tests for cbsim.workload.traces: the shipped request traces and user trace files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cbsim.common.errors import CbsimError
from cbsim.workload.traces import TRACE_NAMES, load_trace

SHIPPED_ROWS = {
    "azure-conv-2023": 19_366,
    "azure-code-2023": 8_819,
    "mooncake-conversation": 12_031,
}
BASE_COLUMNS = ["arrival_s", "prompt_tokens", "output_tokens"]


# --- shipped traces ------------------------------------------------------------------------------


def test_trace_names():
    assert TRACE_NAMES == ("azure-code-2023", "azure-conv-2023", "mooncake-conversation")


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_shipped_trace_shape(name):
    df = load_trace(name)
    assert len(df) == SHIPPED_ROWS[name]
    expected = [*BASE_COLUMNS, "prefix_hash_ids"] if name.startswith("mooncake") else BASE_COLUMNS
    assert list(df.columns) == expected
    assert df["arrival_s"].dtype == np.float64
    assert df["prompt_tokens"].dtype == np.int64
    assert df["output_tokens"].dtype == np.int64
    assert df.index.equals(pd.RangeIndex(len(df)))
    assert df["arrival_s"].iloc[0] == 0.0
    assert df["arrival_s"].is_monotonic_increasing
    assert (df["prompt_tokens"] > 0).all() and (df["output_tokens"] > 0).all()
    assert df.attrs["has_arrivals"] is True


def test_azure_conv_matches_source_statistics():
    df = load_trace("azure-conv-2023")
    assert df["prompt_tokens"].mean() == pytest.approx(1154.6974, abs=1e-3)
    assert df["output_tokens"].mean() == pytest.approx(211.1259, abs=1e-3)
    # First rows of the upstream file: 18:15:46.6805900 (374, 44) and 18:15:50.9951690 (396, 109).
    assert df["arrival_s"].iloc[1] == pytest.approx(4.314579, abs=1e-9)
    assert (df["prompt_tokens"].iloc[0], df["output_tokens"].iloc[0]) == (374, 44)
    assert df["arrival_s"].iloc[-1] == pytest.approx(3501.721937, abs=1e-6)


def test_azure_code_matches_source_statistics():
    df = load_trace("azure-code-2023")
    assert df["prompt_tokens"].mean() == pytest.approx(2047.8483, abs=1e-3)
    assert df["output_tokens"].mean() == pytest.approx(27.8825, abs=1e-3)


def test_mooncake_prefix_hash_ids():
    df = load_trace("mooncake-conversation")
    assert df["prompt_tokens"].mean() == pytest.approx(12035.0613, abs=1e-3)
    assert df["prefix_hash_ids"].iloc[0] == tuple(range(14))
    assert df["prefix_hash_ids"].iloc[1][:2] == (0, 14)
    assert sum(len(ids) for ids in df["prefix_hash_ids"]) == 288_500
    # A 512-token block per id: the ids cover the prompt.
    blocks = df["prefix_hash_ids"].map(len)
    assert ((blocks - 1) * 512 < df["prompt_tokens"]).all()
    assert (df["prompt_tokens"] <= blocks * 512).all()


def test_shipped_trace_is_a_copy():
    df = load_trace("azure-code-2023")
    df.loc[0, "prompt_tokens"] = -1
    df.attrs["has_arrivals"] = False
    again = load_trace("azure-code-2023")
    assert (again["prompt_tokens"] > 0).all()
    assert again.attrs["has_arrivals"] is True


def test_shipped_files_carry_licence_metadata():
    from importlib.resources import files

    for name in TRACE_NAMES:
        with (files("cbsim.catalog") / "data" / "traces" / f"{name}.parquet").open("rb") as fh:
            meta = pq.read_schema(fh).metadata
        assert meta[b"name"].decode() == name
        assert meta[b"license"] in (b"CC-BY-4.0", b"Apache-2.0")
        assert b"github.com" in meta[b"source"]
        assert meta[b"citation"]


# --- user files: accepted column names ---------------------------------------------------------

AZURE_STAMPS = ["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50.9951690"]


def _write(path, rows: dict[str, list[object]]) -> None:
    df = pd.DataFrame(rows)
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json", ".parquet"])
@pytest.mark.parametrize(
    ("arrival", "values", "expected"),
    [
        ("arrival_s", [10.0, 12.5], [0.0, 2.5]),
        ("timestamp_s", [10.0, 12.5], [0.0, 2.5]),
        ("timestamp", [1000, 3500], [0.0, 2.5]),
        ("timestamp", AZURE_STAMPS, [0.0, 4.314579]),
        ("TIMESTAMP", AZURE_STAMPS, [0.0, 4.314579]),
    ],
)
def test_user_file_arrival_columns(tmp_path, suffix, arrival, values, expected):
    path = tmp_path / f"t{suffix}"
    _write(path, {arrival: values, "prompt_tokens": [5, 6], "output_tokens": [7, 8]})
    df = load_trace(str(path))
    assert list(df.columns) == BASE_COLUMNS
    assert df["arrival_s"].tolist() == pytest.approx(expected, abs=1e-9)
    assert df.attrs["has_arrivals"] is True


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
@pytest.mark.parametrize(
    ("prompt", "output"),
    [
        ("prompt_tokens", "output_tokens"),
        ("input_length", "output_length"),
        ("ContextTokens", "GeneratedTokens"),
        ("num_prefill_tokens", "num_decode_tokens"),
    ],
)
def test_user_file_length_columns(tmp_path, suffix, prompt, output):
    path = tmp_path / f"t{suffix}"
    _write(path, {"arrival_s": [0.0, 1.0], prompt: [100, 200], output: [3, 4], "extra": [1, 2]})
    df = load_trace(path)
    assert df["prompt_tokens"].tolist() == [100, 200]
    assert df["output_tokens"].tolist() == [3, 4]
    assert df["prompt_tokens"].dtype == np.int64
    assert "extra" not in df.columns


def test_first_listed_column_name_wins(tmp_path):
    path = tmp_path / "t.csv"
    _write(
        path,
        {
            "timestamp": [0, 9000],
            "arrival_s": [0.0, 1.0],
            "input_length": [1, 1],
            "prompt_tokens": [2, 2],
            "output_tokens": [3, 3],
        },
    )
    df = load_trace(path)
    assert df["arrival_s"].tolist() == [0.0, 1.0]
    assert df["prompt_tokens"].tolist() == [2, 2]


def test_user_file_is_sorted_stably_and_reindexed(tmp_path):
    path = tmp_path / "t.csv"
    _write(
        path,
        {
            "arrival_s": [3.0, 1.0, 3.0, 2.0],
            "prompt_tokens": [1, 2, 3, 4],
            "output_tokens": [1] * 4,
        },
    )
    df = load_trace(path)
    assert df["arrival_s"].tolist() == [0.0, 1.0, 2.0, 2.0]
    assert df["prompt_tokens"].tolist() == [2, 4, 1, 3]
    assert df.index.equals(pd.RangeIndex(4))


def test_mooncake_style_jsonl_round_trip(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 250, "input_length": 700, "output_length": 6, "hash_ids": [0, 2]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    df = load_trace(path)
    assert list(df.columns) == [*BASE_COLUMNS, "prefix_hash_ids"]
    assert df["arrival_s"].tolist() == [0.0, 0.25]
    assert df["prefix_hash_ids"].tolist() == [(0, 1), (0, 2)]


def test_shipped_trace_round_trips_through_parquet(tmp_path):
    original = load_trace("mooncake-conversation").head(50)
    path = tmp_path / "copy.parquet"
    original.assign(prefix_hash_ids=original["prefix_hash_ids"].map(list)).to_parquet(path)
    assert load_trace(path).equals(original)


def test_csv_prefix_ids_as_json_lists(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('timestamp,input_length,output_length,hash_ids\n0,5,1,"[0, 1]"\n9,5,1,[2]\n')
    df = load_trace(path)
    assert df["prefix_hash_ids"].tolist() == [(0, 1), (2,)]
    assert df["arrival_s"].tolist() == [0.0, 0.009]


def test_json_array_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 2}]))
    assert load_trace(path)["output_tokens"].tolist() == [2]


def test_length_only_file_has_no_arrivals(tmp_path):
    path = tmp_path / "lengths.csv"
    _write(path, {"num_prefill_tokens": [3772, 2015], "num_decode_tokens": [54, 156]})
    df = load_trace(path)
    assert list(df.columns) == BASE_COLUMNS
    assert df["arrival_s"].isna().all()
    assert df.attrs["has_arrivals"] is False
    assert df["prompt_tokens"].tolist() == [3772, 2015]


def test_integral_floats_are_accepted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10.0,2\n1,20,3.0\n")
    assert load_trace(path)["prompt_tokens"].tolist() == [10, 20]


# --- errors --------------------------------------------------------------------------------------

WHERE = {"source": "scenarios/x.yaml", "field": "workload.trace.path"}


def _error(target, **kwargs) -> CbsimError:
    with pytest.raises(CbsimError) as info:
        load_trace(target, **(kwargs or WHERE))
    err = info.value
    if not kwargs:
        assert err.source == WHERE["source"]
        assert err.field == WHERE["field"]
        assert str(err).startswith("scenarios/x.yaml: workload.trace.path: ")
    return err


def test_unknown_name_lists_shipped_traces():
    err = _error("azure-conv-2024")
    assert "azure-conv-2024" in err.message
    for name in TRACE_NAMES:
        assert name in err.message
    assert "does not exist" in err.message


def test_unknown_name_without_location():
    err = _error("nope", source=None, field=None)
    assert err.source is None and err.field is None
    assert str(err).startswith("unknown trace 'nope'")


def _csv(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_prompt_column(tmp_path):
    path = _csv(tmp_path, "arrival_s,tokens,output_tokens\n0,1,2\n")
    err = _error(path)
    assert str(path) in err.message
    assert "prompt" in err.message
    for name in ("prompt_tokens", "input_length", "ContextTokens", "num_prefill_tokens"):
        assert name in err.message


def test_missing_output_column(tmp_path):
    err = _error(_csv(tmp_path, "arrival_s,prompt_tokens\n0,1\n"))
    assert "output" in err.message and "GeneratedTokens" in err.message


@pytest.mark.parametrize(
    ("cell", "row"),
    [("0", 2), ("-3", 2), ("2.5", 2), ("abc", 2), ("", 2)],
)
def test_bad_token_count_names_row(tmp_path, cell, row):
    path = _csv(tmp_path, f"arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,{cell},5\n2,5,5\n")
    err = _error(path)
    assert f"row {row}" in err.message
    assert "prompt_tokens" in err.message
    assert "positive integer" in err.message
    assert str(path) in err.message


def test_bad_output_count_in_jsonl(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 5}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 5}\n'
        '{"timestamp": 2, "input_length": 5, "output_length": 0}\n'
    )
    err = _error(path)
    assert "row 3" in err.message and "output_length" in err.message


@pytest.mark.parametrize("cell", ["-1", "", "nan", "x"])
def test_bad_arrival_names_row(tmp_path, cell):
    path = _csv(tmp_path, f"arrival_s,prompt_tokens,output_tokens\n0,5,5\n{cell},5,5\n")
    err = _error(path)
    assert "row 2" in err.message and "arrival_s" in err.message


def test_bad_datetime_names_row(tmp_path):
    path = _csv(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,1,1\n2023-11-16 18:15:47,1,1\nyesterday,1,1\n",
    )
    err = _error(path)
    assert "row 3" in err.message and "date-time" in err.message


def test_numeric_azure_timestamp_is_rejected(tmp_path):
    err = _error(_csv(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n1,1,1\n"))
    assert "TIMESTAMP" in err.message and "date-time" in err.message


def test_bad_prefix_ids_names_row(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 5, "hash_ids": "x"}\n'
    )
    err = _error(path)
    assert "row 2" in err.message and "hash_ids" in err.message


@pytest.mark.parametrize("text", ["", "arrival_s,prompt_tokens,output_tokens\n"])
def test_empty_csv(tmp_path, text):
    err = _error(_csv(tmp_path, text))
    assert "empty" in err.message or "no requests" in err.message


def test_empty_jsonl(tmp_path):
    err = _error(_csv(tmp_path, "\n\n", name="t.jsonl"))
    assert "empty" in err.message


def test_malformed_jsonl(tmp_path):
    err = _error(_csv(tmp_path, '{"prompt_tokens": 1, "output_tokens": 2}\n{oops\n', "t.jsonl"))
    assert "line 2" in err.message and "JSON" in err.message


def test_malformed_parquet(tmp_path):
    err = _error(_csv(tmp_path, "not parquet at all", name="t.parquet"))
    assert "parquet" in err.message


def test_malformed_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xff\xfe\x00\x01garbage\x00\n\x9c\x88")
    err = _error(path)
    assert "not a readable CSV file" in err.message


def test_unsupported_suffix(tmp_path):
    err = _error(_csv(tmp_path, "x", name="t.txt"))
    assert "'.txt'" in err.message and ".parquet" in err.message


def test_directory_is_rejected(tmp_path):
    err = _error(tmp_path)
    assert "directory" in err.message


# --------------------------------------------------------------------------- units and bounds


def _stamps(tmp_path, column: str, values, name: str = "u.csv"):
    path = tmp_path / name
    _write(
        path,
        {column: values, "prompt_tokens": [5] * len(values), "output_tokens": [2] * len(values)},
    )
    return load_trace(path)


def test_relative_timestamps_are_milliseconds_without_a_warning(tmp_path):
    trace = _stamps(tmp_path, "timestamp", list(range(0, 20_000, 1000)))
    assert trace["arrival_s"].iloc[-1] == 19.0
    assert trace.attrs["warnings"] == ()


def test_timestamps_too_fast_for_milliseconds_are_read_as_seconds_with_a_warning(tmp_path):
    seconds = np.round(np.cumsum(np.full(7500, 0.01)), 4).tolist()  # 75 s at 100 requests/s
    trace = _stamps(tmp_path, "timestamp", seconds)
    assert trace["arrival_s"].iloc[-1] == pytest.approx(74.99)
    (warning,) = trace.attrs["warnings"]
    assert "read as seconds" in warning and "timestamp_s or timestamp_ms" in warning


@pytest.mark.parametrize(
    ("first", "unit", "warned"),
    [(1.7e9, 1.0, True), (1.7e12, 1e3, False), (1.7e15, 1e6, True), (1.7e18, 1e9, True)],
)
def test_epoch_timestamps_say_their_unit_by_their_size(tmp_path, first, unit, warned):
    trace = _stamps(tmp_path, "timestamp", [first, first + 30 * unit])
    assert trace["arrival_s"].tolist() == [0.0, 30.0]
    assert bool(trace.attrs["warnings"]) == warned


def test_timestamp_ms_states_its_unit(tmp_path):
    assert _stamps(tmp_path, "timestamp_ms", [0, 1500])["arrival_s"].tolist() == [0.0, 1.5]


def test_seconds_that_look_like_milliseconds_are_warned_about(tmp_path):
    trace = _stamps(tmp_path, "arrival_s", [i * 60_000.0 for i in range(20)])
    assert "are the times milliseconds?" in trace.attrs["warnings"][0]


def test_rows_out_of_time_order_are_warned_about(tmp_path):
    trace = _stamps(tmp_path, "arrival_s", [0.0, 5.0, 2.0])
    assert trace["arrival_s"].tolist() == [0.0, 2.0, 5.0]
    assert "row 3 arrives before row 2" in trace.attrs["warnings"][0]


@pytest.mark.parametrize("count", ["16777217", str(2**63), str(2**64 + 1), "1e30"])
def test_absurd_token_counts_are_refused(tmp_path, count):
    path = _csv(tmp_path, f"arrival_s,prompt_tokens,output_tokens\n0,5,2\n1,{count},2\n")
    err = _error(path)
    assert "row 2: column 'prompt_tokens'" in err.message and "16,777,216" in err.message


def test_a_trace_spanning_more_than_a_year_is_refused(tmp_path):
    path = _csv(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,5,2\n4e7,5,2\n")
    assert "spans 463 days" in _error(path).message


def test_shipped_names_compare_without_case_and_suggest_close_ones():
    assert len(load_trace("Azure-Conv-2023")) == len(load_trace("azure-conv-2023"))
    assert "did you mean 'mooncake-conversation'?" in _error("mooncake").message


def test_shipped_traces_raise_no_warnings():
    for name in TRACE_NAMES:
        assert load_trace(name).attrs["warnings"] == ()
