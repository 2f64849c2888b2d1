"""Speculative runs of several model families against their plain runs, checkouts side by side
(not a test; a few minutes, far longer with a checkout that plans these models in Python).

Per checkout, one warm worker process (that checkout's ``cbsim`` on ``PYTHONPATH``, the checkout
as the working directory) simulates each case once per round, the checkouts in a shuffled order
each round; CPU seconds (``time.process_time``) per case, least over the rounds, are printed with
their ratio to the same model's plain run, and the iterations each run made (the same on every
checkout where the results are). The cases: the chat scenario
(``scenarios/chat-llama3-8b-h100.yaml``, 2,000 requests on one GPU) on Llama 3 8B, gpt-oss-20b
(local attention) and Gemma 3 12B (local attention), and ``scenarios/deepseek-v3-h200.yaml``
(latent attention), each plain, with an EAGLE head at fixed k = 3 and with the per-request
goodput policy (k ≤ 8), per-request acceptance (mean 0.6); DeepSeek-V3 also with n-gram drafts
(fixed k = 3) and its MTP module (goodput, k ≤ 3). This machine's speed drifts by tens of
percent over minutes: compare checkouts only within one invocation.

    python benchmarks/spec_models_side_by_side.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 3]
        [--only llama,gptoss,gemma3,dsv3]

Each checkout needs its numba cache primed (``python -c "from cbsim.run.kernel_priming import
prime; prime()"`` there), or its first round compiles.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import copy, os, sys, time
import yaml
import cbsim

def chat(model):
    data = yaml.safe_load(open("scenarios/chat-llama3-8b-h100.yaml"))
    data["cluster"]["model"] = model
    return data

def spec(data, proposer, policy):
    data = copy.deepcopy(data)
    data["speculative"] = {
        "enabled": True, "proposer": proposer, "policy": policy,
        "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
    }
    return data

bases = {
    "llama": chat("llama-3-8b"), "gptoss": chat("gpt-oss-20b"), "gemma3": chat("gemma-3-12b"),
    "dsv3": yaml.safe_load(open("scenarios/deepseek-v3-h200.yaml")),
}
only = [name for name in os.environ.get("CASES", "").split(",") if name]
cases = {}
for name, base in bases.items():
    if only and name not in only:
        continue
    cases[name + "/plain"] = base
    cases[name + "/fixed3"] = spec(base, {"kind": "eagle"}, {"kind": "fixed", "k": 3})
    cases[name + "/goodput"] = spec(
        base, {"kind": "eagle"}, {"kind": "goodput", "k_max": 8, "per_request": True}
    )
    if name == "dsv3":
        cases[name + "/ngram3"] = spec(base, {"kind": "ngram"}, {"kind": "fixed", "k": 3})
        cases[name + "/mtp-goodput"] = spec(base, {"kind": "mtp"}, {"kind": "goodput", "k_max": 3})
scenarios = {name: cbsim.load_scenario(data) for name, data in cases.items()}
for scenario in scenarios.values():
    cbsim.simulate(scenario)  # warm: kernels loaded, tables filled
print(" ".join(scenarios), flush=True)
for _ in sys.stdin:
    out = []
    for scenario in scenarios.values():
        start = time.process_time()
        results = cbsim.simulate(scenario)
        out.append(f"{time.process_time() - start:.4f}:{results.summary['iterations']}")
    print(" ".join(out), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated: llama,gptoss,gemma3,dsv3")
    args = parser.parse_args()
    workers = []
    for checkout in args.checkouts:
        env = {**os.environ, "PYTHONPATH": str(checkout.resolve()), "CASES": args.only}
        pipe = subprocess.PIPE
        command = [sys.executable, "-c", WORKER]
        workers.append(
            subprocess.Popen(command, cwd=checkout, env=env, text=True, stdin=pipe, stdout=pipe)
        )
    names: list[str] = []
    for worker in workers:
        assert worker.stdout is not None
        names = worker.stdout.readline().split()
    times: dict[Path, dict[str, list[float]]] = {c: {n: [] for n in names} for c in args.checkouts}
    iterations: dict[Path, dict[str, str]] = {c: {} for c in args.checkouts}
    for _ in range(args.rounds):
        order = list(zip(args.checkouts, workers, strict=True))
        random.shuffle(order)
        for checkout, worker in order:
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
            for name, field in zip(names, worker.stdout.readline().split(), strict=True):
                seconds, count = field.split(":")
                times[checkout][name].append(float(seconds))
                iterations[checkout][name] = count
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    print(
        f"{'case':18s}" + "".join(f"{str(c)[-22:]:>24s}" for c in args.checkouts) + "  iterations"
    )
    for name in names:
        row = f"{name:18s}"
        for checkout in args.checkouts:
            least = min(times[checkout][name])
            plain = min(times[checkout][name.split("/")[0] + "/plain"])
            row += f"{least:>12.3f} s ({least / plain:5.2f}x)"
        print(row, " ", " ".join(iterations[c][name] for c in args.checkouts))


if __name__ == "__main__":
    main()
