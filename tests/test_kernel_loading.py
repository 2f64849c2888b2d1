"""cbsim's kernels load from numba's cache without numba's compiler set-up
(:mod:`cbsim.cost.kernel_loading`): every kernel does, a cached one loads without importing
numba's implementation registries, compiling still works after, and a load that fails falls back
to numba's own."""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numba
import pytest

import cbsim
from cbsim.cost.kernel_loading import LightLoad, load_lightly, package_kernels

# a module numba imports only to compile (target context refresh), never to load machine code
REGISTRY_MODULE = "numba.np.arraymath"

KERNEL_SOURCE = textwrap.dedent(
    """
    import numba

    @numba.njit(cache=True)
    def triple(x):
        return 3 * x
    """
)

LOADER = textwrap.dedent(
    """
    import sys
    import numba
    from cbsim.cost.kernel_loading import load_lightly
    import tiny_kernel

    light = sys.argv[1] == "light"
    if light:
        assert load_lightly(tiny_kernel.triple)
    assert tiny_kernel.triple(14) == 42
    hits = sum(tiny_kernel.triple.stats.cache_hits.values())
    registries = "{registry}" in sys.modules

    @numba.njit(cache=False)
    def fresh(x):
        return x + 1

    print(hits, registries, fresh(41))
    """
).replace("{registry}", REGISTRY_MODULE)


def test_every_cbsim_kernel_loads_lightly() -> None:
    for module in pkgutil.walk_packages(cbsim.__path__, "cbsim."):
        importlib.import_module(module.name)
    kernels = package_kernels("cbsim")
    assert len(kernels) > 50
    plain = [k.py_func.__qualname__ for k in kernels if not isinstance(_load(k), LightLoad)]
    assert plain == []  # a kernel module cbsim/__init__ does not import loads numba's way


def _run(tmp_path: Path, *args: str) -> str:
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "loader.py"), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow  # three interpreters compiling (10 s); CI's second stage runs it
def test_a_cached_kernel_loads_without_numbas_compiler_set_up(tmp_path: Path) -> None:
    (tmp_path / "tiny_kernel.py").write_text(KERNEL_SOURCE)
    (tmp_path / "loader.py").write_text(LOADER)
    _run(tmp_path, "numba")  # compiles, and caches, the kernel
    assert _run(tmp_path, "numba") == "1 True 42"  # numba's own load sets the compiler up
    assert _run(tmp_path, "light") == "1 False 42"  # loaded from the cache, then compiling works


class _Cache:
    """A dispatcher cache whose own (light) load fails."""

    def load_overload(self, sig: Any, target_context: Any) -> str:
        return "numba's own load"

    def _load_overload(self, sig: Any, target_context: Any) -> str:
        raise RuntimeError("an unexpected cache entry")

    def _guard_against_spurious_io_errors(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


class _Dispatcher:
    def __init__(self) -> None:
        self._cache = _Cache()


def test_a_failing_light_load_falls_back_to_numbas_own() -> None:
    dispatcher = _Dispatcher()
    assert load_lightly(dispatcher)
    load = _load(dispatcher)
    assert isinstance(load, LightLoad)
    assert load("sig", None) == "numba's own load"


def test_loading_lightly_twice_changes_nothing() -> None:
    dispatcher = _Dispatcher()
    load_lightly(dispatcher)
    first = _load(dispatcher)
    assert load_lightly(dispatcher)
    assert _load(dispatcher) is first


def test_a_kernel_without_a_cache_keeps_numbas_load() -> None:
    @numba.njit(cache=False)
    def double(x: int) -> int:
        return 2 * x

    assert not load_lightly(double)
    assert not load_lightly(object())
    assert double(21) == 42


def _load(dispatcher: Any) -> Any:
    return dispatcher._cache.load_overload
