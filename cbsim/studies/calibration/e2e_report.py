"""End-to-end validation in the open: how well engine profiles predict measured serving runs.

``cbsim calibrate e2e`` fits an engine profile to a user's own benchmark results (the layouts
:mod:`cbsim.studies.calibration.benchmarks` reads) and reports its error with leave-one-configuration-out;
``cbsim calibrate report --e2e`` does the same for each engine on the shipped H100 benchmarks
with leave-one-model-out, and checks the H100-fitted profiles against a different GPU and data
set: LLM-Inference-Bench's A100 static batches (all B requests of L prompt tokens sent at once,
timed until the last of them has generated L tokens).

Every figure here comes from full simulations of the fitted profiles (see
:mod:`cbsim.studies.calibration.e2e`). The overhead at a batch size is what a step of that many decoding
requests pays beyond its kernels, on a reference decode step (Llama-3.1-8B on one H100, 1k context).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import pandas as pd
from rich.table import Table

from cbsim.common import output_folders as outputs
from cbsim.common.console import wide_console
from cbsim.common.errors import CbsimError, UserError
from cbsim.cost import CostModel
from cbsim.cost.engine_profile import (
    EngineProfile,
    engine_names,
    load_engine_profile,
    write_engine_profile,
)
from cbsim.studies.calibration import e2e, gpu_holdout, per_request
from cbsim.studies.calibration.benchmarks import read_benchmarks, shared_h100_benchmarks
from cbsim.studies.calibration.dropped import dropped_rows
from cbsim.studies.calibration.errors import ape
from cbsim.studies.calibration.fit import CALIBRATION_REPORT
from cbsim.studies.calibration.markdown import markdown_table

REPORT_BATCHES = (1, 64, 512, 4096)
REFERENCE = ("llama-3.1-8b", "h100-sxm", 1024)
SHARED_ENGINES = ("vllm", "sglang", "tensorrt-llm")
LEAVE_ONE_GPU_OUT_ENGINE = "vllm"  # the engine with serving data on two GPUs
SHARED_REPORT_FILES = (
    *(
        f"{key}.csv"
        for key in (
            "errors",
            "overhead",
            "a100_static",
            "leave_one_gpu_out",
            "excluded",
            "predictions",
        )
    ),
    "report.md",
)


def overhead_at_batches(profile: EngineProfile) -> pd.DataFrame:
    """CPU time per step and what it adds to the reference decode step, at the report's batches."""
    model, gpu, context = REFERENCE
    cost = CostModel(model, gpu, engine=profile)
    kernels = CostModel(model, gpu, engine="none")
    rows = []
    for batch in REPORT_BATCHES:
        gpu_s = kernels.decode_time(batch, batch * (context + 1))
        added = profile.overhead.added_time(gpu_s, batch, batch)
        rows.append(
            {
                "engine": profile.engine,
                "batch": batch,
                "cpu_ms": 1e3 * profile.overhead.cpu_time(batch, batch),
                "kernels_ms": 1e3 * gpu_s,
                "added_ms": 1e3 * added,
                "added_pct": 100.0 * added / cost.decode_time(batch, batch * (context + 1)),
            }
        )
    return pd.DataFrame(rows)


