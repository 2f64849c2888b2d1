"""Worker processes start from a fork server that imported the simulation once, and take from
the process that started their pool its environment, its Ctrl-C handling and its copy of cbsim."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import signal
import sys
from typing import Any

import pytest

from cbsim.common.worker_start import (
    PRELOADED,
    WorkerStart,
    parent_start,
    start_worker,
    worker_context,
)

MARK = "CBSIM_WORKER_START_TEST"


def _seen() -> tuple[list[str], str | None, bool]:
    """In a worker: which of the preloaded modules it holds, the test's variable, and whether
    Ctrl-C interrupts it."""
    loaded = [name for name in PRELOADED if name in sys.modules]
    interrupts = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    return loaded, os.environ.get(MARK), interrupts


def _in_worker(start: WorkerStart | None = None) -> tuple[list[str], str | None, bool]:
    with cf.ProcessPoolExecutor(
        max_workers=1,
        mp_context=worker_context(),
        initializer=start_worker,
        initargs=(start or parent_start(),),
    ) as pool:
        result: Any = pool.submit(_seen).result(timeout=120)
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
def test_workers_start_with_the_simulation_imported() -> None:
    assert worker_context().get_start_method() == "forkserver"
    loaded, _, _ = _in_worker()
    assert loaded == list(PRELOADED)


def test_a_worker_has_the_environment_its_pool_started_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MARK, raising=False)
    assert _in_worker()[1] is None  # the fork server (if any) starts without the variable
    monkeypatch.setenv(MARK, "set after the server started")
    assert _in_worker()[1] == os.environ[MARK]
    monkeypatch.delenv(MARK)
    assert _in_worker()[1] is None


def test_a_worker_handles_ctrl_c_as_its_parent_does() -> None:
    # as at a terminal (pytest started in the background of a shell inherits SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start = parent_start()
        assert start.interrupts
        assert _in_worker(start)[2] is True
        assert _in_worker(dataclasses.replace(start, interrupts=False))[2] is False
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert not parent_start().interrupts
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_worker_of_another_copys_server_imports_its_parents_copy() -> None:
    """A server that imported cbsim from elsewhere: the worker forgets that copy (the jobs
    import the parent's, as a spawned worker's do)."""
    foreign = dataclasses.replace(parent_start(), package_file="/elsewhere/cbsim/__init__.py")
    loaded, _, _ = _in_worker(foreign)
    # what the job's module imports again (cbsim and its API), not what only the server had
    assert "cbsim.studies.capacity.workers" not in loaded
