"""Performance suite (not a test): one table of cbsim's speed and memory on this machine.

Cases (``--quick`` shortens them; labels say which ran):
  * ``azure-1h-plain``: the Azure LLM conversation trace, one hour, 19,366 requests, llama-3-8b on
    h100-sxm, vllm scheduler (``--quick``: its first 600 s, ``azure-600s-plain``);
  * ``azure-1h-spec``: the same with speculative decoding (EAGLE proposer, per-request acceptance
    Beta(mean 0.6, concentration 8), goodput k policy, k_max 8);
  * ``busy-10m-plain`` / ``busy-10m-spec``: one busy replica (llama-3-70b on four h100-sxm,
    sarathi, 256 requests and 1,024 tokens a step) serving the Azure trace at 2.4 times its rate
    for ten minutes, about 150 requests running, without and with the same speculative decoding
    (its k policy's k_max 6): what a capacity search's fleet checks simulate
    (``--quick``: two minutes);
  * ``mooncake-1h-nocache`` / ``mooncake-1h-prefix``: the Mooncake conversation trace, one hour,
    12,031 requests (prompt blocks with content ids), llama-3.1-8b on h100-sxm, prefix caching off
    and on; ``mooncake-1h-4x-*``: the same on four replicas, least-loaded routing, and
    ``mooncake-1h-4x-aware`` with prefix caching and ``prefix_aware`` routing (which, with no
    cache, routes as least-loaded: its baseline is ``mooncake-1h-4x-nocache``);
  * ``synthetic-200k`` and ``synthetic-1m``: Poisson chat requests at 8/s, lognormal lengths, on the
    same replica (``--quick``: 20,000 requests, no 1M case);
  * ``synthetic-1m-stream``: the 1M case with its iterations streamed to parquet
    (``simulate(..., stream_to=...)``, a file in a temporary directory) instead of held
    (``--quick``: ``synthetic-20k-stream``);
  * ``simpy-bare``: a bare SimPy loop (one process yielding ``env.timeout(1e-3)`` N times beside a
    second one with another period, so the heap holds more than one event), the ceiling for
    cbsim's events per second;
  * ``capacity-spec``: the README's 70B capacity plan (``scenarios/capacity-70b-azure.yaml``; GPU
    kind × TP × speculation off/on, target 110 req/s, 60 s windows, seed 1), run through
    :func:`cbsim.studies.capacity.plan` exactly as ``cbsim capacity`` calls it (skipped with ``--quick``).

How: each case runs in a fresh subprocess (so its peak RSS, ``ru_maxrss``, is its own). The child
first runs a warm-up simulation of the same kind (the same scenario cut to 20 requests: same
cluster, scheduler and speculative section), timed as ``startup`` (first-call costs: trace and
profile loading and, once cbsim compiles kernels, their JIT or on-disk cache), then times
``cbsim.simulate(scenario)`` alone as ``wall`` (a streamed case includes writing its file). SimPy events are counted from the environment of
every simulation run (``Environment._eid``, SimPy's event-id counter, is the number of events
scheduled; those still queued at the end are subtracted), so ``events/s`` = events processed /
wall. ``sim req/wall s`` = simulated requests per wall second.

Usage: python benchmarks/bench_suite.py [--quick] [--only TEXT ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARMUP_REQUESTS = 20
QUICK_DURATION_S = 600.0

AZURE: dict[str, Any] = {
    "name": "bench-azure",
    "seed": 1,
    "workload": {"trace": {"path": "azure-conv-2023"}},
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
    "scheduler": {"kind": "prefill_first"},
}
# the Mooncake conversation trace (prompt blocks with content ids), prefix caching off and on
MOONCAKE: dict[str, Any] = {
    "name": "bench-mooncake",
    "seed": 1,
    "workload": {"trace": {"path": "mooncake-conversation"}},
    "cluster": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "prefix_caching": False},
}
SPECULATIVE: dict[str, Any] = {
    "enabled": True,
    "proposer": {"kind": "eagle"},
    "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
    "policy": {"kind": "goodput", "k_max": 8},
}
# one busy replica of the capacity plan's kind (about 150 requests running)
BUSY: dict[str, Any] = {
    "name": "bench-busy",
    "seed": 1,
    "workload": {"trace": {"path": "azure-conv-2023", "rate_scale": 2.4}, "duration_s": 600.0},
    "cluster": {"model": "llama-3-70b", "gpu": "h100-sxm", "tp": 4},
    "scheduler": {"kind": "sarathi", "max_batch_size": 256, "chunk_size": 1024},
}
CAPACITY_SCENARIO = ROOT / "scenarios" / "capacity-70b-azure.yaml"
# the README's 70B plan, as `cbsim capacity` arguments (parsed by the same functions)
CAPACITY_ARGS: dict[str, Any] = {
    "slo": ["ttft_p99_s=2,tpot_p99_s=0.1"],
    "vary": ["cluster.gpu=h100-sxm,h200", "cluster.tp=4,8", "speculative.enabled=false,true"],
    "target_rps": 110.0,
    "window_s": 60.0,
    "seeds": [1],
}


def synthetic(num_requests: int) -> dict[str, Any]:
    """The synthetic chat scenario with ``num_requests`` requests."""
    return {
        "name": "bench-synthetic",
        "seed": 1,
        "workload": {
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate": 8.0},
            "prompt_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8000},
            "output_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.7, "max": 1000},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": "prefill_first"},
    }


def warmup_of(scenario: dict[str, Any]) -> dict[str, Any]:
    """The same scenario cut to its first ``WARMUP_REQUESTS`` requests."""
    workload = {**scenario["workload"], "num_requests": WARMUP_REQUESTS}
    return {**scenario, "name": f"{scenario['name']}-warmup", "workload": workload}


# Child process: reads one case spec (JSON, argv[1]), prints one JSON line of figures.
CHILD = textwrap.dedent(
    """
    import json, resource, sys, tempfile, time
    spec = json.loads(sys.argv[1])
    stats = {"events": 0, "requests": 0, "iterations": 0, "simulations": 0}

    def peak_rss_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def count_events(env):
        # events scheduled (SimPy's event-id counter) less those still queued at the end
        return next(env._eid) - len(env._queue)

    if spec["kind"] == "simpy":
        import simpy

        def loop(env, n, delay):
            for _ in range(n):
                yield env.timeout(delay)

        def bare(n):
            env = simpy.Environment()
            env.process(loop(env, n, 1e-3))
            env.process(loop(env, int(n * 1e-3 / 3.7e-3), 3.7e-3))
            t0 = time.perf_counter()
            env.run()
            return time.perf_counter() - t0, count_events(env)

        startup, _ = bare(spec["warmup_events"])
        wall, events = bare(spec["events"])
        print(json.dumps({"wall_s": wall, "startup_s": startup, "import_s": 0.0,
                          "events": events, "peak_rss_mib": peak_rss_mib()}))
        sys.exit(0)

    t0 = time.perf_counter()
    import cbsim
    import cbsim.engine.loop
    import_s = time.perf_counter() - t0
    simulate_module = sys.modules["cbsim.run.simulate"]

    class CountingSimulation(cbsim.engine.loop.Simulation):
        def run(self):
            recorder = super().run()
            stats["events"] += count_events(self.env)
            stats["requests"] += len(recorder.request_columns)  # not a frame built to count
            stats["iterations"] += recorder.rows
            stats["simulations"] += 1
            return recorder

    # cbsim.simulate (and everything that calls it) builds its Simulation from this name
    simulate_module.Simulation = CountingSimulation

    if "warmup" in spec:
        warmup = cbsim.load_scenario(spec["warmup"])
    else:  # the capacity scenario file, speculating, cut to a few requests
        warmup = cbsim.load_scenario(spec["scenario_path"], overrides=spec["warmup_overrides"])
    t0 = time.perf_counter()
    cbsim.simulate(warmup)
    startup = time.perf_counter() - t0
    stats.update(events=0, requests=0, iterations=0, simulations=0)

    out = {"import_s": import_s, "startup_s": startup}
    if spec["kind"] == "simulate":
        scenario = cbsim.load_scenario(spec["scenario"])
        with tempfile.TemporaryDirectory() as tmp:
            stream_to = f"{tmp}/iterations.parquet" if spec.get("stream") else None
            t0 = time.perf_counter()
            results = cbsim.simulate(scenario, stream_to=stream_to)
            wall = time.perf_counter() - t0
        s = results.summary
        out.update(requests=s["requests"], iterations=s["iterations"],
                   simulated_s=results.run_info["simulated_s"])
    else:  # capacity
        from cbsim.studies.capacity import parse_slo, parse_vary, plan
        args = spec["capacity"]
        scenario = cbsim.load_scenario(spec["scenario_path"])
        t0 = time.perf_counter()
        result = plan(scenario, parse_slo(args["slo"]) or None, target_rps=args["target_rps"],
                      vary=parse_vary(args["vary"]), seeds=args["seeds"],
                      window_s=args["window_s"])
        wall = time.perf_counter() - t0
        best = result.get("best") or {}
        out.update(requests=stats["requests"], iterations=stats["iterations"],
                   plan_simulations=result["simulations"],
                   best=best.get("overrides"), best_max_rate_rps=best.get("max_rate_rps"))
    out.update(wall_s=wall, events=stats["events"], simulations=stats["simulations"],
               peak_rss_mib=peak_rss_mib())
    print(json.dumps(out))
    """
)


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a fresh interpreter and return its figures."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"case failed (exit {proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def cases(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    """(label, child spec) for every case this run measures, in order."""
    azure_wl: dict[str, Any] = dict(AZURE["workload"])
    tag = "1h"
    if quick:
        azure_wl["duration_s"] = QUICK_DURATION_S
        tag = f"{QUICK_DURATION_S:.0f}s"
    plain = {**AZURE, "workload": azure_wl}
    spec = {**plain, "speculative": SPECULATIVE}
    moon_wl: dict[str, Any] = dict(MOONCAKE["workload"])
    if quick:
        moon_wl["duration_s"] = QUICK_DURATION_S
    moon = {**MOONCAKE, "workload": moon_wl}
    moon_on = {**moon, "cluster": {**moon["cluster"], "prefix_caching": True}}
    fleet = {"replicas": 4, "router": "least_loaded"}
    busy_wl: dict[str, Any] = dict(BUSY["workload"])
    busy_tag = "10m"
    if quick:
        busy_wl["duration_s"] = 120.0
        busy_tag = "2m"
    busy = {**BUSY, "workload": busy_wl}
    busy_spec = {**busy, "speculative": {**SPECULATIVE, "policy": {"kind": "goodput", "k_max": 6}}}
    sims: list[tuple[str, dict[str, Any]]] = [
        (f"azure-{tag}-plain", plain),
        (f"azure-{tag}-spec", spec),
        (f"busy-{busy_tag}-plain", busy),
        (f"busy-{busy_tag}-spec", busy_spec),
        (f"mooncake-{tag}-nocache", moon),
        (f"mooncake-{tag}-prefix", moon_on),
        (f"mooncake-{tag}-4x-nocache", {**moon, "cluster": {**moon["cluster"], **fleet}}),
        (f"mooncake-{tag}-4x-prefix", {**moon_on, "cluster": {**moon_on["cluster"], **fleet}}),
        (
            f"mooncake-{tag}-4x-aware",
            {**moon_on, "cluster": {**moon_on["cluster"], **fleet, "router": "prefix_aware"}},
        ),
    ]
    sims += (
        [("synthetic-20k", synthetic(20_000)), ("synthetic-20k-stream", synthetic(20_000))]
        if quick
        else [
            ("synthetic-200k", synthetic(200_000)),
            ("synthetic-1m", synthetic(1_000_000)),
            ("synthetic-1m-stream", synthetic(1_000_000)),
        ]
    )
    out: list[tuple[str, dict[str, Any]]] = [
        (
            label,
            {
                "kind": "simulate",
                "scenario": s,
                "warmup": warmup_of(s),
                "stream": label.endswith("-stream"),
            },
        )
        for label, s in sims
    ]
    events = 200_000 if quick else 2_000_000
    out.append(("simpy-bare", {"kind": "simpy", "events": events, "warmup_events": 1000}))
    if not quick:
        spec_on = ["speculative.enabled=true", f"workload.num_requests={WARMUP_REQUESTS}"]
        out.append(
            (
                "capacity-spec",
                {
                    "kind": "capacity",
                    "scenario_path": str(CAPACITY_SCENARIO),
                    "capacity": CAPACITY_ARGS,
                    "warmup_overrides": spec_on,
                },
            )
        )
    return out


def machine() -> dict[str, Any]:
    """What this ran on."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    spec = importlib.util.find_spec("cbsim")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "simpy": version("simpy"),
        "cbsim_path": str(Path(spec.origin).parent) if spec and spec.origin else "not found",
        "cbsim_commit": commit or "unknown",
    }


