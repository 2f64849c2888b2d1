"""Fitting an engine to measured end-to-end benchmarks, and its error on benchmarks it never saw.

A serving benchmark (``vllm bench serve --max-concurrency C``, genai-perf, trtllm-bench) sends
requests of fixed lengths from C closed-loop clients and reports the mean time to first token and
time per output token a client saw. cbsim reproduces each one as a scenario (the engine's
defaults, a closed loop of C clients) and fits what kernel tables cannot contain: the engine's
CPU time per step (:class:`~cbsim.cost.engine_profile.StepOverhead`) and its front end's delays
(:class:`~cbsim.cost.engine_profile.Frontend`).

Fitting the step overhead by re-simulating every benchmark for every trial value would take hours.
It does not need to: in a closed loop without think time a finish releases the next request at
once, so *which* requests run in which step never depends on how long steps take. One simulation
per benchmark on bare kernels records that sequence — each step's kernel seconds, requests and
tokens, and for each request the steps of its arrival, first token and last token — and any
overhead model prices it exactly: step durations, their running sum, every request's TTFT and
TPOT. The fit minimises the squared log ratio of predicted to measured mean TTFT and TPOT
(soft-L1, so a few odd benchmarks cannot dominate), non-negative terms with a mild pull towards
zero (overlapped CPU work that the kernels of the fitted benchmarks hide is otherwise free to
take any value, and would surface on a faster GPU or a smaller model). Whether the engine
overlaps its CPU work with the kernels is a fact about the engine (its base profile), not a
fitted choice: on benchmarks whose kernels dominate both fit equally well, and they extrapolate
to large batches very differently.

A front-end delay, unlike the overhead, changes which step a request joins, so the sequence
cannot price it: the per-request delay is fitted by full simulations of a sample of the
benchmarks over a grid of delays. Every error reported comes from full simulations: in-sample,
and held out (each model, or each configuration, predicted by a profile fitted without it).
Benchmarks that measure faster than their own kernels (a TPOT below the bare-kernel simulation's
by more than the kernel tables' own error) ran something cbsim does not model and are set aside.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.common.limits import ENGINE_TIME
from cbsim.cost.engine_profile import (
    EngineProfile,
    Frontend,
    StepOverhead,
    write_engine_profile,
)
from cbsim.engine.cost_models import CostModelCache
from cbsim.run.loading import load_scenario
from cbsim.run.simulate import simulate
from cbsim.schema.scenario import Scenario

REQUESTS_PER_CLIENT = 8
MIN_REQUESTS = 64
# a benchmark faster than its bare kernels by more than this ran something cbsim does not model
KERNEL_FLOOR_MARGIN = 0.9
PARAMETERS = (
    "cpu_s",
    "cpu_per_request_s",
    "cpu_per_token_s",
    "serial_s",
    "serial_per_request_s",
    "request_s",
    "prompt_token_s",
    "serial_per_layer_s",
)
SCALES = np.array([1e-3, 1e-5, 1e-6, 1e-3, 1e-5, 1e-2, 1e-5, 1e-5])
# a mild pull of every term towards zero, in units of its scale: CPU work the kernels hide on
# the benchmarks fitted is otherwise unconstrained, and would surface on faster GPUs or models
RIDGE = 0.005


# --------------------------------------------------------------------------- scenarios


def benchmark_scenario(row: pd.Series, engine: str) -> Scenario:
    """One measured benchmark as a scenario under an engine's defaults (``engine``: a name or a
    profile path): closed loop of its concurrency (or open loop at its request rate), fixed
    lengths, its model, GPU and layout."""
    concurrency = float(row["concurrency"])
    rate = float(row.get("request_rate", np.nan))
    if np.isfinite(concurrency) and concurrency >= 1:
        clients = round(concurrency)
        count = int(row["num_requests"]) if _known(row.get("num_requests")) else 0
        arrival: dict[str, object] = {"kind": "closed_loop", "concurrency": clients}
        requests = count or max(REQUESTS_PER_CLIENT * clients, MIN_REQUESTS)
    elif np.isfinite(rate) and rate > 0:
        arrival = {"kind": "poisson", "rate": rate}
        requests = int(row["num_requests"]) if _known(row.get("num_requests")) else 1000
    else:
        arrival = {"kind": "offline"}
        requests = int(row["num_requests"]) if _known(row.get("num_requests")) else 1000
    cluster: dict[str, object] = {
        "model": row["model"],
        "gpu": row["gpu"],
        "tp": int(row["tp"]) if _known(row.get("tp")) else 1,
        "dtype": row["dtype"],
        "engine": engine,
    }
    if isinstance(row.get("kv_dtype"), str):
        cluster["kv_dtype"] = row["kv_dtype"]
    _check_context(row)
    try:
        return load_scenario(
            {
                "name": "benchmark",
                "workload": {
                    "num_requests": requests,
                    "arrival": arrival,
                    "prompt_tokens": {"kind": "fixed", "value": int(row["isl"])},
                    "output_tokens": {"kind": "fixed", "value": max(1, int(row["osl"]))},
                },
                "cluster": cluster,
            }
        )
    except CbsimError as err:
        raise benchmark_error(row, err) from None


def _known(value: object) -> bool:
    return value is not None and not pd.isna(value)  # type: ignore[call-overload]


# Where a problem with the scenario made of a benchmark comes from in the benchmark's data.
_DATA_FIELDS = (
    ("workload.prompt_tokens", "isl"),
    ("workload.output_tokens", "osl"),
    ("workload.arrival.concurrency", "concurrency"),
    ("workload.arrival.rate", "request_rate"),
    ("workload.num_requests", "num_requests"),
    ("cluster.model", "model"),
    ("cluster.gpu", "gpu"),
    ("cluster.tp", "tp"),
    ("cluster.dtype", "dtype"),
    ("cluster.kv_dtype", "kv_dtype"),
    ("cluster.engine", "engine"),
)


def benchmark_error(row: pd.Series, err: CbsimError) -> CbsimError:
    """A problem met reproducing one benchmark, located in the user's data: its file and row
    (the ``source`` column) and the benchmark's field the scenario's field came from."""
    scenario_field = err.field or ""
    field = next((data for prefix, data in _DATA_FIELDS if scenario_field.startswith(prefix)), None)
    where = (
        f" (as the simulated scenario's {scenario_field})" if field is None and err.field else ""
    )
    return CbsimError(
        f"cannot reproduce this benchmark: {err.message}{where}",
        source=str(row.get("source") or "benchmark"),
        field=field,
    )


def _check_context(row: pd.Series) -> None:
    """A benchmark's prompt and output must fit its model's context (else no request could run
    and nothing would be measured)."""
    from cbsim.catalog.models import get_model

    try:
        context = get_model(str(row["model"])).max_position_embeddings
    except CbsimError as err:
        raise benchmark_error(row, err.located(field="cluster.model")) from None
    isl, osl = int(row["isl"]), max(1, int(row["osl"]))
    if isl + osl > context:
        raise CbsimError(
            f"a prompt of {isl:,} tokens (isl) and an output of {osl:,} (osl) exceed the "
            f"{context:,}-token context of {row['model']}",
            source=str(row.get("source") or "benchmark"),
            field="isl",
        )


@dataclass(frozen=True)
class ProfileFiles:
    """Trial engine profiles as files a scenario can name (``cluster.engine`` takes a path),
    kept in a folder the fit owns and removes when it ends."""

    folder: Path

    def path(self, profile: EngineProfile) -> str:
        text = profile.model_dump_json()
        path = self.folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
        if not path.is_file():
            write_engine_profile(profile, path)
        return str(path)


def bare(profile: EngineProfile) -> EngineProfile:
    """The profile with its overhead and front end removed: its kernels and defaults only."""
    return profile.model_copy(update={"overhead": StepOverhead(), "frontend": Frontend()})


# --------------------------------------------------------------------------- sequences


@dataclass(frozen=True)
class StepSequence:
    """What one benchmark's bare-kernel simulation did, step by step (one replica).

    Per step: kernel seconds, requests and new tokens. Per finished request: the step whose end
    released it (-1: sent at time 0), the steps of its first and last token, its lengths."""

    gpu_s: np.ndarray
    requests: np.ndarray
    tokens: np.ndarray
    arrival_step: np.ndarray
    first_step: np.ndarray
    last_step: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    max_batch: int
    layers: int = 0  # decoder layers each GPU runs per step (the per-layer term's multiplier)


def record_sequence(scenario: Scenario, cost_models: CostModelCache | None = None) -> StepSequence:
    """Simulate a closed-loop benchmark on bare kernels and record its step sequence
    (``cost_models``: shared with the other benchmarks', see :func:`simulate`)."""
    if scenario.workload.closed_loop is None or scenario.cluster.replicas != 1:
        raise CbsimError("step sequences are recorded for one replica under a closed loop")
    results = simulate(scenario, cost_models=cost_models)
    steps = results.iterations.sort_values("start_s", kind="stable")
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    done = results.requests[results.requests["status"] == "finished"]
    if done.empty:
        reasons = results.requests.get("rejected_reason", pd.Series(dtype=object)).dropna()
        reasons = reasons[reasons.astype(str) != ""]
        why = f" ({reasons.iloc[0]})" if len(reasons) else ""
        raise CbsimError(f"no request of it finished{why}")

    def step_of(times: pd.Series) -> np.ndarray:
        values = times.to_numpy(dtype=float)
        index = np.searchsorted(ends, values)
        index = np.minimum(index, len(ends) - 1)
        exact = np.isclose(ends[index], values, rtol=0.0, atol=1e-12)
        return np.where(exact, index, -1)

    return StepSequence(
        gpu_s=steps["duration_s"].to_numpy(dtype=float),
        requests=steps["batch_size"].to_numpy(dtype=float),
        tokens=(steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy(dtype=float),
        arrival_step=step_of(done["server_arrival_s"]),
        first_step=step_of(done["server_first_token_s"]),
        last_step=step_of(done["server_finish_s"]),
        prompt_tokens=done["prompt_tokens"].to_numpy(dtype=float),
        output_tokens=done["output_tokens"].to_numpy(dtype=float),
        max_batch=int(steps["batch_size"].max()) if len(steps) else 0,
        layers=_layers_per_gpu(scenario),
    )


def _layers_per_gpu(scenario: Scenario) -> int:
    from cbsim.catalog.model_bytes import stage_layers
    from cbsim.catalog.models import get_model

    model = get_model(scenario.cluster.model)
    pp = scenario.cluster.pp
    return stage_layers(model, pp) if pp > 1 else model.num_layers


@dataclass(frozen=True)
class SequenceSet:
    """Many benchmarks' sequences concatenated, so pricing all of them is a few array operations."""

    gpu_s: np.ndarray
    requests: np.ndarray
    tokens: np.ndarray
    layers: np.ndarray  # per step: its benchmark's decoder layers per GPU
    offset: np.ndarray  # first step of each benchmark
    benchmark: np.ndarray  # per request: its benchmark's index
    arrival: np.ndarray  # per request: global step index, or -1 (the benchmark's start)
    first: np.ndarray
    last: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    count: int

    @classmethod
    def of(cls, sequences: list[StepSequence]) -> SequenceSet:
        sizes = np.array([len(s.gpu_s) for s in sequences], dtype=np.int64)
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

        def shifted(name: str) -> np.ndarray:
            parts = []
            for s, start in zip(sequences, offset, strict=True):
                values = getattr(s, name).astype(np.int64)
                parts.append(np.where(values >= 0, values + start, -1))
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        def joined(name: str) -> np.ndarray:
            parts = [getattr(s, name) for s in sequences]
            return np.concatenate(parts) if parts else np.zeros(0)

        return cls(
            gpu_s=joined("gpu_s"),
            requests=joined("requests"),
            tokens=joined("tokens"),
            layers=np.concatenate([np.full(len(s.gpu_s), float(s.layers)) for s in sequences])
            if sequences
            else np.zeros(0),
            offset=offset,
            benchmark=np.concatenate(
                [np.full(len(s.first_step), i) for i, s in enumerate(sequences)]
            ).astype(np.int64)
            if sequences
            else np.zeros(0, dtype=np.int64),
            arrival=shifted("arrival_step"),
            first=shifted("first_step"),
            last=shifted("last_step"),
            prompt_tokens=joined("prompt_tokens"),
            output_tokens=joined("output_tokens"),
            count=len(sequences),
        )

    def price(self, overhead: StepOverhead, frontend: Frontend) -> tuple[np.ndarray, np.ndarray]:
        """Mean TTFT and TPOT per benchmark under an overhead model and front end."""
        return self.price_terms(_as_vector(overhead, frontend), overhead.overlap)

    def price_terms(self, x: np.ndarray, overlap: bool) -> tuple[np.ndarray, np.ndarray]:
        cpu = x[0] + x[1] * self.requests + x[2] * self.tokens
        serial = x[3] + x[4] * self.requests + x[7] * self.layers
        duration = (np.maximum(self.gpu_s, cpu) if overlap else self.gpu_s + cpu) + serial
        total = np.cumsum(duration)
        start_of = total[self.offset] - duration[self.offset]  # time before each benchmark
        base = start_of[self.benchmark]
        arrival = np.where(self.arrival >= 0, total[np.maximum(self.arrival, 0)], base)
        ttft = total[self.first] - arrival + x[5] + x[6] * self.prompt_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = (total[self.last] - total[self.first]) / (self.output_tokens - 1)
        counts = np.bincount(self.benchmark, minlength=self.count)
        mean_ttft = np.bincount(self.benchmark, weights=ttft, minlength=self.count) / counts
        valid = self.output_tokens > 1
        tpot_counts = np.bincount(self.benchmark[valid], minlength=self.count)
        mean_tpot = (
            np.bincount(self.benchmark[valid], weights=tpot[valid], minlength=self.count)
            / tpot_counts
        )
        return mean_ttft, mean_tpot


def _as_vector(overhead: StepOverhead, frontend: Frontend) -> np.ndarray:
    return np.array(
        [
            overhead.cpu_s,
            overhead.cpu_per_request_s,
            overhead.cpu_per_token_s,
            overhead.serial_s,
            overhead.serial_per_request_s,
            frontend.request_s,
            frontend.prompt_token_s,
            overhead.serial_per_layer_s,
        ]
    )


def terms_from_vector(x: np.ndarray, overlap: bool) -> tuple[StepOverhead, Frontend]:
    """The terms of a parameter vector, each within what an engine profile holds (a fit
    chasing measurements far beyond any engine stops at the range's end)."""
    values = [float(v) for v in np.clip(x, 0.0, ENGINE_TIME.high)]
    return (
        StepOverhead(
            cpu_s=values[0],
            cpu_per_request_s=values[1],
            cpu_per_token_s=values[2],
            overlap=overlap,
            serial_s=values[3],
            serial_per_request_s=values[4],
            serial_per_layer_s=values[7],
        ),
        Frontend(request_s=values[5], prompt_token_s=values[6]),
    )


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class Fit:
    overhead: StepOverhead
    frontend: Frontend
    cost: float  # the robust loss at the optimum


def fit_terms(
    sequences: SequenceSet,
    measured_ttft: np.ndarray,
    measured_tpot: np.ndarray,
    *,
    overlap: bool,
    free: Iterable[str] = PARAMETERS,
) -> Fit:
    """Non-negative overhead and front-end terms minimising the soft-L1 loss of the log ratios
    of predicted to measured mean TTFT and TPOT; parameters not in ``free`` stay at zero."""
    mask = np.array([name in set(free) for name in PARAMETERS])
    ttft_ok = np.isfinite(measured_ttft) & (measured_ttft > 0)
    tpot_ok = np.isfinite(measured_tpot) & (measured_tpot > 0)

    def residuals(z: np.ndarray) -> np.ndarray:
        x = np.zeros(len(PARAMETERS))
        x[mask] = z * SCALES[mask]
        ttft, tpot = sequences.price_terms(x, overlap)
        return np.concatenate(
            [
                np.log(ttft[ttft_ok] / measured_ttft[ttft_ok]),
                np.log(tpot[tpot_ok] / measured_tpot[tpot_ok]),
                RIDGE * z,
            ]
        )

    start = np.full(int(mask.sum()), 0.5)
    from scipy.optimize import least_squares  # slow to import: fits only

    solution = least_squares(
        residuals, start, bounds=(0.0, np.inf), loss="soft_l1", f_scale=0.1, max_nfev=400
    )
    x = np.zeros(len(PARAMETERS))
    x[mask] = solution.x * SCALES[mask]
    overhead, frontend = terms_from_vector(x, overlap)
    return Fit(overhead, frontend, float(solution.cost))


# The step terms, and a per-request delay that absorbs what the front end adds to every TTFT
# (its value is then replaced by the full-simulation fit of :func:`fit_request_delay`). Where the
# CPU work overlaps the kernels only a constant serial part is kept beside it (per-request work is
# what overlaps); where it does not, serial and CPU terms are the same thing.
OVERLAPPED_FIT = ("cpu_s", "cpu_per_request_s", "cpu_per_token_s", "serial_s", "request_s")
SERIAL_FIT = ("cpu_s", "cpu_per_request_s", "cpu_per_token_s", "request_s")


def fit_engine_terms(
    sequences: SequenceSet, measured_ttft: np.ndarray, measured_tpot: np.ndarray, overlap: bool
) -> Fit:
    """The step terms of an engine that does (or does not) overlap CPU work with its kernels."""
    free = OVERLAPPED_FIT if overlap else SERIAL_FIT
    return fit_terms(sequences, measured_ttft, measured_tpot, overlap=overlap, free=free)


# --------------------------------------------------------------------------- the pipeline


REQUEST_DELAYS_S = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
DELAY_SAMPLE = 40
MAX_REQUEST_DELAY_S = 2.0


def fit_request_delay(rows: pd.DataFrame, profile: EngineProfile, files: ProfileFiles) -> Frontend:
    """The per-request front-end delay whose full simulations of an evenly spaced sample of the
    benchmarks give the smallest median |log(TTFT ratio)|: the best of :data:`REQUEST_DELAYS_S`,
    doubled while doubling helps when that best is the largest."""
    step = max(1, len(rows) // DELAY_SAMPLE)
    sample = rows.iloc[::step]
    measured = sample["ttft_mean_s"].to_numpy(dtype=float)

    def error_of(delay: float) -> tuple[float, Frontend]:
        frontend = profile.frontend.model_copy(update={"request_s": delay, "prompt_token_s": 0.0})
        trial = profile.model_copy(update={"frontend": frontend})
        predicted = simulate_rows(sample, trial, files)["predicted_ttft_s"].to_numpy(dtype=float)
        return float(np.median(np.abs(np.log(predicted / measured)))), frontend

    trials = [(*error_of(delay), delay) for delay in REQUEST_DELAYS_S]
    best_error, best, best_delay = min(trials, key=lambda trial: trial[0])
    while best_delay == max(delay for *_, delay in trials) and best_delay < MAX_REQUEST_DELAY_S:
        error, frontend = error_of(2 * best_delay)
        trials.append((error, frontend, 2 * best_delay))
        if error >= best_error:
            break
        best_error, best, best_delay = error, frontend, 2 * best_delay
    return best


def usable(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows cbsim can reproduce, rows it cannot with the reason in ``skipped``): aggregated
    closed-loop runs of a catalog model on one tensor-parallel group."""
    reasons = pd.Series("", index=frame.index, dtype=object)
    reasons[frame["model"].isna()] = "model not in cbsim's catalog (MoE models: not yet)"
    reasons[(reasons == "") & (frame["mode"] != "agg")] = "disaggregated deployment"
    for column in ("pp", "dp", "ep"):
        if column in frame:
            values = pd.to_numeric(frame[column], errors="coerce").fillna(1)
            reasons[(reasons == "") & (values > 1)] = f"{column} > 1 (not modelled yet)"
    concurrency = pd.to_numeric(frame["concurrency"], errors="coerce")
    reasons[(reasons == "") & ~(concurrency >= 1)] = "not a closed-loop benchmark"
    for column in ("ttft_mean_s", "tpot_mean_s"):
        measured = pd.to_numeric(frame[column], errors="coerce")
        reasons[(reasons == "") & ~(measured > 0)] = f"no measured {column}"
    keep = reasons == ""
    skipped = frame[~keep].assign(skipped=reasons[~keep])
    return frame[keep].reset_index(drop=True), skipped


OPEN_LOOP_HINT = (
    "an open loop (vllm bench serve without --max-concurrency: --request-rate R, or inf, its "
    "default) is fitted from its requests, not its means: save it with --save-detailed and give "
    "--gpu and --model (and --tp, --dtype as it ran), or measure closed loops with "
    "--max-concurrency C"
)
"""What to do with an open-loop summary, which the closed-loop fit cannot use."""


def nothing_to_fit_message(skipped: pd.DataFrame, shown: int = 4) -> str:
    """Why no benchmark could be fitted: each refused file (up to ``shown``) with its reason,
    and how to give what the fit reads."""
    lines = [
        "no benchmark cbsim can fit: it needs aggregated closed-loop runs (vllm bench serve "
        "--max-concurrency C) of catalog models with measured TTFT and TPOT, or per-request data"
    ]
    sources = skipped["source"] if "source" in skipped else pd.Series("", index=skipped.index)
    for source, reason in list(zip(sources, skipped["skipped"], strict=True))[:shown]:
        lines.append(f"{source or 'a benchmark'}: {reason}")
    if len(skipped) > shown:
        lines.append(f"... and {len(skipped) - shown} more")
    if (skipped["skipped"] == "not a closed-loop benchmark").any():
        lines.append(OPEN_LOOP_HINT)
    return "; ".join(lines)


def record_sequences(
    frame: pd.DataFrame,
    profile: EngineProfile,
    files: ProfileFiles,
    progress: Callable[[int, int], None] | None = None,
) -> list[StepSequence]:
    """Each benchmark's step sequence on the profile's kernels and defaults (no overhead)."""
    kernels = files.path(bare(profile))
    sequences = []
    cost_models = CostModelCache()  # each layout's tables filled once, not once a benchmark
    for i, (_, row) in enumerate(frame.iterrows()):
        scenario = benchmark_scenario(row, kernels)
        try:
            sequences.append(record_sequence(scenario, cost_models))
        except CbsimError as err:
            raise benchmark_error(row, err) from None
        if progress is not None:
            progress(i + 1, len(frame))
    return sequences


def below_kernel_floor(frame: pd.DataFrame, sequences: list[StepSequence]) -> np.ndarray:
    """Benchmarks measured faster than their bare kernels allow (by more than the kernel tables'
    own error): they ran something cbsim does not model, and a fit must not chase them."""
    _, kernel_tpot = SequenceSet.of(sequences).price(StepOverhead(), Frontend())
    measured = frame["tpot_mean_s"].to_numpy(dtype=float)
    result: np.ndarray = measured < KERNEL_FLOOR_MARGIN * kernel_tpot
    return result


def fitted_profile(
    base: EngineProfile,
    fit: Fit,
    sequences: list[StepSequence],
    models: Iterable[str],
    gpus: Iterable[str],
) -> EngineProfile:
    """``base`` with the fitted overhead and front end and the batch sizes they were fitted on."""
    from cbsim.cost.engine_profile import FittedRange

    largest = max((s.max_batch for s in sequences), default=1)
    return base.model_copy(
        update={
            "overhead": fit.overhead,
            "frontend": fit.frontend,
            "fitted_range": FittedRange(
                batch_size=(1, largest), gpus=sorted(set(gpus)), models=sorted(set(models))
            ),
        }
    )


def simulate_rows(
    frame: pd.DataFrame, profiles: list[EngineProfile] | EngineProfile, files: ProfileFiles
) -> pd.DataFrame:
    """Full simulations of each benchmark (with its own profile when a list is given): adds
    ``predicted_ttft_s``, ``predicted_tpot_s`` and the closed-loop output token rates
    (``C · osl / (TTFT + (osl − 1) · TPOT)``) measured and predicted."""
    out = frame.copy()
    ttft, tpot = [], []
    cost_models = CostModelCache()  # each layout and profile's tables filled once
    for i, (_, row) in enumerate(frame.iterrows()):
        profile = profiles[i] if isinstance(profiles, list) else profiles
        scenario = benchmark_scenario(row, files.path(profile))
        try:
            summary = simulate(scenario, cost_models=cost_models).summary
        except CbsimError as err:
            raise benchmark_error(row, err) from None
        ttft.append(summary["ttft_mean_s"])
        tpot.append(summary["tpot_mean_s"])
    out["predicted_ttft_s"] = ttft
    out["predicted_tpot_s"] = tpot
    out["measured_tokens_per_s"] = closed_loop_rate(
        out["concurrency"], out["osl"], out["ttft_mean_s"], out["tpot_mean_s"]
    )
    out["predicted_tokens_per_s"] = closed_loop_rate(
        out["concurrency"], out["osl"], out["predicted_ttft_s"], out["predicted_tpot_s"]
    )
    return out


def closed_loop_rate(
    concurrency: pd.Series, osl: pd.Series, ttft: pd.Series, tpot: pd.Series
) -> pd.Series:
    """Output tokens per second of C clients by Little's law: C · osl / mean request latency."""
    latency = ttft + (osl - 1) * tpot
    result: pd.Series = concurrency * osl / latency
    return result


@dataclass(frozen=True)
class EngineFit:
    """A fitted engine profile with everything its report needs."""

    profile: EngineProfile
    rows: pd.DataFrame  # the benchmarks fitted on, with in-sample and held-out predictions
    excluded: pd.DataFrame  # benchmarks left out, with the reason


def fit_engine(
    frame: pd.DataFrame,
    base: EngineProfile,
    *,
    holdout: str = "model",
    progress: Callable[[str], None] | None = None,
) -> EngineFit:
    """See :func:`fit_engine_in`; the trial profiles live in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="cbsim-fit-") as folder:
        return fit_engine_in(
            ProfileFiles(Path(folder)), frame, base, holdout=holdout, progress=progress
        )


def fit_engine_in(
    files: ProfileFiles,
    frame: pd.DataFrame,
    base: EngineProfile,
    *,
    holdout: str = "model",
    progress: Callable[[str], None] | None = None,
) -> EngineFit:
    """Fit ``base``'s overhead and front end to benchmarks of one engine, and predict each
    ``holdout`` group (a column: ``model``, or ``config`` for model × GPU × tp × dtype) by full
    simulation with a profile fitted without it."""
    rows, skipped = usable(frame)
    if rows.empty:
        raise CbsimError(nothing_to_fit_message(skipped))
    say = progress or (lambda message: None)
    say(f"simulating {len(rows)} benchmarks on bare kernels")
    sequences = record_sequences(rows, base, files)
    floor = below_kernel_floor(rows, sequences)
    excluded = pd.concat(
        [skipped, rows[floor].assign(skipped="measured faster than its bare kernels")]
    )
    rows = rows[~floor].reset_index(drop=True)
    sequences = [s for s, f in zip(sequences, floor, strict=True) if not f]
    if rows.empty:
        raise CbsimError("every benchmark measured faster than cbsim's kernels for it")
    rows["config"] = (
        rows["model"].astype(str)
        + " "
        + rows["gpu"].astype(str)
        + " tp"
        + rows["tp"].astype(str)
        + " "
        + rows["dtype"].astype(str)
    )
    say("fitting the step overhead")
    measured_ttft = rows["ttft_mean_s"].to_numpy(dtype=float)
    measured_tpot = rows["tpot_mean_s"].to_numpy(dtype=float)
    overlap = base.overhead.overlap
    full = fit_engine_terms(SequenceSet.of(sequences), measured_ttft, measured_tpot, overlap)
    profile = fitted_profile(base, full, sequences, rows["model"], rows["gpu"])
    say("fitting the front-end delay")
    profile = profile.model_copy(update={"frontend": fit_request_delay(rows, profile, files)})
    keys = rows[holdout].astype(str).to_numpy()
    fold_profiles: list[EngineProfile] = [profile] * len(rows)
    groups = sorted(set(keys))
    if len(groups) > 1:
        for key in groups:
            held = keys == key
            train = [s for s, h in zip(sequences, held, strict=True) if not h]
            fold = fit_engine_terms(
                SequenceSet.of(train), measured_ttft[~held], measured_tpot[~held], overlap
            )
            fold_profile = fitted_profile(
                base, fold, train, rows.loc[~held, "model"], rows.loc[~held, "gpu"]
            )
            fold_delay = fit_request_delay(rows[~held].reset_index(drop=True), fold_profile, files)
            fold_profile = fold_profile.model_copy(update={"frontend": fold_delay})
            for i in np.flatnonzero(held):
                fold_profiles[i] = fold_profile
    say(f"simulating {len(rows)} benchmarks with the fitted profile")
    fitted = simulate_rows(rows, profile, files)
    if len(groups) > 1:
        say(f"simulating {len(rows)} benchmarks held out by {holdout}")
        held_out = simulate_rows(rows, fold_profiles, files)
        fitted["holdout_ttft_s"] = held_out["predicted_ttft_s"]
        fitted["holdout_tpot_s"] = held_out["predicted_tpot_s"]
        fitted["holdout_tokens_per_s"] = held_out["predicted_tokens_per_s"]
    fitted["holdout"] = holdout if len(groups) > 1 else ""
    return EngineFit(_with_provenance(profile, fitted, holdout), fitted, excluded)


def _with_provenance(profile: EngineProfile, rows: pd.DataFrame, holdout: str) -> EngineProfile:
    from cbsim.cost.engine_profile import Measured
    from cbsim.studies.calibration.errors import summarize

    provenance = dict(profile.provenance)
    held = "holdout_tpot_s" in rows
    for metric in ("ttft", "tpot"):
        predicted = rows[f"holdout_{metric}_s" if held else f"predicted_{metric}_s"]
        stats = summarize(predicted.to_numpy(), rows[f"{metric}_mean_s"].to_numpy())
        provenance[f"e2e_{metric}"] = Measured(
            source=f"{len(rows)} closed-loop benchmarks: "
            + ", ".join(sorted(rows["config"].unique())),
            rows=len(rows),
            holdout_median_ape=round(stats["median_ape"], 5),
            holdout_p90_ape=round(stats["p90_ape"], 5),
            holdout=f"leave-one-{holdout}-out" if held else "in-sample (one group only)",
        )
    return profile.model_copy(update={"provenance": provenance})
