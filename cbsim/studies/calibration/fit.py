"""Fitting a whole calibration profile for a GPU, and the report of its error on held-out data.

``fit_profile`` runs every op family's fit on one GPU's measurements (the shipped tables, or a
user's own in the same schema): GEMMs per dtype, decode and prefill attention per KV-cache dtype,
all-reduce per GPU count, element-wise kernels (from Vidur's operator tables where the GPU has them,
else transferred from the same architecture). ``engine=`` picks whose kernel tables: vLLM's (the
default, every measured GPU: profile ``aiconfigurator-vllm``), TensorRT-LLM's or SGLang's (H100,
H200: ``aiconfigurator-trtllm``, ``aiconfigurator-sglang``), whose all-reduce is the engine's own
kernel where it was measured and NCCL beyond (:func:`cbsim.studies.calibration.comm.engine_allreduce_rows`).
Each family is also cross-validated on data its fit never saw (whole GEMM weight shapes, whole
attention head configurations, whole message sizes held out) and compared with two references: the
uncalibrated roofline (efficiency 1) and one constant efficiency pair fitted on the same data.
``leave_one_gpu_out`` carries a profile's dimensionless efficiencies and corrections to another
GPU (H200 predicted from H100); :mod:`cbsim.studies.calibration.transfer` does the same for every GPU
without measurements (MI300X, the PCIe and GeForce cards, GB200, ...) and records the error that
carries (B200 has its own vLLM measurements, fp4 GEMMs included).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration import attention, comm, gemm, mla, moe, vidur
from cbsim.studies.calibration.data import (
    DEFAULT_ENGINE,
    engine_name,
    load_table,
    table_file,
    vidur_tables,
)
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.markdown import markdown_table
from cbsim.studies.calibration.profile import (
    CalibrationProfile,
    CommFit,
    Measured,
    MoeFit,
    RooflineFit,
)
from cbsim.studies.calibration.transfer import TRANSFERS

DEFAULT_NAME = "aiconfigurator-vllm"
CALIBRATION_REPORT = outputs.OutputKind(
    name="calibration report",
    description="a calibration report",
    entries=frozenset({"errors.csv", "report.md", "predicted_vs_measured.png"}),
    required=frozenset({"report.md"}),
    whole_folder=False,
)
"""Tables and figures of ``cbsim calibrate report``, written among other files (profiles)."""
KERNEL_REPORT_FILES = ("errors.csv", "report.md", "predicted_vs_measured.png")
ENGINE_LABELS = {"vllm": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang"}
# where a GPU without Vidur operator tables takes its element-wise fit from (same architecture,
# or the nearest one measured)
ELEMENTWISE_SOURCE = {
    "h200": "h100-sxm",
    "l40s": "a100-80gb",
    "b200": "h100-sxm",
    "mi300x": "h100-sxm",
}
# GPUs without kernel measurements: profile transferred from this measured GPU
TRANSFER_SOURCE = {target: transfer.source for target, transfer in TRANSFERS.items()}
GEMM_DTYPES = frozenset({"bf16", "fp8", "fp4"})

Progress = Callable[[str], None]
"""Told what a fit is doing as it starts each step (a fit with hold-outs takes minutes)."""


def _quiet(message: str) -> None:
    """The default :data:`Progress`: says nothing."""


def profile_name(engine: str = DEFAULT_ENGINE) -> str:
    """The shipped profile name of an engine's kernel calibration: ``aiconfigurator-<engine>``."""
    return f"aiconfigurator-{engine_name(engine)}"


def _stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    return summarize(predicted, measured)


def _points(family: str, measured: np.ndarray, predicted: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"family": family, "measured_s": measured, "predicted_s": predicted})


def _error_row(
    gpu: str, engine: str, family: str, method: str, stats: dict[str, float]
) -> dict[str, object]:
    """One line of the held-out error table."""
    return {"gpu": gpu, "engine": engine, "family": family, "method": method, **stats}


def _held_out(source: str, rows: int, stats: dict[str, float]) -> Measured:
    """A family's provenance: how it was held out and its held-out error."""
    return Measured(
        source=source,
        rows=rows,
        holdout_median_ape=stats["median_ape"],
        holdout_p90_ape=stats["p90_ape"],
    )


