"""Running ``cbsim bench``: simulate each load point, rebuild vLLM's result, write what was asked.

:func:`run_bench` simulates the load points of one ``cbsim bench`` call in order and returns, per
point, the run's :class:`~cbsim.run.results.Results`, vLLM's per-request records and vLLM's result
dict. With ``out`` it also writes cbsim's own result folders: one point's as ``cbsim run --out``
writes it (``out`` is a run result), several as ``cbsim sweep`` does (``out`` is a sweep folder:
``sweep.parquet`` with a ``workload.arrival.rate`` or ``workload.arrival.concurrency`` column and
``points/<key>/``), which ``cbsim report`` draws as a load curve and a rerun resumes.

:func:`save_paths` names the ``--save-result`` file of each point: the file itself for one point;
for a sweep one file per point, as vLLM writes one per run, named ``STEM-<load>SUFFIX`` with
vLLM's load naming (``bench-2qps.json``, ``bench-infqps.json``, ``bench-concurrency16.json``).
:func:`write_result_file` writes one atomically through :mod:`cbsim.common.output_folders`, replacing only a
file that ``cbsim bench`` wrote (its ``simulator`` key says so), never a measured vLLM result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cbsim import __version__
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.run.loading import apply_overrides, load_scenario, parse_override
from cbsim.run.results import RUN_RESULT, Results
from cbsim.schema.scenario import Scenario
from cbsim.studies.bench.load import (
    BenchOptions,
    LoadPoint,
    arrival_spec,
    option_of_field,
    scenario_data,
)
from cbsim.studies.bench.vllm_result import (
    RequestRecords,
    benchmark_result,
    request_records,
    result_json,
)

__all__ = [
    "BenchRun",
    "Reporting",
    "build_scenario",
    "ready_times",
    "run_bench",
    "save_paths",
    "vllm_file_name",
    "write_result_file",
]

SIMULATOR_KEY = "simulator"
"""The ``--metadata`` key that marks a result file as simulated (``cbsim <version>``)."""


@dataclass(frozen=True)
class Reporting:
    """What vLLM's result reports: ``--percentile-metrics``, ``--metric-percentiles``,
    ``--label`` and ``--save-detailed``."""

    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
    percentiles: tuple[float, ...] = (99.0,)
    label: str | None = None
    detailed: bool = False


@dataclass
class BenchRun:
    """One load point's run: the simulation, vLLM's per-request records and its result dict."""

    point: LoadPoint
    results: Results
    records: RequestRecords
    benchmark: dict[str, Any]

    def result_json(
        self, options: BenchOptions, reporting: Reporting, metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What ``--save-result`` writes for this point."""
        return result_json(
            self.benchmark,
            self.point,
            model_id=options.model,
            num_prompts=options.num_prompts,
            burstiness=options.burstiness,
            engine=options.engine,
            label=reporting.label,
            metadata=metadata,
            detailed=reporting.detailed,
        )


# --------------------------------------------------------------------------- scenarios


def _with_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    if not overrides:
        return data
    return apply_overrides(data, dict(parse_override(text) for text in overrides))


def build_scenario(options: BenchOptions, point: LoadPoint) -> Scenario:
    """The validated scenario of one load point; errors name the flag that set the field."""
    try:
        return load_scenario(scenario_data(options, point), overrides=list(options.overrides))
    except CbsimError as err:
        raise option_of_field(_from_override(err, options.overrides)) from None


def _from_override(err: CbsimError, overrides: Sequence[str]) -> CbsimError:
    """An error in a field a ``--set`` gave, located at that ``--set``."""
    if err.field is None or err.field.startswith("--"):
        return err
    for text in overrides:
        key = text.partition("=")[0].strip()
        if err.field == key or err.field.startswith(key + ".") or key.startswith(err.field + "."):
            return CbsimError(err.message, source=err.source, field=f"--set {err.field}")
    return err


def metadata_of(
    scenario: Scenario, options: BenchOptions, given: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ``--metadata`` keys a simulated result carries: the user's (``given``), then what
    simulated it and the deployment vLLM's file cannot record (``cbsim calibrate e2e`` reads them
    back; they win over a user key of the same name)."""
    cluster = scenario.cluster
    return {
        **(given or {}),
        SIMULATOR_KEY: f"cbsim {__version__}",
        "model": cluster.model,
        "gpu": cluster.gpu,
        "tp": cluster.tp,
        "dtype": cluster.dtype,
        "engine": options.engine,
        "seed": scenario.seed,
    }


# --------------------------------------------------------------------------- output paths


def save_paths(save: Path, points: Sequence[LoadPoint], *, append: bool = False) -> list[Path]:
    """The ``--save-result`` file of each point (see the module docstring); ``append``: every
    point's result appended to the one file."""
    if len(points) == 1 or append:
        return [save] * len(points)
    return [save.with_name(f"{save.stem}-{p.label}{save.suffix or '.json'}") for p in points]


