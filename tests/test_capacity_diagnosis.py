"""A trace capacity search that cannot meet its SLO says when the cause is a huge prompt or a
burst, not the rate (issue 27, defect 7: "cannot be met even at 0.016 req/s" for one 123k-token
prompt and bursts of simultaneous arrivals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from cbsim.studies.capacity import find_max_rate
from cbsim.studies.capacity.diagnosis import diagnose


def _requests(prompts: list[int], arrivals: list[float], ttfts: list[float]) -> pd.DataFrame:
    n = len(prompts)
    return pd.DataFrame(
        {
            "request_id": range(n),
            "status": ["finished"] * n,
            "prompt_tokens": prompts,
            "arrival_s": arrivals,
            "ttft_s": ttfts,
        }
    )


def test_a_huge_prompt_is_named() -> None:
    prompts = [1000] * 99 + [123_000]
    arrivals = [10.0 * i for i in range(100)]
    ttfts = [0.1] * 99 + [30.0]
    text = diagnose(_requests(prompts, arrivals, ttfts))
    assert text is not None and "huge prompts" in text and "123,000 tokens" in text
    assert "bursts" not in text


def test_simultaneous_arrivals_are_named_a_burst() -> None:
    arrivals = [10.0 * i for i in range(90)] + [900.0] * 10
    ttfts = [0.1] * 90 + [5.0] * 10
    text = diagnose(_requests([1000] * 100, arrivals, ttfts))
    assert text is not None and "bursts" in text and "up to 10 requests" in text


def test_a_rate_problem_is_not_diagnosed() -> None:
    arrivals = [10.0 * i for i in range(100)]
    assert diagnose(_requests([1000] * 100, arrivals, [0.1 * i for i in range(100)])) is None


def test_trace_search_blames_the_huge_prompt(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    # every fifth prompt is huge: wherever the search's window falls, its TTFT tail is theirs
    rows = [(2.0 * i, 40_000 if i % 5 == 2 else 500, 16) for i in range(60)]
    pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"]).to_csv(
        trace, index=False
    )
    scenario: dict[str, Any] = {
        "name": "trace",
        "seed": 1,
        "workload": {"trace": {"path": str(trace)}},
        "cluster": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_model_len": 131072},
        "scheduler": {"kind": "prefill_first", "max_batched_tokens": 65536},
    }
    result = find_max_rate(scenario, {"ttft_p99_s": 0.5}, window_s=60.0, min_requests=10)
    assert not result.feasible and result.reason is not None
    assert result.reason.startswith("SLO cannot be met even at")
    assert "not the rate" in result.reason and "40,000 tokens" in result.reason
