"""Human-facing tables: latencies in ms, not squeezed to 80 columns when piped, dropped benchmark
rows named (issue 27, defect 9)."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console
from rich.table import Table

from cbsim.common.console import PIPE_WIDTH, wide_console
from cbsim.studies.calibration.dropped import dropped_rows
from cbsim.studies.capacity.rendering import render_disaggregated


def test_a_console_that_is_not_a_terminal_is_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = wide_console(record=True)
    assert not console.is_terminal and console.width == PIPE_WIDTH
    table = Table()
    for i in range(9):
        table.add_column(f"column number {i}")
    table.add_row(*(f"value {i}" for i in range(9)))
    console.print(table)
    lines = console.export_text().splitlines()
    assert any("column number 8" in line for line in lines)  # one header line, not slivers
    assert len(lines) <= 6


def test_disaggregated_capacity_table_shows_latencies_in_ms() -> None:
    layout = {
        "name": "2P1D", "gpus": 8, "cost_per_hour": 20.0, "cost_per_million_output_tokens": 1.0,
        "tokens_per_s_per_gpu": 100.0, "tokens_per_s_per_user": 60.0, "feasible": True,
        "metrics": {"ttft_p99_s": 0.5123, "tpot_p99_s": 0.01569},
    }  # fmt: skip
    result = {
        "slo": {"ttft_p99_s": 2.0}, "target_rps": 4.0, "prefill_candidates": [],
        "decode_candidates": [], "layouts": [layout], "best": layout, "verdict": "ok",
    }  # fmt: skip
    console = Console(width=200, record=True)
    render_disaggregated(result, console)
    text = console.export_text()
    assert "TPOT p99 ms" in text and "15.69" in text and "512.3" in text
    assert "0.0157" not in text


def test_dropped_benchmark_rows_are_named_by_file_and_row() -> None:
    excluded = pd.DataFrame(
        {
            "source": ["runs.csv:row 7"],
            "model": [None],
            "hf_model": ["Qwen/Qwen3-30B-A3B"],
            "gpu": ["h100-sxm"],
            "tp": [2],
            "skipped": ["model not in cbsim's catalog"],
        }
    )
    table = dropped_rows(excluded)
    row = table.iloc[0]
    assert row["source"] == "runs.csv:row 7" and row["model"] == "Qwen/Qwen3-30B-A3B"
    assert row["why left out"] == "model not in cbsim's catalog"
