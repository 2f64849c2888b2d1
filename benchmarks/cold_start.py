"""A fresh install's first run against a warm one (not a test; about half a minute).

Runs the quick start (``cbsim run scenarios/chat-llama3-8b-h100.yaml``, README's set-up command)
in pairs: *cold* as on a fresh install (an empty numba cache, so every kernel the run uses
compiles, no bytecode for cbsim's own modules and no parsed calibration profiles kept,
``CBSIM_CACHE_DIR``), then *warm* (the same caches and bytecode again). Each run is a fresh
``cbsim`` process; its wall time and CPU time (user + system, what a machine shared with other
work still measures fairly) are printed per run and as medians.

    python benchmarks/cold_start.py [--pairs 3] [--scenario scenarios/chat-llama3-8b-h100.yaml]
                                    [--root CHECKOUT]  # another checkout's cbsim (a before/after)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the launcher's main, not its console script: the console script would start priming the cache
# in the background after the cold run (cbsim.run.kernel_priming), beside the warm run measured next
LAUNCH = "import sys; sys.argv[0] = 'cbsim'; import cbsim_launcher; cbsim_launcher.main()"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--scenario", default="scenarios/chat-llama3-8b-h100.yaml")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose cbsim runs")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="cbsim-cold-start-") as scratch:
        for pair in range(args.pairs):
            source = _fresh_copy(args.root, Path(scratch) / f"pair{pair}")
            cache = Path(scratch) / f"numba{pair}"
            for kind in ("cold", "warm"):
                wall, cpu = _timed_run(source, cache, args.scenario, Path(scratch) / "out")
                runs[kind].append((wall, cpu))
                print(f"pair {pair + 1} {kind}: wall {wall:.2f} s, cpu {cpu:.2f} s", flush=True)
    for kind, timings in runs.items():
        wall = statistics.median(w for w, _ in timings)
        cpu = statistics.median(c for _, c in timings)
        print(f"median {kind}: wall {wall:.2f} s, cpu {cpu:.2f} s")
    cold_wall, warm_wall = (statistics.median(w for w, _ in runs[k]) for k in ("cold", "warm"))
    cold_cpu, warm_cpu = (statistics.median(c for _, c in runs[k]) for k in ("cold", "warm"))
    print(f"cold / warm: wall {cold_wall / warm_wall:.2f}x, cpu {cold_cpu / warm_cpu:.2f}x")


def _fresh_copy(root: Path, target: Path) -> Path:
    """The launcher and the package of the checkout ``root`` copied without any ``__pycache__`` (no bytecode, no numba
    cache beside the sources): what ``pip install -e .`` leaves before the first run."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(root / "cbsim", target / "cbsim", ignore=ignore)
    shutil.copy2(root / "cbsim_launcher.py", target / "cbsim_launcher.py")
    return target


def _timed_run(source: Path, cache: Path, scenario: str, out: Path) -> tuple[float, float]:
    """One ``cbsim run`` of ``scenario`` from ``source`` with numba's cache in ``cache`` (and
    cbsim's parsed profiles beside it): its wall seconds and CPU seconds (user + system of the
    process and its children)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "NUMBA_CACHE_DIR": str(cache),
        "CBSIM_CACHE_DIR": str(cache.with_name(cache.name + "-cbsim")),
    }
    command = [sys.executable, "-c", LAUNCH, "run", str(ROOT / scenario), "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=source)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    shutil.rmtree(out, ignore_errors=True)
    return wall, cpu


if __name__ == "__main__":
    main()
