"""Worker processes start from a fork server that imported the simulation once, with the
parent's environment as the pool started."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys

import pytest

from cbsim.common.worker_start import PRELOADED, parent_environment, start_worker, worker_context

MARK = "CBSIM_WORKER_START_TEST"


def _loaded_and_marked() -> tuple[list[str], str | None]:
    """In a worker: which of the preloaded modules it holds, and the test's variable."""
    return [name for name in PRELOADED if name in sys.modules], os.environ.get(MARK)


def _pool(workers: int = 1) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=worker_context(),
        initializer=start_worker,
        initargs=(os.getpid(), parent_environment()),
    )


@pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server here"
)
def test_workers_start_with_the_simulation_imported() -> None:
    assert worker_context().get_start_method() == "forkserver"
    with _pool() as pool:
        loaded, _ = pool.submit(_loaded_and_marked).result(timeout=120)
    assert loaded == list(PRELOADED)


def test_a_worker_has_the_environment_its_pool_started_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MARK, raising=False)
    with _pool() as pool:  # the fork server (if any) starts without the variable
        assert pool.submit(_loaded_and_marked).result(timeout=120)[1] is None
    monkeypatch.setenv(MARK, "set after the server started")
    with _pool() as pool:
        assert pool.submit(_loaded_and_marked).result(timeout=120)[1] == os.environ[MARK]
    monkeypatch.delenv(MARK)
    with _pool() as pool:
        assert pool.submit(_loaded_and_marked).result(timeout=120)[1] is None