def error_rows(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and P90 APE (%) of TTFT, TPOT and output tokens/s per group, in-sample and held out."""

    def stats(group: pd.DataFrame) -> pd.Series:
        out: dict[str, float] = {"benchmarks": float(len(group))}
        for metric, measured, predicted in (
            ("ttft", "ttft_mean_s", "predicted_ttft_s"),
            ("tpot", "tpot_mean_s", "predicted_tpot_s"),
            ("tok/s", "measured_tokens_per_s", "predicted_tokens_per_s"),
        ):
            for label, column in (("fit", predicted), ("held", _held(predicted))):
                if column not in group:
                    continue
                errors = 100.0 * ape(group[column].to_numpy(), group[measured].to_numpy())
                out[f"{metric} {label} med"] = float(np.median(errors))
                out[f"{metric} {label} p90"] = float(np.percentile(errors, 90))
        return pd.Series(out)

    grouped = rows.groupby(by, sort=True)[list(rows.columns)]
    table = grouped.apply(stats).reset_index() if by else stats(rows).to_frame().T
    if by:
        total = stats(rows).to_frame().T
        for column in by:
            total[column] = "all"
        table = pd.concat([table, total[table.columns]], ignore_index=True)
    return table


def _held(predicted: str) -> str:
    if predicted == "predicted_tokens_per_s":
        return "holdout_tokens_per_s"
    return predicted.replace("predicted_", "holdout_")


def _print_table(frame: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column), justify="left" if frame[column].dtype == object else "right")
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row))
    wide_console().print(table)


def _markdown(frame: pd.DataFrame) -> str:
    return markdown_table(frame.round(1))


# --------------------------------------------------------------------------- A100 check


def static_batch_check(profile: EngineProfile, framework: str) -> pd.DataFrame:
    """See :func:`static_batch_check_in`, with the profile in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="cbsim-static-") as folder:
        return static_batch_check_in(e2e.ProfileFiles(Path(folder)), profile, framework)


def static_batch_check_in(
    files: e2e.ProfileFiles, profile: EngineProfile, framework: str
) -> pd.DataFrame:
    """The profile on LLM-Inference-Bench's A100 static batches of ``framework``: each batch of
    B requests (L prompt tokens, L output tokens, all sent at once) simulated under the engine's
    defaults on the A100's kernels; ``measured_s`` against ``predicted_s`` (the last finish)."""
    from cbsim.engine.cost_models import CostModelCache
    from cbsim.run.simulate import simulate
    from cbsim.studies.calibration.overhead import MODELS, static_batch_scenario, static_batches

    path = files.path(profile)
    rows = []
    cost_models = CostModelCache()  # each model and TP's tables filled once, not once a batch
    for model_id, tp, length, batch, latency in static_batches(framework):
        scenario = static_batch_scenario(MODELS[model_id], tp, length, batch, {"engine": path})
        summary = simulate(scenario, cost_models=cost_models).summary
        rows.append(
            {
                "engine": profile.engine,
                "model": MODELS[model_id],
                "tp": tp,
                "length": length,
                "batch": batch,
                "measured_s": latency,
                "predicted_s": summary["makespan_s"],
            }
        )
    return pd.DataFrame(rows)


ARGONNE_FRAMEWORKS = {"vllm": "vLLM", "tensorrt-llm": "TensorRT-LLM"}


# --------------------------------------------------------------------------- report


def fit_shared(engine: str, progress: Callable[[str], None] | None = None) -> e2e.EngineFit:
    """An engine's profile fitted to the shipped H100 benchmarks from its kernels and defaults
    (:func:`cbsim.studies.calibration.engines.base_profile`), leave-one-model-out."""
    from cbsim.studies.calibration.engines import base_profile

    shared = shared_h100_benchmarks()
    return e2e.fit_engine(
        shared[shared["engine"] == engine], base_profile(engine), holdout="model", progress=progress
    )


