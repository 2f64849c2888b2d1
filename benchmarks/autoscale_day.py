"""A day of traffic, autoscaled against the fixed fleet bought for its peak (not a test).

Simulates ``scenarios/diurnal-autoscale-llama3-70b.yaml`` (24 h, a rate curve from 0.25 req/s at
night to 4 req/s in the afternoon, Llama-3-70B TP 4 on H100s) twice, in two processes at once:

* **autoscaled**: as shipped (``cluster.autoscale``: the request rate per replica counted over a
  minute, target 1.2 req/s, 1 to 6 replicas, the HPA's default 300 s scale-down window);
* **fixed**: without the autoscaler, with the replicas a capacity planner buys for the peak
  rate: ``cbsim.studies.capacity.plan`` of the same traffic as Poisson arrivals at the peak rate under
  the scenario's SLO read at p99 (TTFT p99 and TPOT p99 within ``slo``), or ``--fixed-replicas``.

For each it prints GPU-hours, their cost (the GPU's catalog price per GPU-hour), the replicas
serving (mean, most), p99 TTFT and TPOT, and SLO attainment: the share of all requests whose
TTFT is within ``slo.ttft_s`` (TTFT attainment), whose TPOT is within ``slo.tpot_s`` (TPOT
attainment; a one-token answer has no TPOT and meets it) and that meet both (the summary's
``slo_attainment``); a request not finished meets neither.

Usage: python benchmarks/autoscale_day.py [--fixed-replicas N] [--duration-s S]
       [--metric M --target T] [--set cluster.autoscale.KEY=VALUE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

import cbsim
from cbsim.studies.capacity import plan

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "diurnal-autoscale-llama3-70b.yaml"


def fixed_fleet(data: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The scenario without its autoscaler, ``replicas`` replicas serving all day."""
    cluster = {k: v for k, v in data["cluster"].items() if k != "autoscale"}
    return {**data, "name": f"{data['name']}-fixed", "cluster": {**cluster, "replicas": replicas}}


def peak_rate(data: dict[str, Any]) -> float:
    return float(max(rate for _, rate in data["workload"]["arrival"]["points"]))


def planned_replicas(data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The replicas ``cbsim.studies.capacity.plan`` buys for the peak rate (Poisson arrivals) within the
    scenario's SLO read at p99."""
    peak = peak_rate(data)
    poisson = fixed_fleet(data, 1)
    arrival = {"kind": "poisson", "rate": peak}
    poisson["workload"] = {**data["workload"], "arrival": arrival, "duration_s": 600.0}
    slo = {"ttft_p99_s": data["slo"]["ttft_s"], "tpot_p99_s": data["slo"]["tpot_s"]}
    found = plan(poisson, slo, target_rps=peak, workers=1)
    return int(found["replicas"]), {
        "max_rate_rps": found["max_rate_rps"],
        "simulations": found["simulations"],
    }


def figures(data: dict[str, Any]) -> dict[str, Any]:
    """One day simulated: its fleet, cost and SLO figures."""
    started = time.perf_counter()
    results = cbsim.simulate(cbsim.load_scenario(data))
    wall = time.perf_counter() - started
    s, requests = results.summary, results.requests
    finished = (requests["status"] == "finished").to_numpy()
    ttft = requests["ttft_s"].to_numpy(dtype=float)
    tpot = requests["tpot_s"].to_numpy(dtype=float)
    slo = data["slo"]
    ttft_ok = finished & (ttft <= slo["ttft_s"])
    tpot_ok = finished & (np.isnan(tpot) | (tpot <= slo["tpot_s"]))
    n = len(requests)
    return {
        "requests": n,
        "completed": s["completed"],
        "gpu_hours": s["gpu_hours"],
        "cost_usd": s["cost_usd"],
        "replicas_mean": s["replicas_mean"],
        "replicas_max": s["replicas_max"],
        "scale_ups": s["scale_ups"],
        "scale_downs": s["scale_downs"],
        "ttft_p99_s": s["ttft_p99_s"],
        "tpot_p99_s": s["tpot_p99_s"],
        "ttft_attainment": float(ttft_ok.sum() / n) if n else math.nan,
        "tpot_attainment": float(tpot_ok.sum() / n) if n else math.nan,
        "slo_attainment": s["slo_attainment"],
        "wall_s": wall,
    }


ROWS = (
    ("requests", "requests", "{:,}"),
    ("GPU-hours", "gpu_hours", "{:,.1f}"),
    ("cost (USD)", "cost_usd", "{:,.0f}"),
    ("replicas mean / max", None, ""),
    ("scale-ups / scale-downs", None, ""),
    ("TTFT p99 (s)", "ttft_p99_s", "{:.2f}"),
    ("TPOT p99 (ms)", "tpot_p99_s", "ms"),
    ("TTFT attainment", "ttft_attainment", "{:.2%}"),
    ("TPOT attainment", "tpot_attainment", "{:.2%}"),
    ("both (slo_attainment)", "slo_attainment", "{:.2%}"),
    ("wall time (s)", "wall_s", "{:.0f}"),
)


def _cell(row: tuple[str, str | None, str], f: dict[str, Any]) -> str:
    label, key, spec = row
    if label.startswith("replicas"):
        return f"{f['replicas_mean']:.2f} / {f['replicas_max']}"
    if label.startswith("scale"):
        return f"{f['scale_ups']} / {f['scale_downs']}"
    assert key is not None
    if spec == "ms":
        return f"{f[key] * 1e3:.1f}"
    return spec.format(f[key])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixed-replicas", type=int, help="skip the capacity search")
    parser.add_argument("--duration-s", type=float, help="simulate only the day's first S s")
    parser.add_argument(
        "--metric", help="autoscale on this metric instead (queue, kv_utilization, rps)"
    )
    parser.add_argument("--target", type=float, help="the metric's target instead")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any scenario key (cluster.autoscale.stabilization_s=0, ...), repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    overrides: dict[str, Any] = {}
    if args.metric:
        overrides["cluster.autoscale.metric"] = args.metric
    if args.target:
        overrides["cluster.autoscale.target"] = args.target
    for pair in args.set:
        key, _, value = pair.partition("=")
        overrides[key] = yaml.safe_load(value)
    data = cbsim.load_scenario(SCENARIO, overrides).to_dict()
    if args.duration_s:
        data["workload"]["duration_s"] = args.duration_s
    search: dict[str, Any] = {}
    if args.fixed_replicas:
        replicas = args.fixed_replicas
    else:
        started = time.perf_counter()
        replicas, search = planned_replicas(data)
        search["wall_s"] = time.perf_counter() - started
    with ProcessPoolExecutor(max_workers=2) as pool:
        auto_job = pool.submit(figures, data)
        fixed_job = pool.submit(figures, fixed_fleet(data, replicas))
        auto, fixed = auto_job.result(), fixed_job.result()
    out = {
        "scenario": SCENARIO.relative_to(ROOT).as_posix(),
        "autoscale": data["cluster"]["autoscale"],
        "peak_rps": peak_rate(data),
        "fixed_replicas": replicas,
        "capacity_search": search,
        "autoscaled": auto,
        "fixed": fixed,
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['scenario']}: peak {out['peak_rps']:g} req/s; fixed fleet {replicas} replicas",
        end="",
    )
    print(f" (capacity plan: {search['max_rate_rps']:.2f} req/s per replica)" if search else "")
    print(f"{'':26}{'autoscaled':>14}{'fixed':>14}")
    for row in ROWS:
        print(f"{row[0]:26}{_cell(row, auto):>14}{_cell(row, fixed):>14}")


if __name__ == "__main__":
    main()
