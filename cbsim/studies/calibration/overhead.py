"""Serving-engine overhead: the time a real engine spends per iteration beyond its GPU kernels.

Kernel tables time kernels alone, yet a serving engine's decode step also pays for scheduling,
input preparation, sampling, detokenisation and the gaps between kernel launches: often several
milliseconds. cbsim models it per engine as ``overhead_s + per_request · B + per_token · N`` for an
iteration with B requests and N new tokens, and fits the three terms to end-to-end measurements:
LLM-Inference-Bench's static batches on A100 (B requests of L prompt tokens each generating L
tokens, timed whole). Each measured batch is simulated end to end with the static scheduler on the
calibrated A100 cost model; since the overhead adds to every iteration, the simulated latency is the
kernels' sum plus a linear function of the three terms, which are fitted (non-negative) to minimise
relative error. Cross-validation holds out whole models. The fitted profile then applies on every GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.cost.engine_profile import EngineProfile, StepOverhead
from cbsim.cost.engine_profile import Measured as EngineMeasured
from cbsim.engine.cost_models import CostModelCache
from cbsim.engine.loop import Simulation
from cbsim.engine.recorder import Recorder
from cbsim.run.loading import load_scenario
from cbsim.schema.scenario import Scenario
from cbsim.studies.calibration.data import argonne_static_batches
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.profile import CalibrationProfile, load_profile

# LLM-Inference-Bench model ids → catalog shapes (Qwen2-7B has Qwen2.5-7B's shape); MoE and
# DeciLM rows are left out (cbsim models dense decoders only).
MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "Qwen/Qwen2-7B": "qwen2.5-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
}
ENGINES = {
    "vLLM": "vllm",
    "TensorRT-LLM": "tensorrt-llm",
    "Deepspeed-MII": "deepspeed-mii",
    "llama.cpp": "llama.cpp",
}
GPU = "a100-80gb"
# engines whose profiles come from these static batches alone (vLLM, SGLang and TensorRT-LLM are
# fitted to closed-loop serving benchmarks instead: cbsim.studies.calibration.e2e)
STATIC_BATCH_ENGINES = ("deepspeed-mii", "llama.cpp")


@dataclass(frozen=True)
class BatchRun:
    """One simulated static batch, overhead left out: what the overhead terms multiply."""

    kernel_s: float
    iterations: int
    request_steps: int
    token_steps: int
    completed: bool


def static_batch_scenario(
    model: str, tp: int, length: int, batch: int, cluster: dict[str, object]
) -> Scenario:
    """B requests of L prompt tokens generating L tokens, all sent at once, on the A100 (fp16)."""
    return load_scenario(
        {
            "name": "static-batch",
            "workload": {
                "num_requests": batch,
                "arrival": {"kind": "offline"},
                "prompt_tokens": {"kind": "fixed", "value": length},
                "output_tokens": {"kind": "fixed", "value": length},
            },
            "cluster": {"model": model, "gpu": GPU, "tp": tp, "dtype": "fp16", **cluster},
        }
    )


def simulate_static_batch(
    model: str,
    tp: int,
    length: int,
    batch: int,
    calibration: CalibrationProfile | None,
    cost_models: CostModelCache | None = None,
) -> BatchRun:
    """Simulate B requests of L prompt tokens generating L tokens, all at once, statically batched
    on ``calibration``'s kernels with no engine (no overhead, no engine defaults); ``cost_models``:
    shared with the other batches of this calibration (each model and TP's tables filled once),
    never with another calibration's."""
    scenario = static_batch_scenario(
        model, tp, length, batch, {"engine": "none", "calibration": "none"}
    )
    scenario = scenario.model_copy(
        update={
            "scheduler": scenario.scheduler.model_copy(
                update={
                    "kind": "static",
                    "max_batch_size": batch,
                    "max_batched_tokens": batch * length,
                }
            )
        }
    )
    cost_models = cost_models if cost_models is not None else CostModelCache()
    cost_models.get(
        scenario,
        lambda _: CostModel(
            get_model(model),
            get_gpu(GPU),
            tp=tp,
            dtype="fp16",
            calibration=calibration,
            engine=None,
        ),
    )
    return _batch_run(Simulation(scenario, cost_models=cost_models).run())


def _batch_run(recorder: Recorder) -> BatchRun:
    """What a static batch's simulation did: its last finish and its step counts."""
    iterations = recorder.iterations
    finished = recorder.requests["finish_s"]
    return BatchRun(
        kernel_s=float(finished.max()),
        iterations=len(iterations),
        request_steps=int(iterations["batch_size"].sum()),
        token_steps=int((iterations["prefill_tokens"] + iterations["decode_tokens"]).sum()),
        completed=bool(finished.notna().all()),
    )


def static_batches(framework: str) -> Iterator[tuple[str, int, int, int, float]]:
    """(model id, tp, length, batch size, measured seconds) of each usable batch of a framework."""
    data = argonne_static_batches()
    data = data[(data["framework"] == framework) & data["model"].isin(list(MODELS))]
    yield from zip(
        data["model"].astype(str),
        data["tp"].astype(int),
        data["length"].astype(int),
        data["batch_size"].astype(int),
        data["latency_s"].astype(float),
        strict=True,
    )


def simulate_under_engine(
    model: str,
    tp: int,
    length: int,
    batch: int,
    kernels_path: str,
    cost_models: CostModelCache | None = None,
) -> BatchRun:
    """A static batch sent at once to an engine (its defaults and kernels, no overhead: the
    profile at ``kernels_path``), as the engine's own scheduler runs it; ``cost_models``: shared
    with the other batches (each model and TP's tables filled once, not once a batch)."""
    scenario = static_batch_scenario(model, tp, length, batch, {"engine": kernels_path})
    return _batch_run(Simulation(scenario, cost_models=cost_models).run())


def features(
    engine: str, calibration: CalibrationProfile | None, kernels_path: str | None = None
) -> pd.DataFrame:
    """Every usable measured batch of one engine with its simulated kernel time and step counts:
    under the static scheduler on ``calibration``'s kernels, or, with ``kernels_path`` (an engine
    profile without overhead), under that engine's defaults and kernels."""
    framework = {v: k for k, v in ENGINES.items()}.get(engine.removesuffix("-v0"))
    if framework is None:
        raise CbsimError(
            f"no end-to-end measurements for engine {engine!r}; known: {', '.join(ENGINES.values())}"
        )
    rows = []
    cost_models = CostModelCache()
    for model_id, tp, length, batch, latency in static_batches(framework):
        model = MODELS[model_id]
        if kernels_path is None:
            run = simulate_static_batch(model, tp, length, batch, calibration, cost_models)
        else:
            run = simulate_under_engine(model, tp, length, batch, kernels_path, cost_models)
        rows.append(
            {
                "model": model,
                "tp": tp,
                "length": length,
                "batch_size": batch,
                "measured_s": latency,
                "kernel_s": run.kernel_s,
                "iterations": run.iterations,
                "request_steps": run.request_steps,
                "token_steps": run.token_steps,
            }
        )
    return pd.DataFrame(rows)


def fit_terms(frame: pd.DataFrame) -> np.ndarray:
    """Non-negative (overhead_s, per_request_s, per_token_s) minimising squared relative error.

    On static batches the per-request and per-token terms are nearly interchangeable (a decode
    step has as many tokens as requests): fitting both gives the same cross-validated error as
    per-request alone (6.2 % median either way on vLLM), but a per-token term would charge every
    speculative verify token as if it were a sequence. So the per-token term is held at zero.
    """
    measured = frame["measured_s"].to_numpy()
    design = frame[["iterations", "request_steps"]].to_numpy(dtype=np.float64)
    scaled = design / measured[:, None]
    target = 1.0 - frame["kernel_s"].to_numpy() / measured
    # columns differ by orders of magnitude: solve in normalised units
    norm = np.maximum(scaled.max(axis=0), 1e-30)
    solution, _ = nnls(scaled / norm, target)
    terms: np.ndarray = np.append(solution / norm, 0.0)
    return terms


def predict(frame: pd.DataFrame, terms: np.ndarray) -> np.ndarray:
    design = frame[["iterations", "request_steps", "token_steps"]].to_numpy(dtype=np.float64)
    result: np.ndarray = frame["kernel_s"].to_numpy() + design @ terms
    return result


def cross_validate(frame: pd.DataFrame) -> pd.DataFrame:
    """Leave-one-model-out predictions: each model's batches predicted from the others' fit."""
    out = frame.copy()
    out["predicted_s"] = np.nan
    for model in frame["model"].unique():
        held = frame["model"] == model
        if held.all():  # one model only: nothing to hold it out against
            continue
        terms = fit_terms(frame[~held])
        out.loc[held, "predicted_s"] = predict(frame[held], terms)
    return out


def fit_engine_profile(engine: str = "vllm") -> tuple[EngineProfile, pd.DataFrame]:
    """The engine's overhead profile and its leave-one-model-out predictions."""
    calibration = load_profile(GPU)
    frame = features(engine, calibration)
    validated = cross_validate(frame)
    terms = fit_terms(frame)
    stats = summarize(validated["predicted_s"].to_numpy(), validated["measured_s"].to_numpy())
    profile = EngineProfile(
        engine=engine,
        description=(
            f"Per-iteration overhead of {engine} fitted to LLM-Inference-Bench static batches on "
            f"A100 ({len(frame)} batches, {frame['model'].nunique()} models), kernels from the "
            f"{calibration.name if calibration else 'uncalibrated'} A100 profile; leave-one-model-out "
            f"median APE {100 * stats['median_ape']:.1f}%, P90 {100 * stats['p90_ape']:.1f}%."
        ),
        overhead=StepOverhead(
            cpu_s=round(float(terms[0]), 9),
            cpu_per_request_s=round(float(terms[1]), 9),
            cpu_per_token_s=round(float(terms[2]), 12),
        ),
        provenance={
            "e2e": EngineMeasured(
                source="argonne-lcf/LLM-Inference-Bench (BSD-3-Clause), A100 static batches",
                rows=len(frame),
                holdout_median_ape=stats["median_ape"],
                holdout_p90_ape=stats["p90_ape"],
            )
        },
    )
    return profile, validated


def fit_engine_version(base: EngineProfile) -> tuple[EngineProfile, pd.DataFrame]:
    """``base`` (an engine's kernels and defaults, e.g. vLLM's V0 engine) with its step overhead
    fitted to the static batches of its framework, simulated under its own defaults, not
    overlapped; and the leave-one-model-out predictions (``predicted_s``)."""
    import tempfile
    from pathlib import Path

    from cbsim.cost.engine_profile import write_engine_profile
    from cbsim.studies.calibration.e2e import bare

    with tempfile.TemporaryDirectory(prefix="cbsim-static-") as folder:
        path = Path(folder) / "kernels.json"
        write_engine_profile(bare(base), path)
        frame = features(base.engine, None, str(path))
    validated = cross_validate(frame)
    terms = fit_terms(frame)
    stats = summarize(validated["predicted_s"].to_numpy(), validated["measured_s"].to_numpy())
    profile = base.model_copy(
        update={
            "description": (
                f"{base.engine} fitted to LLM-Inference-Bench static batches on A100 "
                f"({len(frame)} batches, {frame['model'].nunique()} models) under its own "
                f"defaults; leave-one-model-out median APE {100 * stats['median_ape']:.1f}%, "
                f"P90 {100 * stats['p90_ape']:.1f}%."
            ),
            "overhead": StepOverhead(
                cpu_s=round(float(terms[0]), 9),
                cpu_per_request_s=round(float(terms[1]), 9),
                overlap=False,
            ),
            "provenance": {
                "e2e": EngineMeasured(
                    source="argonne-lcf/LLM-Inference-Bench (BSD-3-Clause), A100 static batches",
                    rows=len(frame),
                    holdout_median_ape=stats["median_ape"],
                    holdout_p90_ape=stats["p90_ape"],
                    holdout="leave-one-model-out",
                )
            },
        }
    )
    return profile, validated
