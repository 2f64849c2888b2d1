"""Shared helpers for the cbsim tests: small scenario dicts and a scheduler driver.

``small_scenario`` returns a plain dict (what a YAML file would hold) for a run that takes a few
milliseconds: 40 requests, short prompts and outputs, llama-3-8b on one h100-sxm. Overrides are
keyword arguments whose double underscores separate nesting levels
(``small_scenario(scheduler__kind="sarathi", workload__num_requests=20)``) or a mapping of dotted
keys (``small_scenario({"scheduler.kind": "sarathi"})``); a value replaces the whole node there.
"""

from __future__ import annotations

import copy
import gc
import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cbsim.engine.scheduler.base import Batch, SchedulerPolicy
from cbsim.workload.request import Request

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread_per_worker() -> None:
    """Give the workers (started after this, inheriting the environment) and the commands they
    start one BLAS thread each, unless the caller chose a number: with one worker per core, each
    worker's OpenBLAS otherwise starts a thread per core, and the threads of two workers spin
    against each other (the GEMM calibration tests ran 3.3x slower on two cores)."""
    for variable in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")


def pytest_configure(config: pytest.Config) -> None:
    """Before parallel workers start, fill numba's cache once with the kernels the tests use (two
    small runs, plain and speculative): on a fresh checkout each worker would otherwise compile
    the same kernels side by side (about 35 s of CPU each); with the cache warm it costs the two
    small runs. A worker (``workerinput``) or a run without workers compiles as it goes."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    workers = config.getoption("numprocesses", default=None)
    if not workers or workers == "0":
        return
    one_blas_thread_per_worker()
    from cbsim.run.kernel_priming import prime

    prime()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep what collection left (cbsim, pandas, numba, hypothesis, every test module and item:
    objects that live as long as the process) out of the garbage collector's full collections,
    as the ``cbsim`` command does with its imports (``cbsim_launcher``), rather than walking
    them again in each. A small simulation after the imports ran 45 -> 31 ms with them frozen;
    the tests of the decode cohorts and prefix caching, collected with the whole suite, 3-4%
    faster. What the tests create is collected as usual."""
    gc.collect()
    gc.freeze()


BASE_SCENARIO: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "workload": {
        "num_requests": 40,
        "arrival": {"kind": "poisson", "rate": 4.0},
        "prompt_tokens": {"kind": "uniform", "low": 32, "high": 512},
        "output_tokens": {"kind": "uniform", "low": 8, "high": 64},
    },
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "replicas": 1},
    "scheduler": {"kind": "prefill_first"},
}


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted == "a.b.c"``, creating mappings on the way."""
    node = data
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = copy.deepcopy(value)


def small_scenario(dotted: Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A small, fast scenario as a dict, with overrides applied (see the module docstring)."""
    data = copy.deepcopy(BASE_SCENARIO)
    for key, value in (dotted or {}).items():
        set_dotted(data, key, value)
    for key, value in overrides.items():
        set_dotted(data, key.replace("__", "."), value)
    return data


@dataclass
class DriveResult:
    """What :func:`drive` saw: the batches in order, the emitted token counts per batch and the
    requests in the order they finished."""

    batches: list[Batch] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)


def drive(
    sched: SchedulerPolicy, *, start: float = 0.0, step: float = 1.0, max_iterations: int = 10_000
) -> DriveResult:
    """Run a scheduler until it has no work, with iterations of fixed length ``step``.

    Iteration i (from 0) runs from ``start + i*step`` to ``start + (i+1)*step``; requests finishing
    in it get that end time.
    """
    result = DriveResult()
    now = start
    for _ in range(max_iterations):
        batch = sched.next_batch(now)
        if not batch.requests:
            if not sched.has_work:
                return result
            raise AssertionError("scheduler has work but formed no batch")
        result.batches.append(batch)
        now += step
        result.emitted.append(sched.complete(batch, now, result.finished.append))
    raise AssertionError("scheduler did not drain")


def batch_entries(batch: Batch) -> list[tuple[int, int]]:
    """(request_id, new_tokens) pairs of a batch, in batch order."""
    return [(r.request_id, q) for r, q in zip(batch.requests, batch.new_tokens, strict=True)]


def summaries_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equality of two summaries where NaN equals NaN."""
    if set(a) != set(b):
        return False
    for key, x in a.items():
        y = b[key]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


# --------------------------------------------------------------------------- headless Chromium

# Flags for headless Chromium on a machine without network: without the background-networking
# ones it hangs on connections this machine refuses.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def find_chromium() -> str | None:
    """The first Chromium (or Chrome) executable on PATH."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def run_chromium(
    chromium: str, profile: Path, *args: str, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once with the fresh profile folder ``profile``; a run that does not
    finish within ``timeout_s`` fails the test."""
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {timeout_s} s: {' '.join(command)}")


def drawn_scheduler(draw: Any, kind: str, max_batch_size: int) -> dict[str, Any]:
    """A hypothesis-drawn scheduler section of ``kind`` with only the keys that kind reads
    (sarathi's budget by its Sarathi-Serve name, ``chunk_size``)."""
    from hypothesis import strategies as st

    scheduler = {
        "kind": kind,
        "block_size": draw(st.sampled_from([1, 8, 16, 32])),
        "max_batch_size": max_batch_size,
        "max_batched_tokens": draw(st.integers(max(64, max_batch_size), 8192)),
        "chunk_size": draw(st.integers(max(16, max_batch_size), 1024)),
    }
    del scheduler["max_batched_tokens" if kind == "sarathi" else "chunk_size"]
    return scheduler