def shared_report(
    out: Path, *, progress: Callable[[str], None] | None = None
) -> dict[str, pd.DataFrame]:
    """Fit every engine on the shipped H100 benchmarks with leave-one-model-out, check the fitted
    profiles on the A100 static batches, and write the tables (CSV and Markdown) to ``out``."""
    say = progress or (lambda message: None)
    outputs.check_files_into(out, CALIBRATION_REPORT, SHARED_REPORT_FILES)  # before minutes of fits
    results: dict[str, pd.DataFrame] = {}
    per_model, overheads, excluded, statics, rows = [], [], [], [], []
    for engine in SHARED_ENGINES:
        say(f"{engine}: fitting on the H100 benchmarks (leave one model out)")
        fit = fit_shared(engine, _prefixed(say, engine))
        rows.append(fit.rows)
        per_model.append(error_rows(fit.rows, ["engine", "model"]))
        overheads.append(overhead_at_batches(fit.profile))
        excluded.append(fit.excluded.assign(engine=engine))
        if engine == LEAVE_ONE_GPU_OUT_ENGINE:
            say(f"{engine}: leave one GPU out (H100 fit on the A100 per-request runs, and back)")
            results["leave_one_gpu_out"] = leave_one_gpu_out(fit)
        if engine in ARGONNE_FRAMEWORKS:
            say(f"{engine}: the H100 fit on the A100 static batches")
            check = static_batch_check(fit.profile, ARGONNE_FRAMEWORKS[engine])
            statics.append(check)
    results["errors"] = pd.concat(per_model, ignore_index=True)
    results["overhead"] = pd.concat(overheads, ignore_index=True)
    results["rows"] = pd.concat(rows, ignore_index=True)
    skipped = pd.concat(excluded, ignore_index=True)
    results["excluded"] = (
        skipped.groupby(["engine", "skipped"]).size().rename("benchmarks").reset_index()
    )
    say("vllm-v0: fitting on the A100 static batches (leave one model out)")
    statics.append(_vllm_v0_held_out())
    if statics:
        static = pd.concat(statics, ignore_index=True)
        errors = 100.0 * ape(static["predicted_s"].to_numpy(), static["measured_s"].to_numpy())
        static = static.assign(ape_pct=errors)
        results["a100_static"] = (
            static.groupby("engine")["ape_pct"]
            .agg(batches="size", median="median", p90=lambda v: np.percentile(v, 90))
            .reset_index()
        )
    sections = ["# End-to-end validation on the shipped benchmarks\n"]
    titles = {
        "errors": "Median / P90 absolute % error per engine and model (fit: in-sample; held: "
        "leave-one-model-out)",
        "overhead": "Engine overhead per decode step (Llama-3.1-8B, one H100, 1k context)",
        "a100_static": "H100-fitted profiles on LLM-Inference-Bench's A100 static batches, and "
        "vLLM's V0 engine (the one those batches ran) fitted on them leave-one-model-out (APE %)",
        "leave_one_gpu_out": "vLLM leave one GPU out: median absolute % error over runs (A100 "
        "per-request runs: per request and of each run's p50/p90/p99; H100 benchmarks: of means)",
        "excluded": "Benchmarks left out",
    }
    files: dict[str, bytes] = {}
    for key, title in titles.items():
        if key in results:
            files[f"{key}.csv"] = results[key].to_csv(index=False).encode("utf-8")
            sections.append(f"## {title}\n\n{_markdown(results[key])}\n")
    files["predictions.csv"] = results["rows"].to_csv(index=False).encode("utf-8")
    files["report.md"] = "\n".join(sections).encode("utf-8")
    outputs.write_files_into(out, CALIBRATION_REPORT, files)
    return results


def _vllm_v0_held_out() -> pd.DataFrame:
    """vLLM's V0 engine fitted on the A100 static batches, each model predicted by a fit
    without it (the engine those batches ran; :func:`cbsim.studies.calibration.overhead.fit_engine_version`)."""
    from cbsim.studies.calibration.engines import base_profile
    from cbsim.studies.calibration.overhead import fit_engine_version

    _, held = fit_engine_version(base_profile("vllm-v0"))
    held = held[held["predicted_s"].notna()]
    return pd.DataFrame(
        {
            "engine": "vllm-v0 (held out by model)",
            "model": held["model"],
            "measured_s": held["measured_s"],
            "predicted_s": held["predicted_s"],
        }
    )