def _optional_table(
    table: str, gpu: str, data_dir: str | Path | None, engine: str = DEFAULT_ENGINE
) -> pd.DataFrame | None:
    try:
        return load_table(table, gpu, data_dir, engine=engine)
    except CbsimError:
        if data_dir is None:
            return None
        if table_file(Path(data_dir), table) is not None:
            raise  # the file exists but is bad: say so
        return None


def _gemm_family(
    table: pd.DataFrame,
    gpu: str,
    rows: list[dict[str, object]],
    points: list[pd.DataFrame],
    validate: bool,
    engine: str = DEFAULT_ENGINE,
    progress: Progress = _quiet,
) -> tuple[dict[str, RooflineFit], dict[str, Measured]]:
    spec = get_gpu(gpu)
    fits: dict[str, RooflineFit] = {}
    provenance: dict[str, Measured] = {}
    for dtype in sorted(set(table["dtype"].astype(str)) & GEMM_DTYPES):
        held = ", holding out whole weight shapes (5-fold)" if validate else ""
        progress(f"{gpu}: fitting GEMM {dtype}{held}")
        fits[dtype] = gemm.fit_gemm(table, spec, dtype)
        if not validate:
            continue
        cv = gemm.holdout_shapes(table, spec, dtype)
        refs = gemm.baselines(table, spec, dtype)
        measured = cv["measured_s"].to_numpy()
        calibrated = _stats(cv["predicted_s"].to_numpy(), measured)
        points.append(_points(f"gemm {dtype}", measured, cv["predicted_s"].to_numpy()))
        for method, predicted in (
            ("calibrated", cv["predicted_s"].to_numpy()),
            ("constant", refs["constant"]),
            ("uncalibrated", refs["uncalibrated"]),
        ):
            rows.append(
                _error_row(gpu, engine, f"gemm {dtype}", method, _stats(predicted, measured))
            )
        provenance[f"gemm_{dtype}"] = _held_out(
            "held-out weight shapes (5-fold)", len(cv), calibrated
        )
    return fits, provenance


def _attention_family(
    table: pd.DataFrame,
    gpu: str,
    phase: str,
    rows: list[dict[str, object]],
    points: list[pd.DataFrame],
    validate: bool,
    engine: str = DEFAULT_ENGINE,
    progress: Progress = _quiet,
) -> tuple[dict[str, RooflineFit], dict[str, Measured]]:
    spec = get_gpu(gpu)
    fits: dict[str, RooflineFit] = {}
    provenance: dict[str, Measured] = {}
    for kv_dtype in sorted(set(table["kv_dtype"].astype(str)) & {"bf16", "fp8"}):
        held = ", holding out whole head configurations (5-fold)" if validate else ""
        progress(f"{gpu}: fitting {phase} attention, {kv_dtype} KV cache{held}")
        features = attention.EXTENDED_FEATURES
        fits[kv_dtype] = attention.fit_attention(table, spec, phase, kv_dtype, features=features)
        if not validate:
            continue
        cv = attention.holdout_heads(table, spec, phase, kv_dtype, features=features)
        refs = attention.baselines(table, spec, phase, kv_dtype)
        frames = pd.concat([cv, refs], ignore_index=True)
        for method, group in frames.groupby("method", sort=False):
            stats = _stats(group["predicted_s"].to_numpy(), group["latency_s"].to_numpy())
            label = "calibrated" if method not in ("constant", "uncalibrated") else str(method)
            rows.append(_error_row(gpu, engine, f"{phase} attention kv {kv_dtype}", label, stats))
            if label == "calibrated":
                points.append(
                    _points(
                        f"{phase} attention kv {kv_dtype}",
                        group["latency_s"].to_numpy(),
                        group["predicted_s"].to_numpy(),
                    )
                )
                provenance[f"{phase}_attention_{kv_dtype}"] = _held_out(
                    "held-out head configurations (5-fold)", len(group), stats
                )
    return fits, provenance


