"""Per-request validation: replay a measured serving run request by request and compare.

A closed-loop benchmark reports means; a per-request log says, for every request a client sent,
when it was sent, how long its prompt and output were, when its first token arrived and how long
the rest took. Replaying such a log through cbsim — the same send times, the same lengths, the
same deployment — gives a predicted time to first token, time per output token and end-to-end
latency *for each request*, and so the whole distribution (p50, p90, p99) rather than a mean:
queueing, bursts and the light-load path a request takes through an idle engine all show.

Sources read:

* the shipped llm-d-benchmark runs (:func:`shared_runs`): Llama-3.1-70B on two A100s per
  replica under vLLM V1 (May 2025), ShareGPT prompts sent at fixed intervals and a multi-round
  chat workload, 56 runs, packed by ``tools/pack_per_request.py``;
* a user's per-request CSV (:func:`read_run`) in the client's own columns (``launch_time``,
  ``prompt_tokens``, ``generation_tokens``, ``ttft``, ``generation_time``, as LMBenchmark writes
  them) or cbsim's (``send_s``, ``prompt_tokens``, ``output_tokens``, ``ttft_s``, ``tpot_s``).

A request's measured TPOT is its generation time over its output tokens but the first; requests
of one output token have none. Multi-round chat users (``user_id``, ``question_id``) resend their
history, so their prompts get prefix block ids (each user's blocks numbered from the start of the
conversation) that let the engine's prefix cache reuse what the real one could; ShareGPT prompts
share text too, but the log does not say which, so their prompts are replayed as unshared (the
simulated prefill is then an upper bound there).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.common.limits import BENCHMARK_REQUESTS, MEASURED_LATENCY, SIMULATED_TIME, TOKENS, Limit
from cbsim.run.loading import load_scenario
from cbsim.run.simulate import simulate
from cbsim.schema.scenario import Scenario
from cbsim.studies.calibration.data import read_table_file, shipped_root, table_columns

SHIPPED = "llm_d_a100_per_request.parquet"
# the runs' engine: the vllm/vllm-openai image of May 2025, vLLM 0.8.5 (V1), whose defaults on a
# GPU of 70 GiB or more behind its API server are a 8192-token budget and 1024 sequences, chunked
# prefill, synchronous scheduling (llm-d's README; cbsim's vllm@0.8.5 release range)
LLM_D_ENGINE = "vllm@0.8.5"
QUANTILES = (0.5, 0.9, 0.99)
METRICS = ("ttft_s", "tpot_s", "e2e_s")
PREFIX_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class Deployment:
    """What served a run: model, GPU, layout, engine and the engine flags that matter (None: the
    engine's default). Several replicas behind a Kubernetes Service are reached through
    kube-proxy, which picks a replica at random for each new connection: ``router: random``."""

    model: str
    gpu: str
    tp: int = 1
    replicas: int = 1
    dtype: str = "bf16"
    engine: str = "vllm"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    scheduler: dict[str, Any] = field(default_factory=dict)
    router: str = "random"


# llm-d's deployments: `--max-model-len 20000 --gpu-memory-utilization 0.95`, the engine's defaults
LLM_D = Deployment(
    model="llama-3.1-70b",
    gpu="a100-80gb",
    tp=2,
    engine=LLM_D_ENGINE,
    gpu_memory_utilization=0.95,
    max_model_len=20000,
)


@dataclass(frozen=True)
class PerRequestRun:
    """One measured run: its deployment and one row per request, in send order (``send_s``,
    ``prompt_tokens``, ``output_tokens``, ``ttft_s``, ``tpot_s``, ``e2e_s``, ``user_id``)."""

    name: str
    deployment: Deployment
    requests: pd.DataFrame
    workload: str = ""
    qps: float = float("nan")
    source: str = ""  # the file it was read from (errors name it)


# --------------------------------------------------------------------------- reading


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-request table in cbsim's names, sorted by send time (stably)."""
    frame = frame.sort_values("send_s", kind="stable").reset_index(drop=True)
    out = frame["output_tokens"].to_numpy()
    generation = frame["generation_time_s"].to_numpy(dtype=float)
    tpot = np.where(out > 1, generation / np.maximum(out - 1, 1), np.nan)
    return pd.DataFrame(
        {
            "send_s": frame["send_s"].to_numpy(dtype=float) - float(frame["send_s"].min()),
            "prompt_tokens": frame["prompt_tokens"].to_numpy(dtype=np.int64),
            "output_tokens": out.astype(np.int64),
            "ttft_s": frame["ttft_s"].to_numpy(dtype=float),
            "tpot_s": tpot,
            "e2e_s": frame["ttft_s"].to_numpy(dtype=float) + generation,
            "user_id": frame["user_id"].to_numpy(dtype=np.int64)
            if "user_id" in frame
            else np.full(len(frame), -1, dtype=np.int64),
        }
    )


def shared_runs(workload: str | None = None) -> Iterator[PerRequestRun]:
    """The shipped llm-d-benchmark runs (plain vLLM and llm-d's vLLM build, A100, TP 2)."""
    table = read_table_file(shipped_root() / "e2e" / SHIPPED)
    for name, rows in table.groupby("run", observed=True, sort=False):
        first = rows.iloc[0]
        if workload is not None and first["workload"] != workload:
            continue
        frame = rows.rename(columns={"generation_tokens": "output_tokens"})
        users = frame["user_id"].where(frame["user_id"] >= 0, -1)
        yield PerRequestRun(
            name=str(name),
            deployment=replace(LLM_D, tp=int(first["tp"]), replicas=int(first["replicas"])),
            requests=_measured(frame.assign(user_id=users)),
            workload=str(first["workload"]),
            qps=float(first["qps"]),
        )


_CLIENT_COLUMNS = {
    "launch_time": "send_s",
    "generation_tokens": "output_tokens",
    "ttft": "ttft_s",
    "generation_time": "generation_time_s",
}


DETAILED_KEYS = ("start_times", "input_lens", "output_lens", "ttfts", "latencies")
_DETAILED_NAMES = {
    "send_s": "start_times",
    "prompt_tokens": "input_lens",
    "output_tokens": "output_lens",
    "ttft_s": "ttfts",
    "generation_time_s": "latencies",
}


def _detailed_json(path: Path) -> dict[str, Any] | None:
    """A vLLM ``bench serve --save-detailed`` result (per-request lists), else None."""
    from cbsim.common.documents import decode_utf8, parse_json

    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CbsimError(f"cannot read: {err.strerror or err}", source=str(path)) from None
    try:
        data = parse_json(decode_utf8(raw, str(path)), str(path), invalid="not valid JSON")
    except CbsimError:
        return None
    if isinstance(data, dict) and all(isinstance(data.get(k), list) for k in DETAILED_KEYS):
        return data
    return None


def _detailed_frame(data: dict[str, Any], path: Path) -> pd.DataFrame:
    """The requests of a detailed vLLM result that completed (``errors`` empty) in cbsim's
    columns: sent at ``start_times``, ``input_lens``/``output_lens`` tokens, ``ttfts`` and the
    rest of ``latencies``."""
    lengths = {len(data[k]) for k in DETAILED_KEYS}
    if len(lengths) != 1:
        raise CbsimError(
            f"the lists {', '.join(DETAILED_KEYS)} must be equally long", source=str(path)
        )
    frame = pd.DataFrame(
        {
            "send_s": data["start_times"],
            "prompt_tokens": data["input_lens"],
            "output_tokens": data["output_lens"],
            "ttft_s": data["ttfts"],
            "latency_s": data["latencies"],
        }
    )
    errors = data.get("errors")
    if isinstance(errors, list) and len(errors) == len(frame):
        frame = frame[[not e for e in errors]]
    frame = frame.apply(pd.to_numeric, errors="coerce")
    frame["generation_time_s"] = frame["latency_s"] - frame["ttft_s"]
    completed: pd.DataFrame = frame.reset_index(drop=True)
    return completed


def read_run(path: Path, deployment: Deployment) -> PerRequestRun:
    """A per-request file: a CSV or parquet in LMBenchmark's columns (``launch_time``,
    ``prompt_tokens``, ``generation_tokens``, ``ttft``, ``generation_time``) or cbsim's (``send_s``,
    ``prompt_tokens``, ``output_tokens``, ``ttft_s`` and ``tpot_s`` or ``generation_time_s``), or a
    vLLM ``bench serve --save-detailed`` JSON (its completed requests)."""
    detailed = _detailed_json(path) if path.suffix.lower() == ".json" else None
    names: dict[str, str] = {}  # cbsim's column -> the file's name for it
    if detailed is not None:
        frame = _detailed_frame(detailed, path)
        names = dict(_DETAILED_NAMES)
    elif path.suffix.lower() == ".json":
        raise CbsimError(
            "a JSON per-request file is a vLLM `bench serve --save-detailed` result (lists "
            f"{', '.join(DETAILED_KEYS)})",
            source=str(path),
        )
    else:
        frame = read_table_file(path)
        _check_one_convention(frame, str(path))
        names = {ours: theirs for theirs, ours in _CLIENT_COLUMNS.items() if theirs in frame}
        frame = frame.rename(columns=_CLIENT_COLUMNS)
    if "generation_time_s" not in frame and "tpot_s" in frame:
        frame["generation_time_s"] = frame["tpot_s"] * (frame["output_tokens"] - 1).clip(lower=0)
        names["generation_time_s"] = "tpot_s"
    needed = ["send_s", "prompt_tokens", "output_tokens", "ttft_s", "generation_time_s"]
    missing = [c for c in needed if c not in frame]
    if missing:
        raise CbsimError(
            f"a per-request file needs columns {', '.join(needed)} (or LMBenchmark's "
            f"launch_time, prompt_tokens, generation_tokens, ttft, generation_time); "
            f"missing {', '.join(missing)}",
            source=str(path),
        )
    if frame.empty:
        raise CbsimError("no requests in the file", source=str(path))
    if not BENCHMARK_REQUESTS.contains(len(frame)):
        raise CbsimError(
            f"has {len(frame):,} requests; a replayed run "
            f"{BENCHMARK_REQUESTS.violation(len(frame))}",
            source=str(path),
        )
    numbers = frame[needed].apply(pd.to_numeric, errors="coerce")
    for column in needed:
        _check_column(numbers[column], frame[column], column, names.get(column, column), str(path))
    _check_span(numbers["send_s"], names.get("send_s", "send_s"), str(path))
    _check_context(numbers, deployment, names.get("prompt_tokens", "prompt_tokens"), str(path))
    frame[needed] = numbers
    if "user_id" in frame:
        frame["user_id"] = pd.to_numeric(frame["user_id"], errors="coerce").fillna(-1)
    return PerRequestRun(
        name=path.stem, deployment=deployment, requests=_measured(frame), source=str(path)
    )


def _check_one_convention(frame: pd.DataFrame, source: str) -> None:
    """Refuse a file that gives one quantity under both conventions (LMBenchmark's ``ttft`` and
    cbsim's ``ttft_s``): which one to read would be a guess."""
    for theirs, ours in _CLIENT_COLUMNS.items():
        if theirs in frame and ours in frame:
            raise CbsimError(
                f"has both {theirs!r} (LMBenchmark's name) and {ours!r} (cbsim's) for the same "
                "quantity; keep one",
                source=source,
                field=theirs,
            )


# column -> (range, whole numbers only, what a cell must be); send times may have any origin
# (LMBenchmark's are since the epoch): only their span is bounded (:func:`_check_span`)
_ANY_TIME = Limit("send times", -1e300, 1e300, "s", "any origin; the span is what counts")
_COLUMN_RANGES: dict[str, tuple[Limit, bool, str]] = {
    "send_s": (_ANY_TIME, False, "a finite send time in seconds"),
    "prompt_tokens": (TOKENS, True, "a whole token count"),
    "output_tokens": (TOKENS, True, "a whole token count"),
    "ttft_s": (MEASURED_LATENCY, False, "a time to first token in seconds"),
    "generation_time_s": (MEASURED_LATENCY, False, "a generation time in seconds"),
}


def _check_column(
    numbers: pd.Series, cells: pd.Series, column: str, name: str, source: str
) -> None:
    """Every cell of a per-request column a number of its kind within its physical range; the
    first that is not is an error naming the file, the row and the column (``name``: the
    file's own name for it)."""
    limit, whole, what = _COLUMN_RANGES[column]
    values = numbers.to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < limit.low) | (values > limit.high)
        if whole:
            bad |= values != np.floor(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        cell = cells.iloc[row]
        shown = repr(cell) if isinstance(cell, str) else f"{float(numbers.iloc[row]):.6g}"
        within = "" if limit is _ANY_TIME else f" {limit.describe()} ({limit.reason})"
        raise CbsimError(
            f"row {row + 1}: {shown} is not {what}{within}",
            source=source,
            field=name,
        )


def _check_span(send: pd.Series, name: str, source: str) -> None:
    span = float(send.max() - send.min())
    if not SIMULATED_TIME.contains(span):
        raise CbsimError(
            f"the requests span {span:,.6g} s; a replayed run {SIMULATED_TIME.violation(span)}",
            source=source,
            field=name,
        )


def _check_context(numbers: pd.DataFrame, deployment: Deployment, name: str, source: str) -> None:
    """Every request's prompt and output within what the deployment's model serves."""
    from cbsim.catalog.models import get_model

    context = deployment.max_model_len or get_model(deployment.model).max_position_embeddings
    total = (numbers["prompt_tokens"] + numbers["output_tokens"]).to_numpy()
    over = np.flatnonzero(total > context)
    if over.size:
        row = int(over[0])
        raise CbsimError(
            f"row {row + 1}: a prompt of {int(numbers['prompt_tokens'].iloc[row]):,} and an "
            f"output of {int(numbers['output_tokens'].iloc[row]):,} tokens exceed the "
            f"{context:,}-token context of {deployment.model}",
            source=source,
            field=name,
        )


# --------------------------------------------------------------------------- replay


def _prefix_ids(requests: pd.DataFrame, block: int) -> list[list[int]] | None:
    """Prefix block ids of multi-round chat prompts: a user's n-th prompt holds its history, so
    its blocks are the user's blocks 0, 1, ... (a conversation's blocks are shared by every later
    round of it); None when no request names a user."""
    users = requests["user_id"].to_numpy()
    if (users < 0).all():
        return None
    ids: list[list[int]] = []
    next_id = 0
    base: dict[int, int] = {}
    stride = 1 << 20
    for user, prompt in zip(users, requests["prompt_tokens"].to_numpy(), strict=True):
        if user < 0:
            ids.append([next_id * stride + k for k in range(int(prompt) // block)])
            next_id += 1
            continue
        if user not in base:
            base[int(user)] = next_id
            next_id += 1
        ids.append([base[int(user)] * stride + k for k in range(int(prompt) // block)])
    return ids


def replay_scenario(run: PerRequestRun, trace_path: Path, engine: str | None = None) -> Scenario:
    """The run as a cbsim scenario: its requests replayed from ``trace_path`` (written here)
    on its deployment, under ``engine`` (a name or profile path; default the run's)."""
    dep = run.deployment
    requests = run.requests
    trace = pd.DataFrame(
        {
            "arrival_s": requests["send_s"],
            "prompt_tokens": requests["prompt_tokens"],
            "output_tokens": requests["output_tokens"],
        }
    )
    ids = _prefix_ids(requests, PREFIX_BLOCK_TOKENS)
    if ids is not None:
        trace["prefix_hash_ids"] = [json.dumps(i) for i in ids]
    trace.to_csv(trace_path, index=False)
    cluster: dict[str, Any] = {
        "model": dep.model,
        "gpu": dep.gpu,
        "tp": dep.tp,
        "dtype": dep.dtype,
        "replicas": dep.replicas,
        "router": dep.router,
        "engine": engine or dep.engine,
    }
    if dep.gpu_memory_utilization is not None:
        cluster["gpu_memory_utilization"] = dep.gpu_memory_utilization
    if dep.max_model_len is not None:
        cluster["max_model_len"] = dep.max_model_len
    return load_scenario(
        {
            "name": f"replay-{run.name}"[:100],
            "workload": {
                "trace": {"path": str(trace_path), "prefix_block_tokens": PREFIX_BLOCK_TOKENS}
            },
            "cluster": cluster,
            "scheduler": dict(dep.scheduler),
        }
    )


def replay(run: PerRequestRun, engine: str | None = None) -> pd.DataFrame:
    """Measured and predicted latencies of every request of ``run`` (``<metric>`` measured,
    ``<metric>_pred`` simulated), in send order."""
    with tempfile.TemporaryDirectory(prefix="cbsim-replay-") as folder:
        try:
            scenario = replay_scenario(run, Path(folder) / "trace.csv", engine)
            simulated = simulate(scenario).requests.sort_values("request_id")
        except CbsimError as err:
            # the scenario and its trace are cbsim's own: the problem is the run's
            raise CbsimError(
                f"cannot replay this run: {err.message}", source=run.source or run.name
            ) from None
    if len(simulated) != len(run.requests):
        raise CbsimError(f"{run.name}: simulated {len(simulated)} of {len(run.requests)} requests")
    out = run.requests.copy()
    for metric in METRICS:
        out[f"{metric}_pred"] = simulated[metric].to_numpy(dtype=float)
    return out


# --------------------------------------------------------------------------- errors


def _ape(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    keep = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    errors: np.ndarray = np.abs(predicted[keep] / measured[keep] - 1.0) * 100.0
    return errors


def run_errors(compared: pd.DataFrame) -> dict[str, float]:
    """Per-request median absolute % error of each metric, and the % error of its p50, p90 and
    p99 over the run (distribution error; signed: positive = cbsim slower)."""
    row: dict[str, float] = {"requests": float(len(compared))}
    for metric in METRICS:
        measured = compared[metric].to_numpy(dtype=float)
        predicted = compared[f"{metric}_pred"].to_numpy(dtype=float)
        ape = _ape(predicted, measured)
        short = metric.removesuffix("_s")
        row[f"{short}_req_mape"] = float(np.median(ape)) if ape.size else float("nan")
        keep = np.isfinite(measured) & np.isfinite(predicted)
        for q in QUANTILES:
            m = float(np.quantile(measured[keep], q))
            p = float(np.quantile(predicted[keep], q))
            row[f"{short}_p{round(q * 100)}_err"] = (p / m - 1.0) * 100.0
            row[f"{short}_p{round(q * 100)}_s"] = m
    return row


def validate_runs(
    runs: Iterator[PerRequestRun] | list[PerRequestRun], engine: str | None = None
) -> pd.DataFrame:
    """One row per run: deployment, workload, load and :func:`run_errors`."""
    rows = []
    for run in runs:
        compared = replay(run, engine)
        rows.append(
            {
                "run": run.name,
                "workload": run.workload,
                "replicas": run.deployment.replicas,
                "qps": run.qps,
                **run_errors(compared),
            }
        )
    return pd.DataFrame(rows)


def with_deployment(run: PerRequestRun, **changes: Any) -> PerRequestRun:
    """``run`` on a changed deployment (another engine profile, GPU, ...)."""
    return replace(run, deployment=replace(run.deployment, **changes))


# --------------------------------------------------------------------------- fitting


SERIAL_GRID_S = tuple(round(0.25e-3 * i, 6) for i in range(13))  # 0 to 3 ms
STABLE_TTFT_P90_S = 2.0  # a run whose measured TTFT p90 exceeds this was overloaded (queueing)


def is_per_request_file(path: Path) -> bool:
    """Whether a data file holds one row per request (LMBenchmark's or cbsim's columns, or a
    detailed vLLM result with send times)."""
    if path.suffix.lower() == ".json":
        return _detailed_json(path) is not None
    if path.suffix.lower() not in (".csv", ".parquet"):
        return False
    try:
        columns = set(table_columns(path))
    except CbsimError:
        return False
    return bool({"launch_time", "send_s"} & columns) and bool({"ttft", "ttft_s"} & columns)


def stable(runs: list[PerRequestRun]) -> list[PerRequestRun]:
    """The runs whose server kept up (measured TTFT p90 at most :data:`STABLE_TTFT_P90_S`): an
    overloaded run's latencies are its queue's growth, which magnifies any throughput error."""
    return [r for r in runs if float(r.requests["ttft_s"].quantile(0.9)) <= STABLE_TTFT_P90_S]


def _profile_path(profile: Any, folder: Path, name: str) -> str:
    from cbsim.cost.engine_profile import write_engine_profile

    path = folder / f"{name}.json"
    write_engine_profile(profile, path)
    return str(path)


def fit_serial(runs: list[PerRequestRun], base: Any) -> tuple[Any, pd.DataFrame]:
    """``base`` (an engine profile) with the serial step time that best reproduces the runs'
    per-request TPOT (smallest median |log ratio| over the stable runs, full simulations over
    :data:`SERIAL_GRID_S`), and the grid's errors. The front end is left as it is."""
    chosen = stable(runs) or runs
    trials: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="cbsim-fit-") as folder:
        for serial in SERIAL_GRID_S:
            overhead = base.overhead.model_copy(update={"serial_s": serial})
            trial = base.model_copy(update={"overhead": overhead})
            path = _profile_path(trial, Path(folder), f"serial-{len(trials)}")
            ratios = []
            for run in chosen:
                compared = replay(run, path)
                keep = compared["tpot_s"].notna() & (compared["tpot_s"] > 0)
                ratios.append(
                    np.log(compared.loc[keep, "tpot_s_pred"] / compared.loc[keep, "tpot_s"])
                )
            error = float(np.median(np.abs(np.concatenate(ratios))))
            trials.append({"serial_s": serial, "tpot_median_abs_log_ratio": error})
    table = pd.DataFrame(trials)
    best = float(table["serial_s"].to_numpy()[int(table["tpot_median_abs_log_ratio"].argmin())])
    overhead = base.overhead.model_copy(update={"serial_s": best})
    return base.model_copy(update={"overhead": overhead}), table


def summarize_runs(errors: pd.DataFrame) -> pd.DataFrame:
    """Medians over runs of :func:`validate_runs`' figures, for stable runs and for all."""
    stable_rows = errors["ttft_p90_s"] <= STABLE_TTFT_P90_S
    rows = []
    for label, part in (("stable runs", errors[stable_rows]), ("all runs", errors)):
        if part.empty:
            continue
        row: dict[str, Any] = {"runs": label, "count": len(part)}
        for metric in ("ttft", "tpot", "e2e"):
            row[f"{metric} per-request"] = part[f"{metric}_req_mape"].median()
            for q in (50, 90, 99):
                row[f"{metric} p{q}"] = part[f"{metric}_p{q}_err"].abs().median()
        rows.append(row)
    return pd.DataFrame(rows)