def leave_one_gpu_out(h100_fit: e2e.EngineFit) -> pd.DataFrame:
    """vLLM fitted on H100 predicting the A100 per-request runs, and its serial step time fitted
    on those runs predicting the H100 benchmarks (:mod:`cbsim.studies.calibration.gpu_holdout`)."""
    from cbsim.studies.calibration.engines import base_profile

    with tempfile.TemporaryDirectory(prefix="cbsim-logo-") as folder:
        files = e2e.ProfileFiles(Path(folder))
        forward = gpu_holdout.h100_to_a100(h100_fit.profile, files)
        _, backward = gpu_holdout.a100_to_h100(
            h100_fit.rows, base_profile(LEAVE_ONE_GPU_OUT_ENGINE), files
        )
    return pd.concat([forward, backward], ignore_index=True)


def _prefixed(say: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda message: say(f"{prefix}: {message}")


def print_shared_report(results: dict[str, pd.DataFrame]) -> None:
    _print_table(results["errors"], "H100 benchmarks: absolute % error (fit / leave-one-model-out)")
    _print_table(results["overhead"], "engine overhead per decode step")
    if "a100_static" in results:
        _print_table(results["a100_static"], "H100 fits on A100 static batches: APE %")
    if "leave_one_gpu_out" in results:
        _print_table(results["leave_one_gpu_out"], "vLLM leave one GPU out: absolute % error")
    _print_table(results["excluded"], "benchmarks left out")


# --------------------------------------------------------------------------- command


@click.command("e2e")
@click.option("--engine", "-e", required=True, help="The engine the benchmarks ran (its name).")
@click.option(
    "--data", "-d", "paths", multiple=True, required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Benchmark results: AI Configurator CSV, vLLM `bench serve` JSON, or a normalised CSV "
    "(repeatable; more files may follow, as a shell glob like --data results/*.json gives them).",
)  # fmt: skip
@click.argument(
    "more_paths", nargs=-1, metavar="[MORE_DATA...]",
    type=click.Path(dir_okay=False, path_type=Path),
)  # fmt: skip
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--base", default=None,
    help="Engine profile whose kernels and defaults to start from (default: the shipped profile "
    "of --engine, else vllm's).",
)  # fmt: skip
@click.option("--gpu", default=None, help="For result files that do not record it (vLLM JSON).")
@click.option("--model", default=None, help="Catalog model or config.json, where not recorded.")
@click.option("--dtype", default=None, help="Weight precision, where not recorded.")
@click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor parallelism.")
@click.option(
    "--replicas", type=click.IntRange(min=1), default=1, show_default=True,
    help="Replicas behind the load balancer (per-request files).",
)  # fmt: skip
@click.option(
    "--holdout", type=click.Choice(["config", "model"]), default="config", show_default=True,
    help="What the held-out error leaves out: a configuration (model, GPU, tp, dtype) or a model.",
)  # fmt: skip
def e2e_command(
    engine: str,
    paths: tuple[Path, ...],
    out: Path,
    base: str | None,
    gpu: str | None,
    model: str | None,
    dtype: str | None,
    tp: int | None,
    holdout: str,
    more_paths: tuple[Path, ...],
    replicas: int = 1,
) -> None:
    """Fit an engine profile to your own end-to-end benchmark results and report its error.

    Per-request files (one row per request with its send time, lengths, TTFT and generation
    time, as LMBenchmark writes them) are replayed request by request instead: the serial step
    time is fitted to their TPOTs and every run's per-request and p50/p90/p99 errors reported."""
    files = [*paths, *more_paths]
    per_request_files = [p for p in files if per_request.is_per_request_file(p)]
    if per_request_files and len(per_request_files) == len(files):
        _fit_per_request(engine, files, out, base, gpu, model, dtype, tp, replicas)
        return
    # a detailed vLLM result among summaries counts as one more summary (its means)
    tables = [p for p in per_request_files if p.suffix.lower() != ".json"]
    if tables:
        raise UserError(
            "--data: give per-request files and benchmark results in separate runs "
            f"(per-request: {', '.join(str(p) for p in tables)})"
        )
    try:
        frame = read_benchmarks(files, engine=engine, gpu=gpu, model=model, dtype=dtype, tp=tp)
        frame = frame[frame["engine"] == engine]
        if frame.empty:
            raise CbsimError(f"no benchmark of engine {engine!r} in the data", field="--engine")
        _, start = _starting_profile(engine, base)
        fit = e2e.fit_engine(frame, start, holdout=holdout, progress=lambda m: click.echo(m))
        write_engine_profile(fit.profile, out)
    except CbsimError as err:
        raise UserError(str(err)) from None
    _print_table(error_rows(fit.rows, ["config"]), f"{engine}: absolute % error")
    _print_table(overhead_at_batches(fit.profile), "overhead per decode step")
    if len(fit.excluded):
        counts = fit.excluded.groupby("skipped").size().rename("benchmarks").reset_index()
        _print_table(counts, "benchmarks left out")
        named = dropped_rows(fit.excluded)
        more = len(fit.excluded) - len(named)
        _print_table(named, "each benchmark left out" + (f" (first {len(named)})" if more else ""))
    step = fit.profile.overhead
    click.echo(
        f"fitted: CPU {1e3 * step.cpu_s:.3f} ms + {1e6 * step.cpu_per_request_s:.2f} µs/request "
        f"+ {1e6 * step.cpu_per_token_s:.3f} µs/token ({'overlapped' if step.overlap else 'serial'})"
        f", serial {1e3 * step.serial_s:.3f} ms + {1e6 * step.serial_per_request_s:.2f} µs/request"
        f", front end {1e3 * fit.profile.frontend.request_s:.1f} ms per request"
    )
    click.echo(f"profile: {out} (use it with cluster.engine: {out})")