def _allreduce_rows(
    gpu: str, data_dir: str | Path | None, engine: str, nccl: pd.DataFrame | None = None
) -> tuple[pd.DataFrame | None, str]:
    """The all-reduce measurements a profile is fitted on, and where they come from: the engine's
    own kernel where its table measured the message size, NCCL beyond; NCCL alone without one
    (``nccl``: the GPU's NCCL table, read here when not given)."""
    if nccl is None:
        nccl = _optional_table("nccl", gpu, data_dir, engine)
    custom = _optional_table("custom_allreduce", gpu, data_dir, engine)
    if custom is not None:
        return comm.engine_allreduce_rows(custom, nccl), "custom all-reduce + NCCL beyond"
    if nccl is not None:
        return comm.allreduce_rows(nccl), "NCCL"
    return None, ""


def _comm_curves(
    measured: pd.DataFrame,
    collective: str,
    source: str,
    gpu: str,
    engine: str,
    rows: list[dict[str, object]],
    provenance: dict[str, Measured],
    validate: bool,
    points: list[pd.DataFrame] | None = None,
) -> dict[str, CommFit]:
    """One collective's curves per GPU count from num_gpus, size_bytes, latency_s rows, and
    with ``validate`` its held-out message sizes' error (a row, provenance under the
    collective's name without its hyphen, and measured-against-predicted ``points`` if given)."""
    curves = comm.fit_allreduce_rows(measured)
    if validate:
        held = comm.holdout_rows(measured)
        truth, predicted = held["measured_s"].to_numpy(), held["predicted_s"].to_numpy()
        stats = _stats(predicted, truth)
        if points is not None:
            points.append(_points(collective, truth, predicted))
        rows.append(_error_row(gpu, engine, collective, "calibrated", stats))
        provenance[collective.replace("-", "")] = _held_out(
            f"held-out message sizes ({source})", len(held), stats
        )
    return curves


MOE_CHECKED = ("bfloat16", "fp8", "fp8_block", "nvfp4")
"""The MoE weight dtypes a report states first; the others measured (the 4-bit kernels of a few
models) follow, held out one shape at a time where fewer than five were measured."""
MOE_LABELS = {"bfloat16": "bf16", "fp8_block": "fp8-block"}
ROBUST_MOE_ENGINES = frozenset({"trtllm", "sglang"})
"""Engines whose MoE corrections are fitted under a soft-L1 loss (:mod:`cbsim.studies.calibration.moe`:
their tables hold whole layout series 2–4× off the rest; vLLM's shipped fits keep theirs)."""


def _moe_dtypes(table: pd.DataFrame) -> list[str]:
    """The measured MoE weight dtypes cbsim knows, :data:`MOE_CHECKED` first."""
    measured = set(table["moe_dtype"].astype(str)) & set(moe.MOE_DTYPES)
    return [*(d for d in MOE_CHECKED if d in measured), *sorted(measured - set(MOE_CHECKED))]


def _moe_holdout_source(folds: int, robust: bool) -> str:
    """How an MoE fit was held out, for its provenance."""
    how = "5-fold" if folds == 5 else f"{folds} shapes, one at a time"
    return f"held-out model shapes ({how}{'; robust correction' if robust else ''})"


def _moe_holdout(
    table: pd.DataFrame,
    gpu: str,
    engine: str,
    rows: list[dict[str, object]],
    points: list[pd.DataFrame],
    progress: Progress,
) -> dict[str, Measured]:
    """Held-out whole model shapes for each measured (MoE dtype, routing): error rows, points
    and provenance (see :func:`cbsim.studies.calibration.moe.holdout_shapes`; five folds, or one shape
    at a time where fewer were measured; a dtype of one shape is recorded without an error)."""
    found: dict[str, Measured] = {}
    spec = get_gpu(gpu)
    robust = engine in ROBUST_MOE_ENGINES
    for moe_dtype in _moe_dtypes(table):
        for routing in moe.DISTRIBUTIONS:
            try:
                sliced = moe.moe_rows(table, moe_dtype, routing)
            except CbsimError:  # not measured
                continue
            key = f"moe_{moe_dtype}_{routing}"
            folds = moe.holdout_folds(sliced)
            if folds == 0:
                found[key] = Measured(source="one model shape: none held out", rows=len(sliced))
                continue
            progress(f"{gpu}: MoE {moe_dtype} {routing}, held-out model shapes")
            held = moe.holdout_shapes(sliced, spec, moe_dtype, folds=folds, robust=robust)
            known = ~np.isnan(held["predicted_s"].to_numpy())
            measured = held["measured_s"].to_numpy()[known]
            label = MOE_LABELS.get(moe_dtype, moe_dtype)
            family = f"moe {label} {routing.replace('power_law_', 'skew ')}"
            for method, column in (("calibrated", "predicted_s"), ("constant", "base_s")):
                stats = _stats(held[column].to_numpy()[known], measured)
                rows.append(_error_row(gpu, engine, family, method, stats))
            predicted = held["predicted_s"].to_numpy()[known]
            points.append(_points(family, measured, predicted))
            source = _moe_holdout_source(folds, robust)
            found[key] = _held_out(source, int(known.sum()), _stats(predicted, measured))
    return found


