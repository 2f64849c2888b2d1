"""Sweeps: one base scenario, many variations, every result in one table.

A capacity question is rarely one run: "which of two schedulers meets the SLO at 4, 8 and 16
requests per second, over three seeds?" is eighteen runs. A sweep file names a ``base``
scenario (a path relative to the sweep file, or an inline mapping), a ``grid`` of dotted scenario
keys with the values to try (the sweep is their Cartesian product), optional explicit ``points``
(override mappings, instead of or beside the grid) and the ``seeds`` to run each point with
(default: the base scenario's seed)::

    name: sched-vs-load
    base: ../scenarios/chat-llama3-8b-h100.yaml
    grid:
      workload.arrival.rate: [4, 8, 16]
      scheduler.kind: [prefill_first, sarathi]
    points:
      - {scheduler.kind: sarathi, scheduler.max_batched_tokens: 256}
    seeds: [1, 2, 3]

Every point (override mapping × seed) is resolved to a validated :class:`~cbsim.run.loading.Scenario`
and named by its *key*: a short SHA-256 of the canonical JSON of the resolved scenario (seed
included). Results go to ``<out>/points/<key>/`` (the files of
:meth:`~cbsim.run.results.Results.write` plus ``point.json`` with the overrides, seed and key, written
atomically) and one row per point × seed to ``<out>/sweep.parquet``: the override values (dotted key names as columns),
``seed``, ``key`` and every summary field. Because the key is derived from the resolved scenario,
re-running a sweep skips points already done, and a point whose scenario changed (a new base, a
new default) is simulated afresh; old results are never mixed in. Relative file paths in the base
are taken relative to the base file, those in overrides relative to the sweep file; both are
resolved to absolute paths before hashing, so keys do not depend on the working directory.
``<out>`` must be new, empty or an earlier sweep's folder (:data:`SWEEP`, see :mod:`cbsim.common.output_folders`);
a resumed sweep also finishes point writes and deletes temporaries that killed processes left.

Points run on a local process pool (``backend="local"``; its workers end when the sweep's process
dies, see :mod:`cbsim.common.parent_watch`) or as Ray tasks (``backend="ray"``, optional extra
``cbsim[ray]``). A simulation draws its randomness only from generators derived
from its scenario's seed, so the same point gives the same summary on any backend, in any process.

A point whose scenario is invalid, or whose run fails, is reported with its overrides and skipped;
the other points still run. ``cbsim sweep`` exits 0 when at least one point succeeded and no point
hit an internal error (failures are listed on stderr), 1 when no point succeeded or a point hit an
internal error (a bug: its traceback is printed), and 2 when the sweep file itself is wrong.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pandas as pd

from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError, UserError
from cbsim.studies.sweep.execution import (
    BACKENDS,
    RAY_INSTALL_HINT,
    Backend,
    _import_ray,
    _run_local,
    _run_ray,
)
from cbsim.studies.sweep.folder import (
    POINT_FILE,
    POINTS_DIR,
    SWEEP,
    SWEEP_POINT,
    TABLE_FILE,
    _is_complete,
    _prepare_sweep_folder,
    _read_summary,
    _write_table,
    sweep_frame,
    write_point,
)
from cbsim.studies.sweep.grid import (
    KEY_LENGTH,
    PointFailure,
    Sweep,
    SweepPoint,
    _as_sweep,
    expand_points,
    load_sweep,
    point_key,
    resolve_points,
)

__all__ = [
    "BACKENDS",
    "KEY_LENGTH",
    "POINTS_DIR",
    "POINT_FILE",
    "RAY_INSTALL_HINT",
    "SWEEP",
    "SWEEP_POINT",
    "TABLE_FILE",
    "Backend",
    "PointFailure",
    "Sweep",
    "SweepPoint",
    "SweepReport",
    "execute_sweep",
    "expand_points",
    "load_sweep",
    "point_key",
    "resolve_points",
    "run_sweep",
    "sweep_command",
    "sweep_frame",
    "write_point",
]

# progress(points_done, points_total); points resumed from an earlier run count as done.
SweepProgress = Callable[[int, int], None]
# sweep.parquet is rewritten as points complete, but not more often than this (and at the end)
TABLE_REWRITE_INTERVAL_S = 1.0


@dataclass
class SweepReport:
    """What a sweep run did: the table, where it went, what ran, what was resumed, what failed."""

    name: str
    frame: pd.DataFrame
    out: Path
    points: int  # distinct points (by key) that resolved to a valid scenario
    ran: int  # points simulated (or attempted) by this run
    resumed: int  # points skipped because an earlier run had completed them
    succeeded: int  # points with results, run now or resumed
    invalid: int  # points whose scenario did not validate (never run; listed in failures)
    failures: list[PointFailure] = field(default_factory=list)

    @property
    def internal_errors(self) -> list[PointFailure]:
        """Failures that were unexpected exceptions (bugs), not problems with the input."""
        return [f for f in self.failures if f.internal]


def _check_options(backend: str, workers: int | None, address: str | None) -> None:
    if backend not in BACKENDS:
        raise CbsimError(
            f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}", field="backend"
        )
    if workers is not None and workers < 1:
        raise CbsimError(f"must be at least 1, got {workers}", field="workers")
    if address is not None and backend != "ray":
        raise CbsimError("applies only to the ray backend (--backend ray)", field="address")


def execute_sweep(
    sweep: str | Path | Mapping[str, Any] | Sweep,
    *,
    backend: str = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    address: str | None = None,
    progress: SweepProgress | None = None,
) -> SweepReport:
    """Run a sweep (see :func:`run_sweep`) and report what happened in detail."""
    _check_options(backend, workers, address)
    if backend == "ray":
        _import_ray()  # fail before anything is written
    spec = _as_sweep(sweep)
    points, failures = resolve_points(spec)
    invalid = len(failures)
    out_dir = Path(out) if out is not None else Path("results") / "sweeps" / spec.sweep_name
    points_dir = out_dir / POINTS_DIR
    table_path = out_dir / TABLE_FILE
    _prepare_sweep_folder(out_dir)

    keys = [p.key for p in points]
    unique: dict[str, SweepPoint] = {}
    for point, key in zip(points, keys, strict=True):
        unique.setdefault(key, point)
    summaries: dict[str, dict[str, Any]] = {}
    for key in unique:
        if _is_complete(points_dir / key):
            summaries[key] = _read_summary(points_dir / key)
    resumed = len(summaries)
    todo_keys = [k for k in unique if k not in summaries]
    todo = [unique[k] for k in todo_keys]

    total, done = len(unique), resumed
    if progress is not None:
        progress(done, total)
    source = str(spec.source) if spec.source is not None else None

    last_write = time.monotonic()

    def write_table() -> None:
        try:
            _write_table(sweep_frame(points, summaries), table_path)
        except OSError as err:
            raise CbsimError(
                f"cannot write: {err.strerror or err}", source=str(table_path)
            ) from None

    if todo:
        workers_n = workers if workers is not None else (os.cpu_count() or 1)
        outcomes = (
            _run_local(todo, todo_keys, points_dir, workers_n, source)
            if backend == "local"
            else _run_ray(todo, todo_keys, points_dir, workers, address, source)
        )
        with contextlib.closing(outcomes):
            for outcome in outcomes:
                point = unique[outcome.key]
                if outcome.error is not None:
                    failures.append(
                        PointFailure(
                            point.overrides,
                            point.seed,
                            outcome.error,
                            outcome.key,
                            outcome.internal,
                        )
                    )
                else:
                    summaries[outcome.key] = _read_summary(points_dir / outcome.key)
                done += 1
                if progress is not None:
                    progress(done, total)
                if time.monotonic() - last_write >= TABLE_REWRITE_INTERVAL_S:
                    write_table()
                    last_write = time.monotonic()
    # workers of a killed earlier sweep may have ended only after this one started
    outputs.remove_stale_temporaries(points_dir)
    write_table()
    frame = pd.read_parquet(table_path)
    return SweepReport(
        name=spec.sweep_name,
        frame=frame,
        out=out_dir,
        points=total,
        ran=len(todo),
        resumed=resumed,
        succeeded=len(summaries),
        invalid=invalid,
        failures=failures,
    )


def run_sweep(
    sweep: str | Path | Mapping[str, Any] | Sweep,
    *,
    backend: str = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    address: str | None = None,
    progress: SweepProgress | None = None,
) -> pd.DataFrame:
    """Run every point of a sweep and return the ``sweep.parquet`` table.

    ``sweep`` is a sweep YAML path, a mapping or a :class:`Sweep`. ``backend`` is ``"local"`` (a
    process pool of ``workers`` processes, default one per CPU) or ``"ray"`` (one Ray task per
    point; ``address`` connects to an existing cluster, else a Ray already initialised in this
    process is used, else a local one with ``workers`` CPUs is started and shut down). Results go
    to ``out`` (default ``results/sweeps/<sweep name>/``); completed points are not run again.
    ``progress(done, total)`` is called as points finish.

    The frame's ``attrs`` hold ``failures`` (a list of dicts: overrides, seed, key, error,
    internal), ``ran``, ``resumed`` and ``out``. Invalid or failing points do not raise.

    The local backend starts its workers from a fork server (or spawns them:
    :mod:`cbsim.common.worker_start`), so a script that calls this at import level needs the
    usual ``if __name__ == "__main__":`` guard.
    """
    report = execute_sweep(
        sweep, backend=backend, workers=workers, out=out, address=address, progress=progress
    )
    frame = report.frame
    frame.attrs.update(
        failures=[f.to_dict() for f in report.failures],
        ran=report.ran,
        resumed=report.resumed,
        out=str(report.out),
    )
    return frame


# --------------------------------------------------------------------------- command line


def _progress_enabled(quiet: bool) -> bool:
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _progress_display(enabled: bool, quiet: bool = True) -> Iterator[SweepProgress | None]:
    """A rich progress bar on stderr (points done / total, elapsed time and ETA) when
    ``enabled`` (a terminal); else, unless ``quiet``, a plain line per point finished
    (``sweep: 3 of 8 points done · about 1m05s left``)."""
    if not enabled:
        if quiet:
            yield None
            return
        from cbsim.common.progress import StepReporter

        reporter = StepReporter("sweep", interactive=False)
        yield lambda done, total: reporter.counted(done, total, "points")
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task("sweep", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@click.command("sweep")
@click.argument("sweep_file", metavar="SWEEP.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="local: a process pool; ray: one Ray task per point (needs cbsim[ray]).",
)
@click.option(
    "--workers",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel points (default: one per CPU; with --address, the tasks in flight).",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sweep directory. Default: results/sweeps/<sweep name>/.",
)
@click.option("--address", default=None, help="Ray cluster address to connect to (ray backend).")
@click.option("--quiet", "-q", is_flag=True, help="No progress or summary; print the directory.")
def sweep_command(
    sweep_file: Path,
    backend: str,
    workers: int | None,
    out: Path | None,
    address: str | None,
    quiet: bool,
) -> None:
    """Run every point of SWEEP.yaml (a base scenario × grid × seeds) and collect one table.

    Completed points are skipped on a re-run. Progress goes to stderr: a bar on a terminal, a
    line per point elsewhere (--quiet: none). Exit status: 0 when at least one point succeeded
    (failed points are listed on stderr), 1 when none did or a point hit an internal error,
    2 for a bad sweep file or option.
    """
    try:
        with _progress_display(_progress_enabled(quiet), quiet) as progress:
            report = execute_sweep(
                sweep_file,
                backend=backend,
                workers=workers,
                out=out,
                address=address,
                progress=progress,
            )
    except CbsimError as err:
        if err.field in ("backend", "workers", "address") and err.source is None:
            raise UserError(f"--{err.field}: {err.message}") from None
        raise UserError(str(err)) from None
    for failure in report.failures:
        click.echo(f"failed: {failure.describe()}", err=True)
    if quiet:
        click.echo(str(report.out))
    else:
        total = report.points + report.invalid
        click.echo(
            f"sweep {report.name}: {total} point{'s' if total != 1 else ''}: "
            f"{report.succeeded} succeeded ({report.resumed} resumed), "
            f"{len(report.failures)} failed"
            + (f" ({report.invalid} invalid)" if report.invalid else "")
        )
        click.echo(f"results: {report.out / TABLE_FILE} ({len(report.frame)} rows)")
        if len(report.frame):
            from cbsim.common.console import wide_console
            from cbsim.studies.sweep.table import (
                points_table,  # the CLI's table, not the sweep's model
            )

            wide_console().print(points_table(report.frame, report.out))
    if report.succeeded == 0 or report.internal_errors:
        raise click.exceptions.Exit(1)
