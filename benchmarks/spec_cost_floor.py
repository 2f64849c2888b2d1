"""How close a speculative run can come to the plain one: its compiled work against the plain run.

Not a test: prints figures (about two minutes). A speculative run goes through the same runs and
steps as the plain run of the same scenario (the same arrivals cut the same decode runs, the same
prefill chunks form stepped iterations), and on top of them its compiled kernels draw each
decoding request's acceptance, choose its k and price the drafts and the verification every
iteration. For each case this script measures, in one process:

* the plain and the speculative simulation's CPU seconds (best of ``--repeats``, no profiler,
  plain and speculative runs alternating: this machine's speed drifts within minutes);
* under ``cProfile``, the seconds each spent inside cbsim's compiled kernels (the profile's
  built-in functions of ``cbsim`` modules: compiled code runs at full speed under the profiler,
  only each call's entry is counted);
* the **floor**: (plain − plain's kernels + speculative kernels) ÷ plain, the ratio the
  speculative run would have if all of its Python work (scheduling, bookkeeping, planning)
  cost no more than the plain run's and its compiled work stayed what it is.

A floor above 1.3 says that the issue's "speculative ≤ 1.3× plain" cannot be reached by taking
Python out of the speculative path alone: the compiled work itself must shrink.

    python benchmarks/spec_cost_floor.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_suite import AZURE, BUSY, SPECULATIVE

import cbsim

POLICIES: dict[str, dict[str, Any]] = {
    "goodput": {"kind": "goodput", "k_max": 8},
    "fixed k=3": {"kind": "fixed", "k": 3},
    "adaptive_hysteresis": {"kind": "adaptive_hysteresis"},
}


def _cases(quick: bool) -> list[tuple[str, dict[str, Any], list[str]]]:
    azure_sarathi = {**copy.deepcopy(AZURE), "scheduler": {"kind": "sarathi"}}
    azure_prefill_first = copy.deepcopy(AZURE)
    busy = copy.deepcopy(BUSY)
    if quick:
        for scenario in (azure_sarathi, azure_prefill_first):
            scenario["workload"]["duration_s"] = 600.0
        busy["workload"]["duration_s"] = 120.0
    every = list(POLICIES)
    return [
        ("Azure hour, sarathi", azure_sarathi, every),
        ("Azure hour, prefill_first", azure_prefill_first, ["goodput"]),
        ("busy replica, sarathi", busy, ["goodput"]),
    ]


def _speculative(scenario: dict[str, Any], policy: str) -> dict[str, Any]:
    spec = copy.deepcopy(SPECULATIVE)
    spec["policy"] = copy.deepcopy(POLICIES[policy])
    return {**copy.deepcopy(scenario), "speculative": spec}


def _warm(scenario: dict[str, Any]) -> None:
    """One short run first, so that loading the cached kernels is not timed."""
    short = copy.deepcopy(scenario)
    short["workload"]["duration_s"] = 20.0
    cbsim.simulate(cbsim.load_scenario(short))


def _best_cpu(scenarios: list[Any], repeats: int) -> list[float]:
    """Each scenario's least CPU seconds over ``repeats`` rounds, the scenarios alternating."""
    best = [float("inf")] * len(scenarios)
    for _ in range(repeats):
        for i, scenario in enumerate(scenarios):
            start = time.process_time()
            cbsim.simulate(scenario)
            best[i] = min(best[i], time.process_time() - start)
    return best


def _kernel_seconds(scenario: Any) -> float:
    """Seconds inside cbsim's compiled kernels during one simulation, from a profile."""
    profile = cProfile.Profile()
    profile.enable()
    cbsim.simulate(scenario)
    profile.disable()
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return float(
        sum(
            entry[2]  # tottime
            for (filename, _, name), entry in stats.items()
            if filename == "~" and name.startswith("<built-in method cbsim.")
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="ten-minute traces, two busy minutes")
    args = parser.parse_args()
    header = (
        f"{'case':28s} {'policy':20s} {'plain s':>8s} {'kernels':>8s} {'spec s':>8s} "
        f"{'kernels':>8s} {'ratio':>6s} {'floor':>6s}"
    )
    print(header)
    for label, plain_data, policies in _cases(args.quick):
        _warm(plain_data)
        plain = cbsim.load_scenario(plain_data)
        specs = []
        for policy in policies:
            spec_data = _speculative(plain_data, policy)
            _warm(spec_data)
            specs.append(cbsim.load_scenario(spec_data))
        plain_s, *spec_seconds = _best_cpu([plain, *specs], args.repeats)
        plain_kernels = _kernel_seconds(plain)
        for policy, spec, spec_s in zip(policies, specs, spec_seconds, strict=True):
            spec_kernels = _kernel_seconds(spec)
            floor = (plain_s - plain_kernels + spec_kernels) / plain_s
            print(
                f"{label:28s} {policy:20s} {plain_s:8.3f} {plain_kernels:8.3f} {spec_s:8.3f} "
                f"{spec_kernels:8.3f} {spec_s / plain_s:6.2f} {floor:6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
