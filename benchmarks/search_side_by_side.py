"""The README's one-layout capacity search, checkouts side by side (not a test; about a minute).

Runs the search of the README's capacity-planning section (Llama-3-70B on H100 TP4 at 110
req/s over the Azure conversation trace, 60 s windows, one seed), with or without speculative
decoding, once per checkout per round, the checkouts alternating, each in its own process with
that checkout's ``cbsim`` (``PYTHONPATH``, the checkout as the working directory). It prints
each run's CPU seconds (user + system, the forked fleet checks included: the command waits for
them) and wall seconds, then per checkout the least and the median, their ratio to the first
checkout's, and whether every run's capacity JSON was byte for byte the same. This machine's
speed drifts by tens of percent over minutes: compare checkouts only within one invocation.

    python benchmarks/search_side_by_side.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 5] [--plain]
    python benchmarks/search_side_by_side.py OLD_CHECKOUT NEW_CHECKOUT --run SCENARIO

``--run SCENARIO`` times ``cbsim run SCENARIO --out FOLDER -q`` instead (the scenario's path
relative to each checkout), and says whether every run wrote the same parquet files.

Each checkout needs its numba cache primed (``python -c "from cbsim.run.kernel_priming import
prime; prime()"`` there), or its first rounds compile.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEARCH = [
    "capacity", "scenarios/capacity-70b-azure.yaml", "--slo", "ttft_p99_s=2,tpot_p99_s=0.1",
    "--target-rps", "110", "--window-s", "60", "--seeds", "1", "--json",
]  # fmt: skip
LAUNCH = "import sys; sys.argv[0] = 'cbsim'; import cbsim_launcher; cbsim_launcher.main()"


def _timed(checkout: Path, arguments: list[str]) -> tuple[float, float, bytes]:
    """``cbsim ARGUMENTS`` with ``checkout``'s cbsim, there: CPU seconds (its children's
    included), wall seconds, its standard output."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, *arguments],
        cwd=checkout,
        env=env,
        capture_output=True,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def run_search(checkout: Path, speculative: bool) -> tuple[float, float, str]:
    """One search with ``checkout``'s cbsim: CPU seconds, wall seconds, digest of its JSON."""
    vary = ["--vary", f"speculative.enabled={'true' if speculative else 'false'}"]
    cpu, wall, output = _timed(checkout, [*SEARCH, *vary])
    return cpu, wall, hashlib.sha256(output).hexdigest()[:12]


def run_scenario(checkout: Path, scenario: str, out: Path) -> tuple[float, float, str]:
    """``cbsim run`` of ``scenario`` with ``checkout``'s cbsim into ``out``: CPU seconds, wall
    seconds, digest of its parquet files."""
    cpu, wall, _ = _timed(checkout, ["run", scenario, "--out", str(out), "-q"])
    digest = hashlib.sha256()
    for name in ("requests.parquet", "iterations.parquet", "timeseries.parquet"):
        digest.update((out / name).read_bytes())
    return cpu, wall, digest.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plain", action="store_true", help="the search without speculation")
    parser.add_argument("--run", metavar="SCENARIO", help="time `cbsim run SCENARIO` instead")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    checkouts = [path.resolve() for path in args.checkouts]
    cpu: dict[Path, list[float]] = {path: [] for path in checkouts}
    wall: dict[Path, list[float]] = {path: [] for path in checkouts}
    digests: set[str] = set()
    for round_ in range(1, args.rounds + 1):
        for path in checkouts:
            if args.run:
                out = scratch / f"{path.name}-{round_}"
                seconds, elapsed, digest = run_scenario(path, args.run, out)
                shutil.rmtree(out)
            else:
                seconds, elapsed, digest = run_search(path, not args.plain)
            cpu[path].append(seconds)
            wall[path].append(elapsed)
            digests.add(digest)
            print(
                f"round {round_} {path.name}: cpu {seconds:.2f} s, wall {elapsed:.2f} s", flush=True
            )
    first = checkouts[0]
    for path in checkouts:
        best, middle = min(cpu[path]), statistics.median(cpu[path])
        print(
            f"{path.name}: cpu least {best:.2f} s (median {middle:.2f}), wall least "
            f"{min(wall[path]):.2f} s; {min(cpu[first]) / best:.2f}x on the least cpu, "
            f"{statistics.median(cpu[first]) / middle:.2f}x on the medians"
        )
    shutil.rmtree(scratch, ignore_errors=True)
    same = "the same" if len(digests) == 1 else f"NOT the same ({len(digests)} digests)"
    print(f"{'parquet files' if args.run else 'capacity JSON'}: {same} in every run")


if __name__ == "__main__":
    main()