def moe_family(
    table: pd.DataFrame,
    gpu: str,
    engine: str,
    rows: list[dict[str, object]],
    points: list[pd.DataFrame],
    validate: bool = True,
    progress: Progress = _quiet,
) -> tuple[dict[str, MoeFit], dict[str, Measured]]:
    """Every kernel path of an MoE table fitted (robustly for :data:`ROBUST_MOE_ENGINES`), and
    with ``validate`` each (dtype, routing) held out (:func:`_moe_holdout`: error rows and points
    appended, provenance returned)."""
    progress(f"{gpu}: fitting MoE layers")
    engine = engine_name(engine)
    fits = moe.fit_all(table, get_gpu(gpu), robust=engine in ROBUST_MOE_ENGINES)
    if not validate:
        return fits, {}
    return fits, _moe_holdout(table, gpu, engine, rows, points, progress)


def _mla_holdout(
    tables: dict[str, pd.DataFrame],
    gpu: str,
    engine: str,
    rows: list[dict[str, object]],
    points: list[pd.DataFrame],
    progress: Progress,
) -> dict[str, Measured]:
    """One head count (tensor-parallel degree) held out at a time, for each MLA phase and KV
    dtype with 16-bit projections: error rows, points and provenance."""
    found: dict[str, Measured] = {}
    spec = get_gpu(gpu)
    for phase, table in tables.items():
        for kv_dtype in sorted(table["kv_dtype"].astype(str).unique()):
            try:
                sliced = mla.mla_rows(table, kv_dtype, "bf16")
            except CbsimError:
                continue
            progress(f"{gpu}: MLA {phase}, {kv_dtype} KV, held-out head counts")
            predicted = mla.holdout_predictions(sliced, spec, phase, kv_dtype, "bf16")
            measured = sliced["latency_s"].to_numpy()
            family = f"mla {phase} ({kv_dtype} KV)"
            stats = _stats(predicted, measured)
            rows.append(_error_row(gpu, engine, family, "calibrated", stats))
            points.append(_points(family, measured, predicted))
            found[f"mla_{phase}_{kv_dtype}"] = _held_out(
                "held-out head counts (one at a time)", len(sliced), stats
            )
    return found


