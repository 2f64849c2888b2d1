"""KV-cache capacity against published engine start-up logs (cbsim.studies.calibration.startup_logs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cbsim.catalog.models import get_model
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.studies.calibration.startup_logs import (
    error_table,
    fitted_terms,
    leave_one_source_out,
    source_group,
    startup_logs,
    summary,
)

# The logs cbsim misses by more than a fifth, each explained in docs/kv-memory.md: vLLM 0.7 (V0)
# holds DeepSeek's latent attention with its matrices absorbed into larger weights (83.88 GiB a
# GPU printed against 78.3 stored), pads each latent to 640 elements and counts NCCL's buffers
# (7.16 GiB); 0.8.3-0.8.4 on two Ada cards leave about 5 GiB beside the weights that the 0.8
# rule does not find; V0 0.8.3's two-node DeepSeek-V2.5 stores 45 KB a token where the latent
# takes 35.
KNOWN_MISSES = {"v0-16", "r2-05", "v1-00", "v1-33", "v0-24"}


@pytest.fixture(scope="module")
def logs() -> pd.DataFrame:
    return startup_logs()


@pytest.fixture(scope="module")
def errors(logs: pd.DataFrame) -> pd.DataFrame:
    return error_table(logs)


def test_every_row_says_where_it_is_from_and_why_it_is_out(logs: pd.DataFrame) -> None:
    assert logs["source"].str.len().min() > 5
    assert logs["kv_line"].str.len().min() > 5
    excluded = logs[~logs["included"]]
    assert (excluded["excluded_because"].str.len() > 5).all()
    assert (logs[logs["included"]]["excluded_because"] == "").all()


def test_the_included_logs_cover_what_the_issue_asks(logs: pd.DataFrame) -> None:
    included = logs[logs["included"]]
    assert len(included) >= 40
    assert included["gpu"].nunique() >= 3
    assert {1, 2, 4, 8} <= set(included["tp"].astype(int))
    assert {"vllm", "sglang", "tensorrt-llm"} <= set(included["engine"])
    assert (included["dtype"] == "fp8").sum() >= 5
    moe = [name for name in included["model"] if _is_moe(name)]
    assert len(moe) >= 5


def _is_moe(name: str) -> bool:
    try:
        return get_model(name).is_moe
    except Exception:
        return False


def test_kv_capacity_within_the_targets(errors: pd.DataFrame) -> None:
    figures = summary(errors)
    assert figures["rows"] >= 40
    assert figures["median_abs_pct"] <= 3.0
    # the P90 target (8%) holds once the explained misses are set aside
    rest = errors[~errors["id"].isin(KNOWN_MISSES)]
    assert summary(rest)["p90_abs_pct"] <= 8.0


def test_only_the_explained_logs_miss_by_more_than_a_fifth(errors: pd.DataFrame) -> None:
    beyond = set(errors.loc[errors["error_pct"].abs() > 20, "id"])
    assert beyond == KNOWN_MISSES


def test_fitted_terms_held_out_by_source_stay_within_the_targets() -> None:
    held = leave_one_source_out()
    assert summary(held)["median_abs_pct"] <= 3.0
    rest = held[~held["id"].isin(KNOWN_MISSES)]
    assert summary(rest)["p90_abs_pct"] <= 8.0


def test_the_shipped_rule_is_what_the_published_logs_give() -> None:
    terms = fitted_terms()
    rule = load_engine_profile("vllm").memory
    assert rule.sampler_bytes_per_logit == pytest.approx(terms["sampler_bytes_per_logit"], abs=0.01)
    assert rule.non_torch_gib == pytest.approx(terms["non_torch_gib"], abs=0.005)
    assert rule.comm_gib == pytest.approx(terms["comm_gib"], abs=0.005)
    assert np.isfinite(list(terms.values())).all()


@pytest.mark.parametrize(
    ("source", "group"),
    [
        (
            "https://github.com/vllm-project/vllm/issues/21348#issuecomment-1",
            "vllm-project/vllm/issues/21348",
        ),
        ("llm-d-incubation/llm-d-planner:accuracy/x.log@d3121e0", "llm-d-incubation/llm-d-planner"),
        ("unresolved GitHub repository file (find_string index file id 123; notes)", "file 123"),
        (
            "https://docs.sglang.ai/start/send_request.html",
            "docs.sglang.ai/start/send_request.html",
        ),
    ],
)
def test_logs_are_grouped_by_where_they_come_from(source: str, group: str) -> None:
    assert source_group(source) == group
