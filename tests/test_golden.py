"""Golden tests: every shipped scenario runs and reproduces its stored key figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.golden.update import GOLDEN, KEYS, ROOT, key_figures

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
STORED = json.loads(GOLDEN.read_text())


def test_every_scenario_has_golden_figures() -> None:
    assert len(SCENARIOS) >= 4
    assert sorted(STORED) == [p.name for p in SCENARIOS]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_reproduces_golden_figures(path: Path) -> None:
    figures = key_figures(path)
    stored = STORED[path.name]
    for key in KEYS:
        expected, actual = stored[key], figures[key]
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(actual), key
        else:
            assert actual == pytest.approx(expected, rel=1e-6, abs=1e-12), key
    done = figures["completed"] + figures["rejected"] + figures["timed_out"]
    assert done + figures["unfinished"] == figures["requests"]