def fit_profile(
    gpu: str,
    data_dir: str | Path | None = None,
    *,
    name: str | None = None,
    validate: bool = True,
    engine: str = DEFAULT_ENGINE,
    progress: Progress = _quiet,
) -> tuple[CalibrationProfile, pd.DataFrame, pd.DataFrame]:
    """Fit every op family of one GPU; returns the profile, the held-out error table and the
    held-out predictions (family, measured_s, predicted_s) behind it. ``engine`` names whose
    shipped kernel tables to fit (``vllm``, ``trtllm``, ``sglang``); ``name`` defaults to
    :func:`profile_name` of it. ``progress`` is told each step as it starts."""
    spec = get_gpu(gpu)
    engine = engine_name(engine)
    name = name or profile_name(engine)
    rows: list[dict[str, object]] = []
    points: list[pd.DataFrame] = []
    provenance: dict[str, Measured] = {}
    gemm_table = _optional_table("gemm", gpu, data_dir, engine)
    if gemm_table is None:
        raise CbsimError(
            f"no GEMM measurements for {gpu}"
            + (f" under {engine}" if engine != DEFAULT_ENGINE and data_dir is None else "")
            + ": give --data DIR with gemm.parquet (see `cbsim calibrate measure`)",
            field="--gpu",
        )
    gemm_fits, found = _gemm_family(gemm_table, gpu, rows, points, validate, engine, progress)
    provenance.update(found)
    attention_fits: dict[str, dict[str, RooflineFit]] = {}
    for phase in ("decode", "prefill"):
        table = _optional_table(f"{phase}_attention", gpu, data_dir, engine)
        fits: dict[str, RooflineFit] = {}
        if table is not None:
            fits, found = _attention_family(
                table, gpu, phase, rows, points, validate, engine, progress
            )
            provenance.update(found)
        attention_fits[phase] = fits
    allreduce: dict[str, CommFit] = {}
    nccl = _optional_table("nccl", gpu, data_dir, engine)
    comm_rows, comm_source = _allreduce_rows(gpu, data_dir, engine, nccl)
    if comm_rows is not None:
        progress(f"{gpu}: fitting all-reduce ({comm_source})")
        allreduce = _comm_curves(comm_rows, "all-reduce", comm_source, gpu, engine, rows,
                                 provenance, validate, points)  # fmt: skip
    alltoall: dict[str, CommFit] = {}
    if nccl is not None and (nccl["op"].astype(str) == comm.ALLTOALL_OP).any():
        alltoall = _comm_curves(comm.alltoall_rows(nccl), "all-to-all", "NCCL", gpu, engine,
                                rows, provenance, validate)  # fmt: skip
    elementwise_gpu = gpu if vidur_tables(gpu) else ELEMENTWISE_SOURCE.get(gpu)
    elementwise = vidur.elementwise_fit(elementwise_gpu) if elementwise_gpu else None
    if elementwise is not None:
        provenance["elementwise"] = Measured(
            source=f"Vidur operator tables of {elementwise_gpu} (MIT)",
        )
    moe_fits: dict[str, MoeFit] = {}
    moe_table = _optional_table("moe", gpu, data_dir, engine)
    if moe_table is not None:
        moe_fits, found = moe_family(moe_table, gpu, engine, rows, points, validate, progress)
        provenance.update(found)
    mla_tables = {
        phase: table
        for phase in mla.PHASES
        if (table := _optional_table(f"mla_{phase}", gpu, data_dir, engine)) is not None
    }
    mla_fits = mla.fit_all(mla_tables, spec) if mla_tables else {}
    if mla_tables and validate:
        provenance.update(_mla_holdout(mla_tables, gpu, engine, rows, points, progress))
    label = ENGINE_LABELS[engine]
    measured_by = (
        f"the measurements in {data_dir}"
        if data_dir
        else f"NVIDIA AI Configurator's {label} kernel timings"
    )
    profile = CalibrationProfile(
        gpu=gpu,
        name=name,
        description=(
            f"{spec.name}: GEMM, attention and all-reduce ({comm_source or 'none measured'}) "
            f"fitted to {measured_by}; element-wise kernels from {elementwise_gpu or 'defaults'}."
        ),
        gemm=gemm_fits,
        decode_attention=attention_fits["decode"],
        prefill_attention=attention_fits["prefill"],
        allreduce=allreduce,
        alltoall=alltoall,
        elementwise=elementwise,
        moe=moe_fits,
        mla=mla_fits,
        provenance=provenance,
    )
    held_out = (
        pd.concat(points, ignore_index=True) if points else _points("", np.array([]), np.array([]))
    )
    return profile, pd.DataFrame(rows), held_out


