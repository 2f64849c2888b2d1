"""Client timeouts and closed loops at their edges: what a timed-out request keeps, times that never
run backwards, and closed loops whose every request is rejected or given up.

Each test replays a defect the feature campaigns found (issue 38), in a scenario a few requests
long: llama-3-8b on an H100.
"""

from __future__ import annotations

from typing import Any

import cbsim


def run(data: dict[str, Any]) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(data))


def tokens_conserved(results: cbsim.Results) -> bool:
    """The iterations emitted exactly the tokens the requests record as generated."""
    emitted = int(results.iterations["emitted_tokens"].sum())
    return emitted == int(results.requests["generated_tokens"].sum())


def closed_loop(
    concurrency: int, requests: int, timeout_s: float, **cluster: Any
) -> dict[str, Any]:
    return {
        "seed": 3,
        "workload": {
            "num_requests": requests,
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "prompt_tokens": {"kind": "uniform", "low": 10, "high": 200},
            "output_tokens": {"kind": "uniform", "low": 1, "high": 5},
            "client": {"timeout_s": timeout_s},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "engine": "vllm", **cluster},
    }


def test_a_request_given_up_as_its_prefill_ends_generated_nothing() -> None:
    """Disaggregated, a request whose timeout fell in its prefill kept the token its prefill
    instance sampled (``generated_tokens`` 1) though that iteration emits none (the decode
    instance computes the first token): the requests recorded more tokens than were emitted."""
    split = {"prefill": {}, "decode": {}}
    results = run(closed_loop(6, 12, 0.005, disaggregation=split))  # a prefill takes ~16 ms
    req = results.requests
    assert (req["status"] == "timed_out").all()
    assert (req["generated_tokens"] == 0).all()
    assert req["first_token_s"].isna().all()
    assert tokens_conserved(results)
