"""A fused draft head's (EAGLE, MTP) per-step prices from its compiled tables: the same floats as
its cost model's Python pricing (a decode step of its layers plus the fusion projection)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.cost import CostModel
from cbsim.engine.speculative.proposers import EagleHead, MtpModule, _FusedHead

TARGETS = {
    "llama-3-70b h100 tp4": CostModel("llama-3-70b", "h100-sxm", tp=4),
    "llama-3-8b a100": CostModel("llama-3-8b", "a100-80gb", tp=1),
}


def _python_costs(head: _FusedHead, steps: list[tuple[int, int]]) -> list[float]:
    cost = head.cost
    hidden = head.shape.hidden_size
    return [cost.decode_time(n, kv) + cost.gemm_time(n, hidden, head._fusion_k) for n, kv in steps]


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(deadline=None, max_examples=40)
@given(st.lists(st.tuples(st.integers(1, 600), st.integers(1, 400_000)), min_size=1, max_size=8))
def test_eagle_steps_are_priced_as_in_python(name: str, steps: list[tuple[int, int]]) -> None:
    head = EagleHead(TARGETS[name])
    assert head._step_costs(steps) == _python_costs(head, steps)


def test_mtp_steps_are_priced_as_in_python() -> None:
    head = MtpModule(CostModel("deepseek-v3", "h200", tp=8), 1)
    steps = [(64, 64 * 3000), (40, 40 * 3001), (7, 7 * 3002)]
    assert head._step_costs(steps) == _python_costs(head, steps)
