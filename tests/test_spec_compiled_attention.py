"""Speculative decoding planned compiled for models with local attention (a sliding window: Gemma,
gpt-oss; Llama 4's chunks, taken as a window), with latent attention (DeepSeek-V3's MLA modules,
a verify step's extra query tokens, its MTP module drafting) and on GPUs priced through another
GPU's kernels: the goodput policy's compiled choice is ``GoodputK.choose``'s, and whole runs give
the Python planner's request and iteration tables bit for bit, fast-forwarded or stepped.

Before, these models' speculative steps were planned and priced in Python (5.5-15x their plain
runs' time): ``compile_cost`` refused them."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cbsim
import cbsim.engine.replica as replica_module
from cbsim.cost import BatchStats, CostModel
from cbsim.engine.speculative.goodput_kernel import (
    EAGLE,
    compiled_proposer,
    goodput_k,
    no_base,
)
from cbsim.engine.speculative.goodput_refine import goodput_k_per_request
from cbsim.engine.speculative.policies import GoodputK
from cbsim.engine.speculative.proposers import EagleHead, MtpModule, Ngram, Proposer
from cbsim.schema.speculative import GoodputPolicy
from tests.conftest import drawn_scheduler, small_scenario, summaries_equal
from tests.test_spec_compiled_per_request import _python_choice
from tests.test_speculative_properties import acceptances, check_invariants, engine_settings

LAYOUTS: dict[str, dict[str, Any]] = {
    "gemma-3-12b": {"model": "gemma-3-12b", "gpu": "h100-sxm"},
    "gpt-oss-20b": {"model": "gpt-oss-20b", "gpu": "h200", "engine": "sglang"},
    "llama-4-scout": {"model": "llama-4-scout", "gpu": "h100-sxm", "tp": 4},
    "deepseek-v3": {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "dtype": "fp8"},
    "l40s": {"model": "llama-3-8b", "gpu": "l40s", "engine": "sglang"},  # priced through H100's
}


def _proposer(name: str, cost: CostModel) -> Proposer:
    if name == "mtp":
        return MtpModule(cost, 1)
    if name == "ngram":
        return Ngram()
    return EagleHead(cost)


@pytest.mark.parametrize(
    ("layout", "drafter"),
    [(name, "eagle") for name in LAYOUTS] + [("deepseek-v3", "mtp"), ("gemma-3-12b", "ngram")],
)
@pytest.mark.parametrize("per_request", [False, True], ids=["per-batch", "per-request"])
def test_the_compiled_goodput_choice_is_the_policys(
    layout: str, drafter: str, per_request: bool
) -> None:
    """Random decode batches (contexts inside and far beyond the window, near-done requests):
    the compiled sweep (and refinement) choose what GoodputK.choose chooses pricing each
    candidate through the cost model."""
    cost = CostModel(**LAYOUTS[layout])
    proposer = _proposer(drafter, cost)
    compiled_drafter = compiled_proposer(proposer, cost)
    assert not isinstance(compiled_drafter, str), compiled_drafter
    rng = np.random.default_rng(11)
    chosen = set()
    for _ in range(25):
        n = int(rng.integers(1, 48))
        k_max = int(rng.integers(1, 7))
        policy = GoodputK(GoodputPolicy(kind="goodput", k_max=k_max, per_request=per_request))
        alphas = np.clip(rng.beta(*rng.uniform(0.4, 5.0, 2), n), 0.0, 1.0)
        remaining = rng.integers(1, 40, n)
        contexts = rng.integers(1, 20_000, n)
        target = cost.compiled(n * (k_max + 1))
        draft = target
        if not isinstance(proposer, Ngram):
            draft = proposer.cost.compiled(n, compiled_drafter.extra_gemm)  # type: ignore[attr-defined]
        call = goodput_k_per_request if per_request else goodput_k
        got = call(
            alphas, remaining, contexts, k_max, target, compiled_drafter.kind, draft, no_base()
        )
        want = _python_choice(policy, cost, proposer, alphas, remaining, contexts)
        assert got.tolist() == want
        chosen.update(want)
    assert len(chosen) > 2  # the batches chose several draft lengths


@pytest.mark.parametrize("layout", ["gemma-3-12b", "gpt-oss-20b", "llama-4-scout", "deepseek-v3"])
def test_the_sweep_stops_early_only_where_no_candidate_can_win(layout: str) -> None:
    """Local layers' attention never falls with more verify tokens (their correction reads the
    cached window, the same for every candidate), and an MLA module's falls by no more than its
    extra query tokens' share (``mla_verify_slack``), so the sweep's early stop stays exact."""
    cost = CostModel(**LAYOUTS[layout])
    compiled = cost.compiled(96 * 9)
    proposer = EagleHead(cost)
    draft = proposer.cost.compiled(96, (proposer.shape.hidden_size, proposer._fusion_k))
    assert compiled is not None and draft is not None and (compiled.window > 0 or compiled.mla)
    assert compiled.overhead_rises
    full = compiled._replace(overhead_rises=False)
    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(1, 96))
        alphas = rng.beta(*rng.uniform(0.5, 8.0, 2), n)
        remaining = rng.integers(1, 40, n)
        contexts = rng.integers(1, 16_000, n)
        k_max = int(rng.integers(1, 9))
        args = (alphas, remaining, contexts, k_max)
        stopped = goodput_k(*args, compiled, EAGLE, draft, no_base())
        swept = goodput_k(*args, full, EAGLE, draft, no_base())
        assert stopped.tolist() == swept.tolist()


def test_every_layer_of_a_prefill_group_prices_as_in_python() -> None:
    """What a step beside prefill chunks adds to its verify entries: every layer's prefill
    attention, local layers over their window, compiled per layer where that compiles."""
    rng = np.random.default_rng(8)
    for layout in LAYOUTS.values():
        cost = CostModel(**layout)
        for _ in range(40):
            tokens = int(rng.integers(1, 4000))
            cached = int(rng.integers(0, 12_000))
            stats = BatchStats()
            stats.add(tokens, cached, 1)
            want = cost._attention_all_layers(
                tokens, stats.prefill_kv_tokens, stats.prefill_pairs, decode=False, requests=1
            )
            got = cost.whole_prefill_attention(
                tokens, stats.prefill_kv_tokens, stats.prefill_pairs, 1
            )
            assert got == want


def _scenario(layout: str, proposer: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    return small_scenario(
        {
            "seed": 17,
            "workload.num_requests": 40,
            "workload.arrival": {"kind": "poisson", "rate": 12.0},
            "workload.prompt_tokens": {
                "kind": "lognormal",
                "mean": 1500,
                "sigma": 0.8,
                "max": 6000,
            },
            "workload.output_tokens": {"kind": "lognormal", "mean": 90, "sigma": 0.6, "max": 300},
            "cluster": {**LAYOUTS[layout], "replicas": 1},
            "scheduler.kind": "sarathi",
            "speculative": {
                "enabled": True,
                "proposer": proposer,
                "acceptance": {"kind": "per_request", "mean": 0.65, "concentration": 6},
                "policy": policy,
            },
        }
    )


def _stepped_in_python(data: dict[str, Any]) -> cbsim.Results:
    """``data`` stepped with every speculative step planned and priced in Python, as these models
    ran before: the cost models refuse to compile (``CostModel.compiled`` gives None)."""
    with mock.patch.object(CostModel, "compiled", lambda self, tokens, extra_gemm=None: None):
        return cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))


def _frames_equal(a: cbsim.Results, b: cbsim.Results) -> None:
    for name in ("requests", "iterations", "timeseries"):
        pd.testing.assert_frame_equal(
            getattr(a, name), getattr(b, name), check_exact=True, obj=name
        )
    assert summaries_equal(a.summary, b.summary)


GOODPUT = {"kind": "goodput", "k_max": 5, "per_request": True}
RUNS = [
    *[(name, {"kind": "eagle"}, GOODPUT) for name in LAYOUTS],
    ("deepseek-v3", {"kind": "mtp"}, {"kind": "goodput", "k_max": 3}),
    ("gemma-3-12b", {"kind": "draft_model", "model": "gemma-3-4b"}, {"kind": "fixed", "k": 3}),
    ("gpt-oss-20b", {"kind": "ngram"}, {"kind": "adaptive_hysteresis"}),
]


@pytest.mark.parametrize(
    ("layout", "proposer", "policy"), RUNS, ids=[f"{r[0]}-{r[1]['kind']}" for r in RUNS]
)
def test_a_compiled_speculative_run_is_the_python_planners(
    layout: str, proposer: dict[str, Any], policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same tables with the compiled kernels (decode runs fast-forwarded, stepped
    iterations fused) as stepping with every speculative step planned and priced in Python
    (what these models ran before), and fast-forwarding as stepping."""
    data = _scenario(layout, proposer, policy)
    runs: list[bool] = []
    plan = replica_module.plan_spec_run

    def spy(*args: Any, **kwargs: Any) -> Any:
        run = plan(*args, **kwargs)
        runs.append(run is not None)
        return run

    with monkeypatch.context() as patch:
        patch.setattr(replica_module, "plan_spec_run", spy)
        forward = cbsim.simulate(cbsim.load_scenario(data))
    assert any(runs)  # decode runs were fast-forwarded compiled
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    python = _stepped_in_python(data)
    assert forward.iterations["verify_tokens"].sum() > 0
    _frames_equal(python, forward)
    _frames_equal(stepped, forward)