def _starting_profile(engine: str, base: str | None) -> tuple[str, EngineProfile]:
    """The profile a fit starts from (``--base``, else the shipped one of ``engine``, else
    vLLM's), renamed ``engine``, with its name."""
    name = base or (engine if engine in engine_names() else "vllm")
    try:
        start = load_engine_profile(name)
    except CbsimError as err:
        raise err.located(field="--base") from None
    return name, start.model_copy(update={"engine": engine})


def _fit_per_request(
    engine: str,
    paths: list[Path],
    out: Path,
    base: str | None,
    gpu: str | None,
    model: str | None,
    dtype: str | None,
    tp: int | None,
    replicas: int,
) -> None:
    """``cbsim calibrate e2e`` on per-request files: replay, fit the serial step time, report."""
    from cbsim.catalog.hardware import get_gpu
    from cbsim.catalog.models import get_model

    try:
        if gpu is None or model is None:
            raise CbsimError("per-request files need --gpu and --model (they record neither)")
        try:
            gpu = get_gpu(gpu).name
        except CbsimError as err:
            raise err.located(field="--gpu") from None
        try:
            get_model(model)
        except CbsimError as err:
            raise err.located(field="--model") from None
        name, start = _starting_profile(engine, base)
        deployment = per_request.Deployment(
            model=model, gpu=gpu, tp=tp or 1, replicas=replicas, dtype=dtype or "bf16"
        )
        runs = [per_request.read_run(path, deployment) for path in paths]
        click.echo(f"replaying {len(runs)} run(s) over a grid of serial step times")
        profile, _ = per_request.fit_serial(runs, start)
        write_engine_profile(profile, out)
        errors = per_request.validate_runs(runs, str(out))
    except CbsimError as err:
        raise UserError(str(err)) from None
    columns = ["run", "requests", "ttft_req_mape", "ttft_p50_err", "ttft_p90_err",
               "ttft_p99_err", "tpot_req_mape", "tpot_p50_err", "e2e_req_mape"]  # fmt: skip
    _print_table(errors[columns], f"{engine}: per-request % error (p-columns signed)")
    _print_table(per_request.summarize_runs(errors), "medians over runs (absolute %)")
    click.echo(
        f"fitted: serial {1e3 * profile.overhead.serial_s:.2f} ms per step "
        f"(the other terms as in {name})"
    )
    click.echo(f"profile: {out} (use it with cluster.engine: {out})")
