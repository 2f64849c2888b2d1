"""Fingerprint every shipped scenario's results: one hash per run of every request, iteration and
timeseries value and of the summary, so that a change meant to leave results alone (a refactor, a
speed-up) can be shown to, bit for bit.

    python tools/fingerprint_scenarios.py > before.txt   # on the old code
    python tools/fingerprint_scenarios.py > after.txt    # on the new
    diff before.txt after.txt                             # nothing: results unchanged

Each scenario runs as shipped and again with decode runs stepped one iteration at a time
(``fast_forward: false``), with ``tests/golden/update.py``'s shortening for the day-long one. Uses only the public API
(``cbsim.load_scenario``, ``cbsim.simulate``), so it runs on any version of the package.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

import cbsim

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden.update import SHORTENED  # noqa: E402


def _frame_hash(frame: pd.DataFrame) -> str:
    hashed = pd.util.hash_pandas_object(frame.reset_index(drop=True), index=False)
    digest = hashlib.sha256(hashed.to_numpy().tobytes())
    digest.update(",".join(map(str, frame.columns)).encode())
    return digest.hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)


def fingerprint(path: Path, overrides: dict[str, Any]) -> str:
    results = cbsim.simulate(cbsim.load_scenario(path, overrides))
    summary = json.dumps(_plain(results.summary), sort_keys=True, default=repr)
    parts = [
        _frame_hash(results.requests),
        _frame_hash(results.iterations),
        _frame_hash(results.timeseries),
        hashlib.sha256(summary.encode()).hexdigest()[:16],
    ]
    return " ".join(parts)


def main() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        base = dict(SHORTENED.get(path.name, {}))
        for label, extra in (("as shipped", {}), ("stepped", {"fast_forward": False})):
            line = fingerprint(path, {**base, **extra})
            print(f"{path.name:<40} {label:<11} {line}", flush=True)


if __name__ == "__main__":
    main()
