"""Regenerate tests/golden/summaries.json from every scenario in scenarios/.

Run after an intended change of model behaviour, and say why in the commit message:
    python tests/golden/update.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cbsim

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("summaries.json")
KEYS = (
    "requests", "completed", "rejected", "unfinished", "preemptions", "iterations",
    "throughput_rps", "output_tokens_per_s", "goodput_rps", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "mean_batch_size", "itl_p50_s", "itl_p99_s",
    "prefix_hit_rate", "timed_out",
)  # fmt: skip


# Scenarios too long for a test (a day of traffic): their golden figures are those of a shortened
# run, with these overrides (the scenario's shape kept: here the day's rate curve compressed into
# 45 minutes at a lower rate, so that the autoscaler still scales up and back down).
SHORTENED: dict[str, dict[str, Any]] = {
    "diurnal-autoscale-llama3-70b.yaml": {
        "workload.arrival.points": [[0, 0.25], [600, 2.0], [1200, 2.0], [1800, 0.25], [2700, 0.25]],
        "output.timeseries_window_s": 60,
    },
}


def key_figures(path: Path) -> dict[str, float]:
    overrides = SHORTENED.get(path.name)
    scenario = path if overrides is None else cbsim.load_scenario(path, overrides)
    summary = cbsim.simulate(scenario).summary
    return {key: summary[key] for key in KEYS}


def main() -> None:
    figures = {path.name: key_figures(path) for path in sorted((ROOT / "scenarios").glob("*.yaml"))}
    GOLDEN.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(figures)} scenarios)")


if __name__ == "__main__":
    main()