def vllm_file_name(point: LoadPoint, *, label: str, model_id: str, date: str) -> str:
    """The name vLLM gives a result file without ``--result-filename``
    (``compute_result_filename``): ``{label}-{rate}qps[-concurrency{C}]-{model}-{date}.json``,
    the rate as Python prints the float (``2.0``, ``inf``), or the ramp
    (``{label}-ramp-up-linear-1qps-10qps...``)."""
    cap = f"-concurrency{point.max_concurrency}" if point.max_concurrency is not None else ""
    model = model_id.split("/")[-1]
    if point.ramp_up is not None:
        return f"{label}-{point.ramp_up.label}{cap}-{model}-{date}.json"
    return f"{label}-{float(point.request_rate)}qps{cap}-{model}-{date}.json"


def _results_in(path: Path) -> list[Any] | None:
    """The JSON results a file holds (one, or one per line as ``--append-result`` writes them),
    or None when it is not such a file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        return None


def _is_bench_file(path: Path) -> bool:
    """Whether ``path`` holds results ``cbsim bench`` wrote (so it may be replaced or appended
    to)."""
    results = _results_in(path)
    return bool(results) and all(
        isinstance(data, dict) and str(data.get(SIMULATOR_KEY, "")).startswith("cbsim")
        for data in results or []
    )


_DESCRIPTION = "a result cbsim bench wrote"


def check_result_file(path: Path) -> None:
    """Refuse, before simulating, a ``--save-result`` path that cannot or may not be written."""
    try:
        if path.is_dir():
            raise CbsimError("is a folder; give a file name", source=str(path))
        outputs.check_path(path)
        if path.exists() and not _is_bench_file(path):
            raise CbsimError(
                f"exists and is not {_DESCRIPTION}, so cbsim will not overwrite it: give a new "
                "file name (or move the file away)",
                source=str(path),
            )
    except CbsimError as err:
        raise err.located(field="--save-result") from None


def _json_safe(value: Any) -> Any:
    """Non-finite floats as null (vLLM's files are plain JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_result_file(path: Path, result: Mapping[str, Any], *, append: bool = False) -> Path:
    """Write one result JSON atomically (one line, as vLLM writes it); ``append``: after the
    results the file holds, on a line of its own (vLLM's ``--append-result``)."""
    text = json.dumps({k: _json_safe(v) for k, v in result.items()}, allow_nan=False)
    if append and path.is_file() and _is_bench_file(path):
        held = path.read_text(encoding="utf-8").rstrip("\n")
        text = f"{held}\n{text}" if held else text
    try:
        return outputs.write_bytes(
            path, text.encode("utf-8"), replaceable=_is_bench_file, description=_DESCRIPTION
        )
    except CbsimError as err:
        raise err.located(field="--save-result") from None
    except OSError as err:
        raise CbsimError(
            f"cannot write: {err.strerror or err}", source=str(path), field="--save-result"
        ) from None


def check_out(out: Path, points: Sequence[LoadPoint]) -> None:
    """Refuse, before simulating, an ``--out`` that is not new, empty or an earlier result of the
    same kind (a run result for one point, a sweep folder for several)."""
    try:
        outputs.check_path(out)
        if len(points) == 1:
            outputs.check_replaceable(out, RUN_RESULT)
        elif out.exists() and not out.is_dir():
            raise CbsimError("exists and is not a folder", source=str(out))
    except CbsimError as err:
        raise err.located(field="--out") from None


# --------------------------------------------------------------------------- running


def ready_times(results: Results, point: LoadPoint) -> np.ndarray | None:
    """When each request of a capped open loop became ready (None: not one), for vLLM's
    ``queue_times``: the run's arrivals drawn again from its scenario."""
    if point.max_concurrency is None:
        return None
    if point.ramp_up is None and math.isinf(point.request_rate):
        return None  # every prompt ready at 0
    from cbsim.workload.build import build_workload
    from cbsim.workload.drawn import ClosedLoopWorkload

    workload = build_workload(results.scenario)
    return workload.ready_s if isinstance(workload, ClosedLoopWorkload) else None


def _bench_run(
    results: Results, point: LoadPoint, reporting: Reporting, options: BenchOptions
) -> BenchRun:
    records = request_records(results, point, ready_times(results, point))
    benchmark = benchmark_result(
        records,
        point,
        percentile_metrics=reporting.percentile_metrics,
        percentiles=reporting.percentiles,
        goodput_ms=options.goodput_ms,
    )
    return BenchRun(point, results, records, benchmark)


SWEEP_AXES = ("rate", "concurrency", "max_concurrency")
"""The arrival keys a sweep's points set (and its table's columns name)."""


def _sweep_axis(
    point: LoadPoint, base_arrival: dict[str, Any], options: BenchOptions
) -> dict[str, Any]:
    """A point's override in the sweep file: its rate, concurrency and cap (the sweep's columns),
    or its whole arrival when that differs in anything else (an infinite rate: all at once; a
    ramp; constant gaps)."""
    arrival = arrival_spec(point, options.burstiness, options.num_prompts)
    others = {k: v for k, v in arrival.items() if k not in SWEEP_AXES}
    if others != {k: v for k, v in base_arrival.items() if k not in SWEEP_AXES}:
        return {"workload.arrival": arrival}
    return {f"workload.arrival.{k}": v for k, v in arrival.items() if k in SWEEP_AXES}


def _sweep_spec(options: BenchOptions, points: Sequence[LoadPoint]) -> dict[str, Any]:
    """The sweep (``cbsim sweep`` file as a mapping) of a multi-point bench."""
    finite = [p for p in points if not math.isinf(p.request_rate) or p.max_concurrency]
    base = _with_overrides(scenario_data(options, (finite or list(points))[0]), options.overrides)
    base_arrival = base["workload"].get("arrival", {})
    return {
        "name": "bench",
        "base": base,
        "points": [_sweep_axis(p, base_arrival, options) for p in points],
        "seeds": [options.seed],
    }


def _run_sweep(options: BenchOptions, points: Sequence[LoadPoint], out: Path) -> list[Results]:
    """Simulate the points as a ``cbsim sweep`` into ``out`` and read their results back."""
    from cbsim.studies.sweep.runner import POINTS_DIR, execute_sweep, resolve_points

    spec = _sweep_spec(options, points)
    resolved, invalid = resolve_points(spec)
    if invalid:
        raise CbsimError(f"invalid load point: {invalid[0].describe()}")
    try:
        report = execute_sweep(spec, out=out, workers=1)
    except CbsimError as err:
        raise err.located(field="--out") from None
    if report.internal_errors:
        raise RuntimeError(report.internal_errors[0].error)
    if report.failures:
        raise CbsimError(f"load point failed: {report.failures[0].describe()}")
    return [Results.read(out / POINTS_DIR / p.key) for p in resolved]


def _write_run(results: Results, out: Path) -> None:
    try:
        results.write(out)
    except CbsimError as err:
        raise err.located(field="--out") from None
    except OSError as err:
        raise CbsimError(
            f"cannot write results: {err.strerror or err}", source=str(out), field="--out"
        ) from None


def run_bench(
    options: BenchOptions,
    points: Sequence[LoadPoint],
    reporting: Reporting | None = None,
    *,
    out: Path | None = None,
    say: Callable[[str], None] | None = None,
) -> list[BenchRun]:
    """Simulate every load point (each scenario validated before any runs) and return vLLM's
    view of each; with ``out``, write cbsim's result folder(s) as the module docstring says.

    Several points with ``out`` run as a ``cbsim sweep`` on a worker process
    (:mod:`cbsim.common.worker_start`), so a script that calls this at import level needs the
    usual ``if __name__ == "__main__":``."""
    from cbsim.run.simulate import simulate

    reporting = reporting or Reporting()
    scenarios = [build_scenario(options, point) for point in points]
    if out is not None:
        check_out(out, points)
    if out is not None and len(points) > 1:
        if say is not None:
            say(f"simulating {len(points)} load points as a sweep into {out}")
        runs = _run_sweep(options, points, out)
    else:
        runs = []
        for i, (point, scenario) in enumerate(zip(points, scenarios, strict=True), 1):
            if say is not None:
                say(f"simulating load point {i}/{len(points)}: {point.label}")
            runs.append(simulate(scenario))
        if out is not None:
            _write_run(runs[0], out)
    return [_bench_run(r, p, reporting, options) for r, p in zip(runs, points, strict=True)]
