"""Kernel cache entries stamped with the sources of every kernel and of what they import
(:func:`cbsim.cost.kernel_cache.stamp_kernels`): numba stamps an entry with its own file alone,
so a kernel whose callee (in another module) changed loaded its old machine code."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import cbsim
from cbsim.cost.kernel_cache import (
    STAMP_TAG,
    cached,
    sources_fingerprint,
    stamp_kernels,
    stamp_with,
)
from cbsim.cost.kernel_loading import package_kernels

HELPER = """
import numba

CONSTANT = {value}


@numba.njit(cache=True)
def helper() -> int:
    return CONSTANT
"""

KERNEL = """
import numba

from {package}.helper import helper


@numba.njit(cache=True)
def kernel() -> int:
    return helper() + 1
"""


def _probe_package(root: Path, name: str, value: int) -> Path:
    """A package ``name`` under ``root``: ``kernel`` calls ``helper`` of another module, which
    returns ``value``."""
    package = root / name
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text(HELPER.format(value=value))
    (package / "kernel.py").write_text(KERNEL.format(package=name))
    return package


def _imported(root: Path, name: str) -> tuple[ModuleType, ModuleType]:
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        return importlib.import_module(f"{name}.kernel"), importlib.import_module(f"{name}.helper")
    finally:
        sys.path.remove(str(root))


def test_every_cbsim_kernel_is_stamped_with_its_packages_sources() -> None:
    kernels = package_kernels("cbsim")
    assert len(kernels) > 50
    modules = sorted({k.py_func.__module__ for k in kernels})
    expected = sources_fingerprint(modules, Path(cbsim.__file__).parent)
    for kernel in kernels:
        stamp = kernel._cache._cache_file._source_stamp
        assert stamp[0] == STAMP_TAG and stamp[2] == expected, kernel
    # the kernels' own modules and what they import by name: constants and callees
    names = {part.split(":")[0] for part in expected.split(";")}
    assert {"cbsim.cost.compiled", "cbsim.engine.decode_run", "cbsim.common.pcg64"} <= names
    assert "cbsim.engine.speculative.slots" in names and "cbsim.cost.engine_profile" in names
    assert cbsim.__name__ not in names  # the package's __init__ defines no kernel


def test_stamping_twice_keeps_numbas_own_stamp() -> None:
    kernel = package_kernels("cbsim")[0]
    index = kernel._cache._cache_file
    before = index._source_stamp
    assert stamp_with(kernel, "other")
    assert index._source_stamp == (STAMP_TAG, before[1], "other")
    assert stamp_with(kernel, before[2])
    assert index._source_stamp == before


def test_the_fingerprint_follows_an_imported_modules_source(tmp_path: Path) -> None:
    name = "cbsim_probe_fingerprint"
    _probe_package(tmp_path, name, 1)
    root = tmp_path / name
    first = sources_fingerprint([f"{name}.kernel"], root)  # read from the files, not imported
    assert f"{name}.helper:" in first and f"{name}.kernel:" in first and "numba" not in first
    (root / "helper.py").write_text(HELPER.format(value=2))
    assert sources_fingerprint([f"{name}.kernel"], root) != first  # the kernel's file unchanged
    (root / "helper.py").write_text(HELPER.format(value=1))
    assert sources_fingerprint([f"{name}.kernel"], root) == first


def test_an_entry_stamped_with_other_sources_does_not_load(tmp_path: Path) -> None:
    name = "cbsim_probe_entry"
    _probe_package(tmp_path, name, 1)
    kernel_module, _ = _imported(tmp_path, name)
    assert stamp_with(kernel_module.kernel, "sources as they were")
    assert kernel_module.kernel() == 2  # compiled and saved under that stamp
    kernel_module, _ = _imported(tmp_path, name)  # a later process's dispatchers
    stamp_with(kernel_module.kernel, "sources as they were")
    assert cached(kernel_module.kernel)
    stamp_with(kernel_module.kernel, "sources since changed")
    assert not cached(kernel_module.kernel)


UPDATE = """
import sys
sys.path.insert(0, {root!r})
from cbsim.cost.kernel_cache import stamp_kernels
from cbsim.cost.kernel_loading import package_kernels
import {name}.kernel as k
if sys.argv[1] == "stamped":
    stamp_kernels(package_kernels({name!r}))
print(k.kernel())
"""


@pytest.mark.slow  # four interpreters compiling (about 8 s); .ci/run's second stage runs it
def test_a_callee_changed_in_another_module_is_compiled_again(tmp_path: Path) -> None:
    """numba's own stamp misses it (the caller's file is unchanged): the old machine code loads;
    stamped with the sources, the kernel compiles again and returns the new value."""
    name = "cbsim_probe_update"
    _probe_package(tmp_path, name, 1)
    script = UPDATE.format(root=str(tmp_path), name=name)

    def run(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
        )
        return int(done.stdout.split()[-1])

    assert run("numba's own stamp") == 2
    (tmp_path / name / "helper.py").write_text(HELPER.format(value=10))
    assert run("numba's own stamp") == 2  # stale: the kernel's file did not change
    assert run("stamped") == 11
    assert run("stamped") == 11  # and loads so from then on


def test_stamping_a_package_stamps_each_kernel_once() -> None:
    kernels = package_kernels("cbsim")
    assert stamp_kernels(kernels) == len(kernels)
