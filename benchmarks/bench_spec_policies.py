"""Wall time of speculative runs with the engine k policies of issue 28, against plain decoding,
and their speed-up over no speculation per load.

Part 1 (wall time): the shipped ``scenarios/spec-eagle-goodput.yaml`` (Llama-3-8B, one H100,
EAGLE, 600 requests) is run with speculation off and with each policy (and TensorRT-LLM's
schedule with its stale drafter after k = 0, and two policies with positional acceptance varying
per request, ``+ levels``); the ratio of wall times must stay ≤ 2 (each run is timed best of
``--repeat`` after a warm-up run that compiles).

Part 2 (``--sweep``): for request rates from light load to saturation, TPOT speed-up over no
speculation (no-spec TPOT / spec TPOT, > 1 favours speculation) of fixed k = 3, the engines'
batch tables (vLLM's DSD example, TensorRT-LLM's draft_len_schedule example), SGLang's adaptive
hysteresis and cbsim's goodput policy (per batch and per request), with EAGLE-3 acceptance as vLLM
publishes it for Llama-3.1-8B (unconditional 0.7296 / 0.5208 / 0.3545).

Usage: python benchmarks/bench_spec_policies.py [--repeat N] [--sweep] [--requests N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

import cbsim

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "spec-eagle-goodput.yaml"
EAGLE3 = {"kind": "positional", "profile": "eagle3-llama-3.1-8b-mtbench"}
# the same rates with per-request variation (each request's own level θ ~ Beta around the mean)
EAGLE3_LEVELS = {**EAGLE3, "concentration": 20}

POLICIES: dict[str, dict[str, Any]] = {
    "fixed k=3": {"kind": "fixed", "k": 3},
    "vLLM DSD table": {"kind": "batch_table", "preset": "vllm-dsd-example"},
    "TRT-LLM schedule": {"kind": "batch_table", "preset": "trtllm-draft-len-schedule-example"},
    "SGLang adaptive": {"kind": "adaptive_hysteresis"},
    "goodput": {"kind": "goodput", "k_max": 6},
    "goodput per request": {"kind": "goodput", "k_max": 6, "per_request": True},
}


def scenario(policy: dict[str, Any] | None, rate: float | None = None, requests: int | None = None,
             acceptance: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    data: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    if rate is not None:
        data["workload"]["arrival"] = {"kind": "poisson", "rate": rate}
    if requests is not None:
        data["workload"]["num_requests"] = requests
    if policy is None:
        data["speculative"] = {"enabled": False}
    else:
        data["speculative"]["policy"] = policy
        if acceptance is not None:
            data["speculative"]["acceptance"] = acceptance
    return data


def timed(data: dict[str, Any], repeat: int) -> tuple[float, cbsim.Results]:
    best, results = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        results = cbsim.simulate(cbsim.load_scenario(data))
        best = min(best, time.perf_counter() - started)
    assert results is not None
    return best, results


def paired(
    data: dict[str, Any], plain_data: dict[str, Any], repeat: int
) -> tuple[float, float, str]:
    """Best-of-``repeat`` wall seconds of ``data`` and of the plain run, timed alternately (the
    machine is shared: alternating keeps both under the same load), and the run's fast-path note."""
    cbsim.simulate(cbsim.load_scenario(data))  # warm-up (compiles)
    best, best_plain, note = float("inf"), float("inf"), "compiled"
    for _ in range(repeat):
        wall_plain, _ = timed(plain_data, 1)
        wall, results = timed(data, 1)
        best, best_plain = min(best, wall), min(best_plain, wall_plain)
        note = str(results.run_info.get("fast_forward_note", "compiled"))
    return best, best_plain, note


def wall_times(repeat: int) -> None:
    plain_data = scenario(None)
    cbsim.simulate(cbsim.load_scenario(plain_data))  # warm-up
    print(f"{'policy':<28} {'wall s':>8} {'plain s':>8} {'× plain':>8}  note")
    runs = {name: scenario(policy) for name, policy in POLICIES.items()}
    stale = scenario(POLICIES["TRT-LLM schedule"])
    stale["speculative"]["drafter_state_at_k0"] = "stale"  # TensorRT-LLM's k = 0 defect
    runs["TRT-LLM + stale k=0"] = stale
    for name in ("fixed k=3", "goodput per request"):  # positional acceptance varying per request
        runs[f"{name} + levels"] = scenario(POLICIES[name], acceptance=EAGLE3_LEVELS)
    for name, data in runs.items():
        wall, plain, note = paired(data, plain_data, repeat)
        print(f"{name:<28} {wall:8.3f} {plain:8.3f} {wall / plain:8.2f}  {note}")


def sweep(requests: int) -> None:
    rates = (1.0, 5.0, 15.0, 30.0, 60.0)
    names = list(POLICIES)
    print("TPOT speed-up over no speculation (> 1 favours speculation); mean batch size")
    print(f"{'rate':>6} {'batch':>6} " + " ".join(f"{n[:18]:>18}" for n in names))
    for rate in rates:
        base = cbsim.simulate(cbsim.load_scenario(scenario(None, rate, requests))).summary
        cells = []
        for name in names:
            s = cbsim.simulate(
                cbsim.load_scenario(scenario(POLICIES[name], rate, requests, EAGLE3))
            ).summary
            cells.append(f"{base['tpot_mean_s'] / s['tpot_mean_s']:18.3f}")
        print(f"{rate:6.0f} {base['mean_batch_size']:6.1f} " + " ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    wall_times(args.repeat)
    if args.sweep:
        sweep(args.requests)


if __name__ == "__main__":
    main()
