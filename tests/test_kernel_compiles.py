"""What a fresh install's first run compiles: each kernel it uses once (one signature, not one
more for a literal argument), and none of numba's library sorts, searches or reductions, each
of which costs seconds of compiling where a written-out loop costs a tenth; and the background
priming after it (:mod:`cbsim.run.kernel_priming`): a run tells a cold cache, and once primed the
shipped kinds of runs compile nothing. Counted from numba's compile events in fresh interpreters
with an empty cache, not timed."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# runs a scenario (argv[1], shortened to argv[2] requests), compiling at once or interpreting
# while cold (argv[3]); prints every compiled function, then whether the process found numba's
# cache cold (compiled its first kernels, or priced in Python and left them uncompiled) and
# whether the run's info says so
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
from cbsim.run import kernel_priming
scenario = cbsim.load_scenario(sys.argv[1], {"workload.num_requests": int(sys.argv[2])})
results = cbsim.simulate(scenario, interpret_while_cold=sys.argv[3] == "interpret")
print("cold", kernel_priming.needs_priming(), "compiled", kernel_priming.compiled_this_run())
print("note", "kernels_note" in results.run_info)
"""

# numba's implementations that a kernel on a run's path used to compile (seconds each)
LIBRARY_HEAVY = ("mergesort", "quicksort", "searchsorted", "npy_max", "npy_min", "np_arange")


def _compiled(
    cache: Path, scenario: str, requests: int, *, interpret: bool = False
) -> tuple[list[str], str]:
    """The functions numba compiles when ``scenario`` runs on numba's cache in ``cache``, in
    order (``interpret``: pricing in Python while the cache is cold, as a run does by default),
    and the lines saying whether the run found the cache cold."""
    how = "interpret" if interpret else "compile"
    printed = _python(RECORD, cache, str(ROOT / "scenarios" / scenario), str(requests), how)
    lines = printed.splitlines()
    compiled = [line.split()[1] for line in lines if line.startswith("compiled ")]
    return compiled, "\n".join(line for line in lines if not line.startswith("compiled "))


def _python(code: str, cache: Path, *args: str) -> str:
    """What ``python -c code args`` prints, numba's cache in ``cache``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _assert_each_kernel_once(compiled: list[str]) -> None:
    kernels = collections.Counter(name for name in compiled if name.startswith("cbsim."))
    twice = {name: n for name, n in kernels.items() if n > 1}
    assert not twice, f"compiled more than once (a literal argument?): {twice}"


@pytest.mark.slow  # 19 s of compiling; .ci/run's second stage runs it
def test_the_quick_start_compiles_each_kernel_once_and_no_library_sort_then_loads(
    tmp_path: Path,
) -> None:
    compiled, told = _compiled(tmp_path, "chat-llama3-8b-h100.yaml", 200)
    assert "cold True compiled True" in told and "note False" in told  # compiled at once
    assert "cbsim.engine.decode_run.decode_run_kernel" in compiled  # a decode run was planned
    _assert_each_kernel_once(compiled)
    heavy = [name for name in compiled if any(part in name for part in LIBRARY_HEAVY)]
    assert not heavy, f"numba library functions compiled on the run's path: {heavy}"
    # 14 when written (numba's own included), 36 before; 2 more for the pricing of batches split
    # over pipeline stages or ranks, which the decode-run and stepped kernels may call; 2 more
    # called rather than inlined at their several sites (one layer's attention given its
    # correction, an MLA module), which the speculative kernels share: they compile sooner
    assert len(compiled) <= 20, compiled
    # the same cache again, interpreting while cold: it is not, so the kernels load
    compiled, told = _compiled(tmp_path, "chat-llama3-8b-h100.yaml", 200, interpret=True)
    assert not compiled, compiled
    assert "cold False compiled False" in told and "note False" in told


@pytest.mark.slow
def test_a_speculative_run_compiles_each_kernel_once(tmp_path: Path) -> None:
    compiled, _ = _compiled(tmp_path, "spec-eagle-goodput.yaml", 200)
    assert "cbsim.engine.speculative.fast_run.spec_run_kernel" in compiled
    _assert_each_kernel_once(compiled)


def test_a_plain_run_on_a_cold_cache_compiles_nothing_and_says_so(tmp_path: Path) -> None:
    compiled, told = _compiled(tmp_path, "chat-llama3-8b-h100.yaml", 200, interpret=True)
    assert not [name for name in compiled if name.startswith("cbsim.")], compiled
    assert "cold True compiled False" in told and "note True" in told  # priced in Python


@pytest.mark.slow
def test_priming_leaves_the_shipped_kinds_of_runs_nothing_to_compile(tmp_path: Path) -> None:
    _python("from cbsim.run import kernel_priming; kernel_priming.prime()", tmp_path)
    for scenario in ("chat-llama3-8b-h100.yaml", "spec-eagle-goodput.yaml"):
        compiled, told = _compiled(tmp_path, scenario, 200)
        assert not compiled and "cold False" in told, (scenario, compiled, told)


def test_the_primer_starts_detached_and_silent_on_this_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cbsim.run import kernel_priming

    started: list[tuple[list[str], dict[str, object]]] = []
    monkeypatch.setattr(
        kernel_priming.subprocess, "Popen", lambda args, **kw: started.append((args, kw))
    )
    kernel_priming.start_in_background()
    [(args, options)] = started
    assert args[:2] == [sys.executable, "-c"] and repr(str(ROOT)) in args[2]
    assert options["start_new_session"] is True
    assert options["stdout"] == options["stderr"] == subprocess.DEVNULL


def test_a_primer_that_cannot_start_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from cbsim.run import kernel_priming

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError("no processes left")

    monkeypatch.setattr(kernel_priming.subprocess, "Popen", refused)
    kernel_priming.start_in_background()  # no error
