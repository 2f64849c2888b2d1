"""Generate scenarios/data/acceptance-example.csv: a small *synthetic* acceptance trace.

Real acceptance is bursty: stretches where the draft agrees with the target for many tokens (boiler-
plate, copied spans) alternate with stretches where it rarely does. This file imitates that with a
two-state Markov chain per request (a "copy" state with conditional acceptance 0.92 and a "free"
state with 0.45) and per-request variation of the switching rates. The oracle acceptance length at
each position is 1 + the number of consecutive positions from there on whose draft token would be
accepted, capped at 16. It is an example of the format, not a measurement.

Usage: python tools/make_acceptance_example.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "data" / "acceptance-example.csv"
CAP = 16


def oracle_lengths(accept: np.ndarray) -> np.ndarray:
    """acc_len[i] = 1 + run of accepted positions starting at i (capped)."""
    lengths = np.ones(len(accept), dtype=np.int64)
    run = 0
    for i in range(len(accept) - 1, -1, -1):
        run = run + 1 if accept[i] else 0
        lengths[i] = 1 + min(run, CAP - 1)
    return lengths


def main() -> None:
    rng = np.random.default_rng(20261122)
    rows = []
    for request in range(60):
        output = int(rng.integers(32, 400))
        prompt = int(rng.lognormal(np.log(800), 0.7)) + 1
        stay_copy, stay_free = rng.uniform(0.85, 0.97), rng.uniform(0.7, 0.95)
        state = rng.random() < 0.4
        accept = np.empty(output + CAP, dtype=bool)
        for i in range(len(accept)):
            accept[i] = rng.random() < (0.92 if state else 0.45)
            state = rng.random() < (stay_copy if state else 1.0 - stay_free)
        lengths = oracle_lengths(accept)[:output]
        rows.append((f"req-{request:03d}", prompt, output, " ".join(map(str, lengths))))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["request_id", "prompt_len", "output_len", "acc_len"])
        writer.writerows(rows)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
