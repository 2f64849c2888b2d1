"""One busy replica's simulation, CPU seconds (not a test; about ten seconds a scheduler).

The busy replica of ``bench_suite.py`` (ten minutes of the Azure conversation trace at 2.4x on a
70B replica of 4 H100s) under the scheduler named, plain and with speculative decoding (EAGLE,
per-request acceptance, the goodput policy up to k = 6): the simulation alone, CPU time, best of
``--repeats`` after a warm-up run, with a digest of the summary (two checkouts whose digests
match gave the same results).

    python benchmarks/busy_replica.py [--scheduler prefill_first] [--repeats 3]
    PYTHONPATH=OTHER_CHECKOUT python benchmarks/busy_replica.py   # another checkout's cbsim
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from typing import Any

from bench_suite import BUSY, SPECULATIVE  # the script's folder is on sys.path

import cbsim


def scenario(scheduler: str, speculative: bool) -> dict[str, Any]:
    """The busy replica under ``scheduler``, with or without speculative decoding."""
    settings: dict[str, Any] = {"kind": scheduler, "max_batch_size": 256}
    if scheduler == "sarathi":
        settings["chunk_size"] = BUSY["scheduler"]["chunk_size"]
    data: dict[str, Any] = {**BUSY, "scheduler": settings}
    if speculative:
        data["speculative"] = {**SPECULATIVE, "policy": {"kind": "goodput", "k_max": 6}}
    return data


def best_cpu(data: dict[str, Any], repeats: int) -> tuple[float, str]:
    """The least CPU seconds of ``repeats`` simulations (after a short warm-up) and a digest of
    the last one's summary."""
    cbsim.simulate({**data, "workload": {**data["workload"], "duration_s": 20.0}})
    best = float("inf")
    summary: dict[str, Any] = {}
    for _ in range(repeats):
        start = time.process_time()
        summary = cbsim.simulate(data).summary
        best = min(best, time.process_time() - start)
    plain = {k: v for k, v in summary.items() if "wall" not in k}
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()
    return best, digest[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default="prefill_first")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for speculative in (False, True):
        cpu, digest = best_cpu(scenario(args.scheduler, speculative), args.repeats)
        kind = "speculative" if speculative else "plain"
        print(f"{args.scheduler} {kind}: best cpu {cpu:.3f} s (summary {digest})", flush=True)


if __name__ == "__main__":
    main()
