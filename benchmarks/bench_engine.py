"""Engine speed benchmark (not a test): wall time, simulated requests per wall second, peak memory.

Runs, each in a fresh subprocess (so peak RSS is its own):
  * the Azure LLM conversation trace, one hour, 19,366 requests, llama-3-8b on h100-sxm, vllm;
  * 100,000 synthetic chat requests (Poisson, lognormal lengths) on the same replica;
  * each again with fast_forward off (every iteration its own SimPy event), for comparison.

Usage: python benchmarks/bench_engine.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CASES: dict[str, dict[str, object]] = {
    "azure-conv-1h": {
        "name": "bench-azure-conv",
        "workload": {"trace": {"path": "azure-conv-2023"}},
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": "vllm"},
    },
    "synthetic-100k": {
        "name": "bench-synthetic",
        "workload": {
            "num_requests": 100_000,
            "arrival": {"kind": "poisson", "rate": 8.0},
            "prompt_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8000},
            "output_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.7, "max": 1000},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": "vllm"},
    },
}

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import cbsim
    scenario = cbsim.load_scenario(json.loads(sys.argv[1]))
    t0 = time.perf_counter()
    results = cbsim.simulate(scenario)
    wall = time.perf_counter() - t0
    s = results.summary
    print(json.dumps({
        "wall_s": wall,
        "requests": s["requests"],
        "iterations": s["iterations"],
        "simulated_s": results.run_info["simulated_s"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    """
)


def run_case(scenario: dict[str, object]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(scenario)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the fast_forward=off runs")
    args = parser.parse_args()
    header = (
        f"{'case':<34}{'wall s':>9}{'req/wall s':>12}{'iterations':>12}{'sim s':>9}{'peak MiB':>10}"
    )
    print(header)
    print("-" * len(header))
    for label, scenario in CASES.items():
        modes = [True] if args.quick else [True, False]
        for fast_forward in modes:
            r = run_case({**scenario, "fast_forward": fast_forward})
            name = f"{label} (fast_forward={'on' if fast_forward else 'off'})"
            print(
                f"{name:<34}{r['wall_s']:>9.2f}{r['requests'] / r['wall_s']:>12,.0f}"
                f"{r['iterations']:>12,}{r['simulated_s']:>9,.0f}{r['peak_rss_mib']:>10,.0f}"
            )


if __name__ == "__main__":
    main()