def leave_one_gpu_out(
    source_gpu: str = "h100-sxm",
    target_gpu: str = "h200",
    *,
    engine: str = DEFAULT_ENGINE,
    gemm_dtypes: tuple[str, ...] = ("bf16",),
    kv_dtypes: tuple[str, ...] = ("bf16",),
    allreduce: bool = False,
) -> pd.DataFrame:
    """Fit on one GPU, predict another from its spec sheet: held-out error per op family, both
    GPUs measured under ``engine``. With ``allreduce`` the source's all-reduce curve is also
    scored on the target's measurements (a transfer carries it over unchanged)."""
    engine = engine_name(engine)
    label = f"{target_gpu} from {source_gpu}"
    rows: list[dict[str, object]] = []
    for dtype in gemm_dtypes:
        frame = gemm.leave_one_gpu_out(source_gpu, target_gpu, dtype, engine=engine)
        measured = frame["measured_s"].to_numpy()
        for method, column in (
            ("calibrated", "predicted_s"),
            ("constant", "constant_s"),
            ("uncalibrated", "uncalibrated_s"),
        ):
            rows.append(
                _error_row(
                    label,
                    engine,
                    f"gemm {dtype}",
                    method,
                    _stats(frame[column].to_numpy(), measured),
                )
            )
    source_spec, target_spec = get_gpu(source_gpu), get_gpu(target_gpu)
    for phase in ("decode", "prefill"):
        source = load_table(f"{phase}_attention", source_gpu, engine=engine)
        target = load_table(f"{phase}_attention", target_gpu, engine=engine)
        for kv_dtype in kv_dtypes:
            moved = attention.transfer(
                source,
                source_spec,
                target,
                target_spec,
                phase,
                kv_dtype,
                features=attention.EXTENDED_FEATURES,
            )
            stats = _stats(moved["predicted_s"].to_numpy(), moved["latency_s"].to_numpy())
            rows.append(
                _error_row(label, engine, f"{phase} attention kv {kv_dtype}", "calibrated", stats)
            )
    if allreduce:
        source_rows, _ = _allreduce_rows(source_gpu, None, engine)
        target_rows, _ = _allreduce_rows(target_gpu, None, engine)
        if source_rows is not None and target_rows is not None:
            curves = comm.fit_allreduce_rows(source_rows)
            known = target_rows[target_rows["num_gpus"].astype(str).isin(list(curves))]
            predicted = np.array(
                [
                    curves[str(n)](float(size))
                    for n, size in zip(known["num_gpus"], known["size_bytes"], strict=True)
                ]
            )
            rows.append(
                _error_row(
                    label,
                    engine,
                    "all-reduce",
                    "calibrated",
                    _stats(predicted, known["latency_s"].to_numpy()),
                )
            )
    return pd.DataFrame(rows)


def percent_table(frame: pd.DataFrame) -> pd.DataFrame:
    """An error table with median/P90 APE in percent, one row per gpu × family × method."""
    out = frame.copy()
    out["median_ape_pct"] = (100 * out.pop("median_ape")).round(1)
    out["p90_ape_pct"] = (100 * out.pop("p90_ape")).round(1)
    out["points"] = out["points"].astype(int)
    return out


def plot_predicted_vs_measured(points: pd.DataFrame, title: str) -> object:
    """Log-log scatter of held-out predictions against measurements, one panel per op family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(points["family"]))
    columns = min(3, max(1, len(families)))
    rows = -(-len(families) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.8 * rows), squeeze=False)
    for ax, family in zip(axes.ravel(), families, strict=False):
        group = points[points["family"] == family]
        measured = group["measured_s"].to_numpy() * 1e3
        predicted = group["predicted_s"].to_numpy() * 1e3
        ax.scatter(measured, predicted, s=2, alpha=0.25, rasterized=True)
        low, high = (
            float(min(measured.min(), predicted.min())),
            float(max(measured.max(), predicted.max())),
        )
        ax.plot([low, high], [low, high], color="black", linewidth=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="measured (ms)",
            ylabel="predicted (ms)",
            title=family,
        )
        ax.grid(alpha=0.3, which="both")
    for ax in axes.ravel()[len(families) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def check_kernel_report(folder: Path) -> None:
    """Refuse, before fitting, a folder :func:`write_kernel_report` would refuse."""
    outputs.check_files_into(folder, CALIBRATION_REPORT, KERNEL_REPORT_FILES)


def write_kernel_report(folder: Path, gpu: str, table: pd.DataFrame, points: pd.DataFrame) -> Path:
    """Write ``errors.csv``, ``report.md`` and ``predicted_vs_measured.png`` of a GPU's held-out
    error into ``folder``, replacing only files an earlier report wrote (see
    :func:`cbsim.common.output_folders.write_files_into`)."""
    from cbsim.run.plots import to_png_bytes

    outputs.check_files_into(folder, CALIBRATION_REPORT, KERNEL_REPORT_FILES)
    markdown = f"# Calibration of {gpu}: error on held-out data\n\n" + markdown_table(table) + "\n"
    figure = plot_predicted_vs_measured(points, f"{gpu}: held-out predictions vs measurements")
    files = {
        "errors.csv": table.to_csv(index=False).encode("utf-8"),
        "report.md": markdown.encode("utf-8"),
        "predicted_vs_measured.png": to_png_bytes(figure),  # type: ignore[arg-type]
    }
    return outputs.write_files_into(folder, CALIBRATION_REPORT, files)
