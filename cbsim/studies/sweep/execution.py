"""Sweep execution: running the points, on a local process pool or as Ray tasks.

``backend="local"`` runs points on a process pool whose workers end when the sweep's process dies
(:mod:`cbsim.common.parent_watch`); ``backend="ray"`` runs them as Ray tasks (optional extra
``cbsim[ray]``), their results written back by the driver. A simulation draws its randomness only
from generators derived from its scenario's seed, so the same point gives the same summary on any
backend, in any process. A point whose run fails becomes an outcome with its error (a user error,
or an internal one with its traceback), and the other points still run.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib
import logging
import os
import traceback
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cbsim.common.errors import CbsimError
from cbsim.common.worker_start import parent_start, start_worker, worker_context
from cbsim.run.results import Results
from cbsim.schema.scenario import Scenario
from cbsim.studies.sweep.folder import _point_meta, write_point
from cbsim.studies.sweep.grid import SweepPoint

Backend = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = ("local", "ray")
RAY_INSTALL_HINT = "pip install 'cbsim[ray]'"


# --------------------------------------------------------------------------- running one point


@dataclass
class _Outcome:
    """What running one point gave: nothing (written by the worker), results, or an error."""

    key: str
    results: Results | None = None
    error: str | None = None
    internal: bool = False


def _simulate_point(
    scenario: Scenario,
    key: str,
    meta: dict[str, Any],
    points_dir: str | None,
    source: str | None,
) -> _Outcome:
    """Run one point (in a worker). Writes it when ``points_dir`` is given, else returns it."""
    from cbsim.run.simulate import simulate

    try:
        results = simulate(scenario, source=source)
    except CbsimError as err:
        return _Outcome(key, error=str(err))
    except Exception:
        return _Outcome(key, error=traceback.format_exc(), internal=True)
    if points_dir is None:
        return _Outcome(key, results=results)
    try:
        write_point(Path(points_dir), key, results, meta)
    except (OSError, CbsimError) as err:
        return _Outcome(key, error=f"cannot write results: {err}")
    except Exception:
        return _Outcome(key, error=traceback.format_exc(), internal=True)
    return _Outcome(key)


# --------------------------------------------------------------------------- backends


def _run_local(
    todo: Sequence[SweepPoint],
    keys: Sequence[str],
    points_dir: Path,
    workers: int,
    source: str | None,
) -> Generator[_Outcome, None, None]:
    """Run points on a pool of worker processes (:mod:`cbsim.common.worker_start`); workers write
    their own results."""
    pool = cf.ProcessPoolExecutor(
        max_workers=min(workers, len(todo)),
        mp_context=worker_context(),
        initializer=start_worker,  # a killed sweep must not leave workers computing
        initargs=(parent_start(),),
    )
    finished = False
    try:
        futures = {
            pool.submit(
                _simulate_point, p.scenario, k, _point_meta(p, k), str(points_dir), source
            ): k
            for p, k in zip(todo, keys, strict=True)
        }
        for future in cf.as_completed(futures):
            try:
                yield future.result()
            except Exception as err:  # the worker died (killed, out of memory, ...)
                yield _Outcome(futures[future], error=f"worker failed: {err!r}", internal=True)
        finished = True
    finally:
        pool.shutdown(wait=finished, cancel_futures=True)


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise CbsimError(
            f"the ray backend needs Ray, which is not installed: {RAY_INSTALL_HINT}",
            field="backend",
        ) from None


@contextlib.contextmanager
def _ray_session(ray: Any, address: str | None, workers: int | None) -> Iterator[None]:
    """Connect to ``address``, reuse an initialised Ray, or start (and stop) a local one."""
    if ray.is_initialized():
        yield
        return
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
    }
    if address is not None:
        options["address"] = address
    else:
        options["address"] = "local"
        options["num_cpus"] = workers or os.cpu_count() or 1
    try:
        ray.init(**options)
    except Exception as err:
        where = f"cannot connect to Ray at {address!r}" if address else "cannot start Ray"
        raise CbsimError(f"{where}: {err}", field="address" if address else "backend") from None
    try:
        yield
    finally:
        ray.shutdown()


def _run_ray(
    todo: Sequence[SweepPoint],
    keys: Sequence[str],
    points_dir: Path,
    workers: int | None,
    address: str | None,
    source: str | None,
) -> Generator[_Outcome, None, None]:
    """Run each point as a Ray task; results come back to this process, which writes them."""
    ray = _import_ray()
    with _ray_session(ray, address, workers):
        task = ray.remote(num_cpus=1)(_simulate_point)
        window = workers if workers is not None else len(todo)
        queue = list(zip(todo, keys, strict=True))
        pending: dict[Any, tuple[SweepPoint, str]] = {}
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    point, key = queue.pop(0)
                    ref = task.remote(point.scenario, key, _point_meta(point, key), None, source)
                    pending[ref] = (point, key)
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    point, key = pending.pop(ref)
                    try:
                        outcome: _Outcome = ray.get(ref)
                    except Exception as err:  # the task or its worker died
                        yield _Outcome(key, error=f"Ray task failed: {err!r}", internal=True)
                        continue
                    yield _write_returned(outcome, point, points_dir)
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)


def _write_returned(outcome: _Outcome, point: SweepPoint, points_dir: Path) -> _Outcome:
    if outcome.results is None:
        return outcome
    try:
        write_point(points_dir, outcome.key, outcome.results, _point_meta(point, outcome.key))
    except (OSError, CbsimError) as err:
        return _Outcome(outcome.key, error=f"cannot write results: {err}")
    return _Outcome(outcome.key)
