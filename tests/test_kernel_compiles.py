"""What a fresh install's first run compiles: each kernel it uses once (one signature, not one
more for a literal argument), and none of numba's library sorts, searches or reductions, each
of which costs seconds of compiling where a written-out loop costs a tenth. Counted from numba's
compile events in a fresh interpreter with an empty cache, not timed."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# runs a scenario (argv[1], shortened to argv[2] requests) and prints every compiled function
RECORD = """
import sys
import numba.core.event as event

class Recorder(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        func = ev.data["dispatcher"].py_func
        print("compiled", f"{func.__module__}.{func.__qualname__}", flush=True)

event.register("numba:compile", Recorder())
import cbsim
cbsim.simulate(cbsim.load_scenario(sys.argv[1], {"workload.num_requests": int(sys.argv[2])}))
"""

# numba's implementations that a kernel on a run's path used to compile (seconds each)
LIBRARY_HEAVY = ("mergesort", "quicksort", "searchsorted", "npy_max", "npy_min", "np_arange")


def _compiled(tmp_path: Path, scenario: str, requests: int) -> list[str]:
    """The functions numba compiles when ``scenario`` runs on an empty cache, in order."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", RECORD, str(ROOT / "scenarios" / scenario), str(requests)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split()[1] for line in done.stdout.splitlines() if line.startswith("compiled ")]


def _assert_each_kernel_once(compiled: list[str]) -> None:
    kernels = collections.Counter(name for name in compiled if name.startswith("cbsim."))
    twice = {name: n for name, n in kernels.items() if n > 1}
    assert not twice, f"compiled more than once (a literal argument?): {twice}"


def test_the_quick_start_compiles_each_kernel_once_and_no_library_sort(tmp_path: Path) -> None:
    compiled = _compiled(tmp_path, "chat-llama3-8b-h100.yaml", 200)
    assert "cbsim.engine.decode_run.decode_run_kernel" in compiled  # a decode run was planned
    _assert_each_kernel_once(compiled)
    heavy = [name for name in compiled if any(part in name for part in LIBRARY_HEAVY)]
    assert not heavy, f"numba library functions compiled on the run's path: {heavy}"
    assert len(compiled) <= 16, compiled  # 12 when written (numba's own included), 36 before


@pytest.mark.slow
def test_a_speculative_run_compiles_each_kernel_once(tmp_path: Path) -> None:
    compiled = _compiled(tmp_path, "spec-eagle-goodput.yaml", 200)
    assert "cbsim.engine.speculative.fast_run.spec_run_kernel" in compiled
    _assert_each_kernel_once(compiled)