# the k policies the compiled kernels plan (the others' per-request controllers step in Python)
COMPILED_POLICIES = st.one_of(
    st.builds(lambda k: {"kind": "fixed", "k": k}, st.integers(1, 6)),
    st.builds(
        lambda k, per: {"kind": "goodput", "k_max": k, "per_request": per},
        st.integers(1, 6),
        st.booleans(),
    ),
    st.just({"kind": "adaptive_hysteresis"}),
    st.just({"kind": "batch_table", "table": [[1, 4, 5], [5, 16, 2], [17, 100_000, 0]]}),
)
DRAFTERS = {
    "gemma-3-12b": [
        {"kind": "eagle"},
        {"kind": "ngram"},
        {"kind": "draft_model", "model": "gemma-3-4b"},
    ],
    "gpt-oss-20b": [{"kind": "eagle"}, {"kind": "ngram"}],
    "llama-4-scout": [{"kind": "eagle"}, {"kind": "ngram"}],
    "deepseek-v3": [{"kind": "eagle"}, {"kind": "ngram"}, {"kind": "mtp"}],
    "l40s": [{"kind": "eagle"}, {"kind": "draft_model", "model": "llama-3.2-1b"}],
}


@st.composite
def attention_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Small speculative runs of the local-, latent-attention and transfer-GPU layouts: drawn
    drafting, acceptance, compiled k policy, scheduler and load (memory pressure is fuzzed on
    Llama in tests.test_speculative_properties: the reservation is the same code)."""
    layout = draw(st.sampled_from(sorted(LAYOUTS)))
    max_batch_size = draw(st.integers(1, 40))
    low, high = sorted(draw(st.lists(st.integers(1, 6000), min_size=2, max_size=2)))
    out_low, out_high = sorted(draw(st.lists(st.integers(1, 200), min_size=2, max_size=2)))
    cluster: dict[str, Any] = {**LAYOUTS[layout], "replicas": draw(st.integers(1, 2))}
    kind = draw(st.sampled_from(["static", "orca", "vllm", "sarathi"]))
    return {
        "seed": draw(st.integers(0, 2**16)),
        "workload": {
            "num_requests": draw(st.integers(1, 30)),
            "arrival": {"kind": "poisson", "rate": draw(st.floats(1.0, 60.0))},
            "prompt_tokens": {"kind": "uniform", "low": low, "high": high},
            "output_tokens": {"kind": "uniform", "low": out_low, "high": out_high},
        },
        "cluster": cluster,
        "scheduler": drawn_scheduler(draw, kind, max_batch_size),
        "speculative": {
            "enabled": True,
            "proposer": draw(st.sampled_from(DRAFTERS[layout])),
            "acceptance": draw(acceptances()),
            "policy": draw(COMPILED_POLICIES),
        },
    }


@engine_settings(8)
@given(data=attention_scenarios())
def test_fuzzed_runs_keep_the_invariants_and_plan_as_in_python(data: dict[str, Any]) -> None:
    """Every run drains, conserves tokens, keeps KV within the cache and k within the policy's
    maximum (tests.test_speculative_properties' invariants), fast-forwards as it steps, and
    plans compiled as the Python planner does."""
    forward = cbsim.simulate(cbsim.load_scenario(data))
    check_invariants(data, forward)
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    _frames_equal(stepped, forward)
    _frames_equal(_stepped_in_python(data), forward)
