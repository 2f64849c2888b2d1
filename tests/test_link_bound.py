"""Link-bound layouts are warned (issue 27, defect 10: 4 × L40S serving a 70B fp8 model spends
769 of 893 ms of a prefill in all-reduce and nothing said so)."""

from __future__ import annotations

from typing import Any

import cbsim
from cbsim.cost import CostModel
from cbsim.cost.link_bound import comm_share, link_bound_warning


def _scenario(gpu: str) -> dict[str, Any]:
    return {
        "name": "link",
        "workload": {
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate": 0.5},
            "prompt_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 8},
        },
        "cluster": {"model": "llama-3-70b", "gpu": gpu, "tp": 4, "dtype": "fp8"},
    }


def test_l40s_tp4_70b_is_warned_link_bound() -> None:
    warnings = cbsim.simulate(_scenario("l40s")).summary["warnings"]
    assert "link-bound layout (l40s TP 4)" in warnings
    assert "769 of 893 ms (86%) of a 1,000-token prefill step" in warnings


def test_h100_tp4_nvlink_is_not_warned() -> None:
    assert "link-bound" not in cbsim.simulate(_scenario("h100-sxm")).summary["warnings"]


def test_comm_share_counts_only_collectives() -> None:
    comm, total = comm_share({"mlp": 1.0, "allreduce": 2.0, "alltoall": 1.0})
    assert (comm, total) == (3.0, 4.0)
    cost = CostModel(model="llama-3-8b", gpu="h100-sxm", tp=1)
    assert link_bound_warning(cost, 1000, "h100-sxm TP 1") is None
