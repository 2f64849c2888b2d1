"""vLLM's V0 engine as its own profile: CPU work per step that adds to the kernels."""

from __future__ import annotations

import numpy as np
import pytest

from cbsim.cost import CostModel
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.run.loading import apply_engine_defaults, load_scenario
from cbsim.studies.calibration.engines import base_profile
from cbsim.studies.calibration.overhead import GPU, fit_engine_version, simulate_static_batch
from cbsim.studies.calibration.profile import load_profile


def test_v0_steps_pay_their_cpu_work_on_top_of_the_kernels() -> None:
    v0 = load_engine_profile("vllm-v0")
    assert not v0.overhead.overlap
    bare = CostModel("llama-3-8b", "a100-80gb", engine="none", calibration="default")
    model = CostModel("llama-3-8b", "a100-80gb", engine="vllm-v0")
    for requests in (1, 64):
        batch = [(1, 1000)] * requests
        added = model.iteration_time(batch) - bare.iteration_time(batch)
        expected = v0.overhead.cpu_s + v0.overhead.cpu_per_request_s * requests
        assert added == pytest.approx(expected, rel=0.05)


def test_v0_defaults_are_the_v0_scheduler() -> None:
    scenario = load_scenario(
        {
            "workload": {
                "num_requests": 4,
                "arrival": {"kind": "offline"},
                "prompt_tokens": {"kind": "fixed", "value": 100},
                "output_tokens": {"kind": "fixed", "value": 10},
            },
            "cluster": {"model": "llama-3-8b", "gpu": "a100-80gb", "engine": "vllm-v0"},
        }
    )
    resolved = apply_engine_defaults(scenario)
    assert resolved.scheduler.kind == "prefill_first"
    assert resolved.scheduler.max_batch_size == 256


def test_v0_fit_holds_out_each_model_within_the_targets() -> None:
    """Fitted on LLM-Inference-Bench's A100 vLLM batches, each model predicted by a fit without
    it: median absolute error at most 10%, P90 at most 25%."""
    _, held = fit_engine_version(base_profile("vllm-v0"))
    errors = np.abs(held["predicted_s"] / held["measured_s"] - 1.0)
    assert np.median(errors) <= 0.10
    assert np.percentile(errors, 90) <= 0.25


def test_a_static_batch_is_priced_on_the_kernels_it_is_given() -> None:
    """The overhead fits of engines without closed-loop benchmarks simulate each batch on the
    calibrated A100 kernels with no engine: its time is the priced steps' sum, not the bare
    roofline's (nor the roofline under another engine's profile)."""
    profile = load_profile(GPU)
    assert profile is not None
    calibrated = simulate_static_batch("llama-3-8b", 1, 128, 8, profile)
    bare = simulate_static_batch("llama-3-8b", 1, 128, 8, None)
    assert calibrated.completed and bare.completed
    assert calibrated.iterations == bare.iterations == 128
    assert calibrated.kernel_s != pytest.approx(bare.kernel_s, rel=0.01)
    model = CostModel("llama-3-8b", GPU, dtype="fp16", calibration=profile, engine=None)
    steps = [model.iteration_time([(128, 0)] * 8)]
    # the prefill's step makes each request's first token; decode steps read 128, 129, ... tokens
    steps += [model.iteration_time([(1, 128 + i)] * 8) for i in range(127)]
    assert calibrated.kernel_s == pytest.approx(sum(steps), rel=1e-9)
