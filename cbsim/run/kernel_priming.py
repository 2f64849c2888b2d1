"""Priming numba's cache of compiled kernels in the background after a fresh install's first run.

The engine's kernels compile on their first call and are kept in numba's cache (``__pycache__``
beside their sources, or under ``NUMBA_CACHE_DIR``), from which a later process loads them in
milliseconds. A fresh install's first run compiles the kernels it needs: a plain run's in about
3 s of CPU, a speculative one's (some twenty more kernels) in about a minute (63-74 s of CPU
for ``scenarios/spec-eagle-goodput.yaml`` on a 2-core machine, 2026-11-30). A plain run on a
cold cache prices in Python instead, compiling nothing until compiling pays
(:mod:`cbsim.cost.kernel_cache`). So when the ``cbsim`` command found the cache cold
(:func:`needs_priming`), it starts this module in a detached, low-priority process
(:func:`start_in_background`) that simulates two small built-in scenarios, one plain and one
speculative, compiling at once, and discards their results: what stays is every kernel they
use, in the cache, for the next run whatever its scenario. It writes nothing else. A primer that fails
or is stopped leaves the cache as it was (numba writes each entry whole), and the next run
compiles what it needs, as without priming.

The first run itself is not primed ahead: pip runs no code of the package's at install, and a
plain first run does not wait for compiling (it prices in Python).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cbsim.cost.kernel_cache import all_cached
from cbsim.engine.cost_models import PLAIN_KERNELS
from cbsim.engine.speculative.fast_run import spec_run_kernel
from cbsim.run.loading import load_scenario
from cbsim.run.simulate import simulate

# small scenarios whose runs call every kernel the shipped scenarios' kinds of runs call
PLAIN: dict[str, Any] = {
    "name": "priming-plain",
    "seed": 1,
    "workload": {
        "num_requests": 60,
        "arrival": {"kind": "poisson", "rate": 8.0},
        "prompt_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8192},
        "output_tokens": {"kind": "lognormal", "mean": 250, "sigma": 0.7, "max": 2048},
    },
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1},
}
SPECULATIVE: dict[str, Any] = {
    **PLAIN,
    "name": "priming-speculative",
    "speculative": {
        "enabled": True,
        "proposer": {"kind": "eagle"},
        "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
        "policy": {"kind": "goodput", "k_max": 8},
    },
}

# the kernels whose compiling tells a cold cache: a plain run's and the speculative runs'
_FIRST_KERNELS = (*PLAIN_KERNELS, spec_run_kernel)


def compiled_this_run() -> bool:
    """Whether this process compiled one of the engine's first kernels (rather than loading it
    from numba's cache) where the cache can be written: the cache was cold, and priming it
    would last (where it cannot be written, every run compiles and a primer would too)."""
    for kernel in _FIRST_KERNELS:
        stats = kernel.stats
        if sum(stats.cache_misses.values()) > 0:
            return bool(stats.cache_path) and os.access(str(stats.cache_path), os.W_OK)
    return False


def cache_is_cold() -> bool:
    """Whether numba's cache lacks a plain run's kernels where it can be written: a run priced
    in Python while it was cold (:mod:`cbsim.cost.kernel_cache`) compiled nothing, and priming
    would last."""
    if all_cached(PLAIN_KERNELS):
        return False
    path = getattr(getattr(PLAIN_KERNELS[0], "_cache", None), "_cache_path", None)
    return bool(path) and os.access(str(path), os.W_OK)


def needs_priming() -> bool:
    """Whether this process found numba's cache cold: it compiled the first kernels
    (:func:`compiled_this_run`), or priced in Python and left them uncompiled
    (:func:`cache_is_cold`)."""
    return compiled_this_run() or cache_is_cold()


# the primer's command: this package first on its path (not one in the working directory), its
# priority lowered before it imports the package (a second of CPU)
_PRIME = (
    "import os, sys; sys.path.insert(0, {root!r}); hasattr(os, 'nice') and os.nice(10); "
    "from cbsim.run.kernel_priming import prime; prime()"
)


def start_in_background() -> None:
    """Start :func:`prime` in a detached process (its own session: a Ctrl-C at the terminal does
    not reach it), silent; nothing happens when it cannot start."""
    with contextlib.suppress(OSError, ValueError):
        subprocess.Popen(
            [sys.executable, "-c", _PRIME.format(root=str(Path(__file__).resolve().parents[2]))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )


def prime() -> None:
    """Simulate the small scenarios, leaving their kernels in numba's cache."""
    for scenario in (PLAIN, SPECULATIVE):
        simulate(load_scenario(scenario), interpret_while_cold=False)


if __name__ == "__main__":
    prime()