def derive(result: dict[str, Any]) -> dict[str, Any]:
    """Add the per-second figures."""
    wall = result["wall_s"]
    requests = result.get("requests")
    result["sim_req_per_wall_s"] = requests / wall if requests else None
    result["events_per_s"] = result["events"] / wall if result.get("events") else None
    return result


def fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def row(label: str, r: dict[str, Any]) -> str:
    cells = [
        label,
        fmt(r["wall_s"], ".2f"),
        fmt(r["startup_s"], ".2f"),
        fmt(r.get("requests"), ","),
        fmt(r.get("iterations"), ","),
        fmt(r["sim_req_per_wall_s"], ",.0f"),
        fmt(r["events_per_s"], ",.0f"),
        fmt(r["peak_rss_mib"], ",.0f"),
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="azure cases cut to 600 s, 20k synthetic requests, no 1M case, no capacity search",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="run only the cases whose label contains TEXT (repeatable)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()

    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"{info['platform']}"
    )
    print(
        f"Python {info['python']}, numpy {info['numpy']}, simpy {info['simpy']}; "
        f"cbsim {info['cbsim_commit']} from {info['cbsim_path']}"
    )
    print()
    print(
        "| case | wall s | startup s | requests | iterations | sim req/wall s | events/s "
        "| peak RSS MiB |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for label, spec in cases(args.quick):
        if args.only and not any(text in label for text in args.only):
            continue
        print(f"running {label} ...", file=sys.stderr, flush=True)
        results[label] = derive(run_case(spec))
        print(row(label, results[label]), flush=True)
    print()

    by_kind = {label.rsplit("-", 1)[-1]: r for label, r in results.items() if "azure" in label}
    ratio = None
    if {"spec", "plain"} <= by_kind.keys():
        ratio = by_kind["spec"]["wall_s"] / by_kind["plain"]["wall_s"]
        print(f"speculative / plain wall time (azure): {ratio:.2f}x")
    for fleet in ("", "4x-"):
        moon = {label.rsplit("-", 1)[-1]: r for label, r in results.items()
                if "mooncake" in label and ("-4x-" in label) == bool(fleet)}  # fmt: skip
        replicas = "4 replicas" if fleet else "1 replica"
        for on, how in (("prefix", ""), ("aware", ", prefix-aware routing")):
            if {on, "nocache"} <= moon.keys():
                cached = moon[on]["wall_s"] / moon["nocache"]["wall_s"]
                print(f"prefix caching / none wall time (mooncake, {replicas}{how}): {cached:.2f}x")
    bare = results["simpy-bare"]["events_per_s"] if "simpy-bare" in results else None
    sim_rates = [
        r["events_per_s"]
        for label, r in results.items()
        if label != "simpy-bare" and r.get("events_per_s")
    ]
    if bare and sim_rates:
        print(
            f"bare SimPy: {bare:,.0f} events/s; cbsim cases: {min(sim_rates):,.0f}–"
            f"{max(sim_rates):,.0f} events/s ({bare / max(sim_rates):.0f}–"
            f"{bare / min(sim_rates):.0f}x the cost of a bare event)"
        )
    if "capacity-spec" in results:
        cap = results["capacity-spec"]
        print(
            f"capacity-spec: {cap['plan_simulations']} simulations in the plan "
            f"(best: {cap['best']}, {cap['best_max_rate_rps']} req/s per replica)"
        )
    print(f"suite wall time: {time.perf_counter() - started:.0f} s")

    if args.json is not None:
        payload = {
            "quick": args.quick,
            "machine": info,
            "cases": [{"case": label, **r} for label, r in results.items()],
            "spec_plain_wall_ratio": ratio,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
