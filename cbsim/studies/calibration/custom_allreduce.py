"""Fitting an engine's own all-reduce mechanism, and how well it predicts a GPU it never saw.

The cost model prices vLLM's, SGLang's and TensorRT-LLM's one-shot / two-shot all-reduce on GPUs
without a measured table of it (A100, B200) from the mechanism in
:mod:`cbsim.cost.custom_allreduce`: a synchronisation latency ``L(n) = latency + latency_per_peer
· (n − 1)`` per algorithm, scaled to the target GPU by its small-message NCCL latency, plus the
bytes each GPU reads from its peers over NVLink at an efficiency ``η``, the faster of one-shot and
two-shot, NCCL where faster or beyond 8 MiB. This module fits those five terms to an engine's
measured ``custom_allreduce`` table on one GPU (robust least squares on log time, the model's
``min(own kernel, NCCL)`` against every measured size up to 32 MiB, the GPU's own NCCL curve in
the ``min``) and checks them on the other GPU measured (H100 ↔ H200).

Which fit prices which engine (:func:`engine_model`): TensorRT-LLM's on its own H100 table;
SGLang's on its own; vLLM's kernel was not measured, but SGLang's custom all-reduce is the same
kernel lineage (it already stands in for vLLM's on H100 and H200), so vLLM and vLLM V0 take
SGLang's fit. The shipped models are fitted on H100 (the GPU the engines' other kernels transfer
from) and held out on H200.

Held out (``docs/calibration.md``): every measured size up to 8 MiB (where the engine's own kernel
runs) of 2, 4 and 8 GPUs, median / P90 absolute error: TensorRT-LLM 5.2 / 10.0 % (H100 → H200) and
4.5 / 9.8 % (H200 → H100), SGLang 4.6 / 15.2 % and 3.7 / 11.8 %; pricing them with the target's
NCCL instead is 142–167 % median off. H100 and H200 share NVLink 4 and nearly the same NCCL
latency (H200 / H100 at 4 KiB: 1.02–1.04), so this checks the fit's stability, not the move to
another NVLink generation: on A100 (NVLink 3, NCCL latency 1.36–1.58 × H100's) and B200 (NVLink 5,
1.59–1.63 ×) the latency scaling and the bandwidth term are a model. B200 at 8 GPUs: 5.4–5.7 µs
for a decode step's 16 KiB message (NCCL measured 26.6 µs); with Hopper's latency unscaled it
would be 3.4–3.6 µs. vLLM's own tuning benchmarks on Blackwell (B300, vllm-project/vllm#37756)
show the same proportion: its one-shot kernel at 7–9 µs for 16–256 KiB against 24–29 µs for
NCCL. End to end, vLLM V0's profile refitted on LLM-Inference-Bench's A100 static batches (which
ran vLLM's custom all-reduce) holds out at 5.5 / 15.5 % with the mechanism against 6.4 / 16.4 %
with NCCL (``tools/fit_vllm_v0.py``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.cost.custom_allreduce import MAX_CUSTOM_BYTES, CustomAllreduce
from cbsim.studies.calibration import comm
from cbsim.studies.calibration.data import engine_name, load_table
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.profile import CommFit

FIT_GPU = "h100-sxm"
HELD_OUT_GPU = "h200"
MAX_FIT_BYTES = 32.0 * 2**20
"""Measured sizes the fit sees (beyond, every engine runs NCCL)."""
SMALL_BYTES = 64.0 * 2**10
"""Up to here a decode step's all-reduce (a few tokens' hidden states): latency-bound."""
MODELLED_GPUS: tuple[str, ...] = ("a100-80gb", "b200")
"""GPUs the mechanism prices: NVLink/NVSwitch nodes with a measured NCCL table and no measured
table of any engine's own kernel (L40S has no NVLink: the engines' custom all-reduce is off
beyond two PCIe GPUs)."""
FIT_SOURCE: dict[str, str] = {
    "vllm": "sglang",
    "vllm-v0": "sglang",
    "sglang": "sglang",
    "tensorrt-llm": "trtllm",
}
"""Whose measured custom all-reduce each serving engine's mechanism is fitted on."""

# start, lower and upper bounds of latency, latency per peer, two-shot latency, two-shot latency
# per peer (microseconds) and the NVLink efficiency
_START = np.array([2.5, 0.1, 4.0, 0.2, 0.5])
_LOWER = np.array([0.3, 0.0, 0.3, 0.0, 0.05])
_UPPER = np.array([50.0, 20.0, 100.0, 50.0, 1.0])


def nccl_curves(gpu: str) -> dict[str, CommFit]:
    """The GPU's NCCL all-reduce curves per GPU count (what the engines fall back to)."""
    return dict(_nccl_curves(gpu))


@lru_cache(maxsize=8)
def _nccl_curves(gpu: str) -> dict[str, CommFit]:
    """:func:`nccl_curves`, fitted once per GPU: a fit of the mechanism prices its rows with
    them at every step of its least squares (re-reading and re-fitting the NCCL table there was
    nine tenths of a fit's time)."""
    return comm.fit_allreduce_rows(comm.allreduce_rows(load_table("nccl", gpu)))


def measured_rows(gpu: str, source: str) -> pd.DataFrame:
    """An engine's measured custom all-reduce (``source``: ``sglang`` or ``trtllm``) on ``gpu``:
    num_gpus, size_bytes, latency_s."""
    return comm.custom_allreduce_rows(load_table("custom_allreduce", gpu, engine=source))


def _model(terms: np.ndarray, fit_gpu: str, reference: dict[str, float]) -> CustomAllreduce:
    """The mechanism with ``terms`` (latencies in microseconds, then the efficiency)."""
    latency, per_peer, two_shot, two_shot_per_peer, efficiency = (float(v) for v in terms)
    return CustomAllreduce(
        fitted_on=fit_gpu,
        latency_s=latency * 1e-6,
        latency_per_peer_s=per_peer * 1e-6,
        two_shot_latency_s=two_shot * 1e-6,
        two_shot_latency_per_peer_s=two_shot_per_peer * 1e-6,
        efficiency=efficiency,
        max_bytes=MAX_CUSTOM_BYTES,
        reference_latency_s=reference,
    )


def _reference(curves: dict[str, CommFit], size_bytes: float) -> dict[str, float]:
    return {count: round(float(curve(size_bytes)), 11) for count, curve in sorted(curves.items())}


def predict(model: CustomAllreduce, gpu: str, rows: pd.DataFrame) -> np.ndarray:
    """The engine's all-reduce seconds on ``gpu`` (its NCCL curves and NVLink bandwidth) at each
    row's num_gpus and size_bytes."""
    curves = nccl_curves(gpu)
    bandwidth = get_gpu(gpu).nvlink_bandwidth
    out = np.empty(len(rows))
    for i, (n, size) in enumerate(zip(rows["num_gpus"], rows["size_bytes"], strict=True)):
        curve = curves.get(str(int(n)))
        if curve is None:
            out[i] = np.nan
            continue
        out[i] = model.time(
            float(size), int(n), bandwidth, curve(float(size)), curve(model.reference_size_bytes)
        )
    return out


def fit(gpu: str, source: str) -> CustomAllreduce:
    """The mechanism's terms fitted to ``source``'s measured custom all-reduce on ``gpu`` (every
    GPU count, sizes up to :data:`MAX_FIT_BYTES`)."""
    return _fitted(gpu, source).model_copy(deep=True)


@lru_cache(maxsize=8)
def _fitted(gpu: str, source: str) -> CustomAllreduce:
    """:func:`fit`, once per GPU and source (three engines are fitted on SGLang's kernel)."""
    rows = measured_rows(gpu, source)
    rows = rows[rows["size_bytes"] <= MAX_FIT_BYTES].reset_index(drop=True)
    curves = nccl_curves(gpu)
    reference = _reference(curves, CustomAllreduce.model_fields["reference_size_bytes"].default)
    measured = np.log(rows["latency_s"].to_numpy(np.float64))

    def residuals(terms: np.ndarray) -> np.ndarray:
        predicted = predict(_model(terms, gpu, reference), gpu, rows)
        return np.asarray(np.log(predicted) - measured, dtype=np.float64)

    from scipy.optimize import least_squares  # slow to import: fits only

    result = least_squares(residuals, _START, bounds=(_LOWER, _UPPER), loss="soft_l1", f_scale=0.05)
    model = _model(result.x, gpu, reference)
    rounded = {  # stored to a picosecond (and the efficiency to 4 digits)
        name: round(getattr(model, name), 12)
        for name in (
            "latency_s",
            "latency_per_peer_s",
            "two_shot_latency_s",
            "two_shot_latency_per_peer_s",
        )
    }
    return model.model_copy(update={**rounded, "efficiency": round(model.efficiency, 4)})


@lru_cache(maxsize=8)
def engine_model(engine: str, fit_gpu: str = FIT_GPU) -> CustomAllreduce | None:
    """The shipped mechanism of a serving engine's all-reduce (None for an engine without a
    custom all-reduce): fitted on ``fit_gpu``, pricing :data:`MODELLED_GPUS`."""
    source = FIT_SOURCE.get(engine)
    if source is None:
        return None
    model = fit(fit_gpu, source)
    return model.model_copy(
        update={"fitted_on": f"{fit_gpu}/{source}", "gpus": list(MODELLED_GPUS)}
    )


def holdout(source: str, fit_gpu: str = FIT_GPU, target_gpu: str = HELD_OUT_GPU) -> pd.DataFrame:
    """``source``'s custom all-reduce fitted on ``fit_gpu`` and predicted on ``target_gpu`` (its
    NCCL and NVLink, no custom measurement) at every size the target measured up to the custom
    kernel's range. Columns num_gpus, size_bytes, measured_s, predicted_s, nccl_s, ape."""
    model = fit(fit_gpu, source)
    rows = measured_rows(target_gpu, source)
    rows = rows[rows["size_bytes"] <= model.max_bytes].reset_index(drop=True)
    predicted = predict(model, target_gpu, rows)
    curves = nccl_curves(target_gpu)
    nccl = [
        curves[str(int(n))](float(size))
        for n, size in zip(rows["num_gpus"], rows["size_bytes"], strict=True)
    ]
    measured = rows["latency_s"].to_numpy(np.float64)
    return rows.rename(columns={"latency_s": "measured_s"}).assign(
        predicted_s=predicted, nccl_s=nccl, ape=np.abs(predicted / measured - 1.0)
    )


def holdout_table() -> pd.DataFrame:
    """Held-out error of the mechanism per measured engine and direction (H100 → H200 and back):
    all sizes up to 8 MiB and the small (decode) ones, as median / P90 APE fractions, against
    pricing the engine with the target GPU's NCCL."""
    records: list[dict[str, object]] = []
    for source in ("trtllm", "sglang"):
        for fit_gpu, target in ((FIT_GPU, HELD_OUT_GPU), (HELD_OUT_GPU, FIT_GPU)):
            frame = holdout(source, fit_gpu, target)
            small = frame[frame["size_bytes"] <= SMALL_BYTES]
            for sizes, part in (("<= 8 MiB", frame), ("<= 64 KiB", small)):
                measured = part["measured_s"].to_numpy()
                for method, column in (("mechanism", "predicted_s"), ("NCCL", "nccl_s")):
                    stats = summarize(part[column].to_numpy(), measured)
                    records.append(
                        {
                            "gpu": f"{target} from {fit_gpu}",
                            "engine": engine_name(source),
                            "sizes": sizes,
                            "method": method,
                            **stats,
                        }
                    )
    return pd.DataFrame(records)


def modelled_table(engines: tuple[str, ...] = ("vllm", "sglang", "tensorrt-llm")) -> pd.DataFrame:
    """What the shipped mechanisms price on :data:`MODELLED_GPUS` (and, for comparison, what was
    measured on H100) at 8 GPUs: a decode step's small messages and 1 MiB, against NCCL."""
    sizes = (16.0 * 2**10, 2.0**20)
    records: list[dict[str, object]] = []
    for engine in engines:
        model = engine_model(engine)
        if model is None:
            continue
        for gpu in MODELLED_GPUS:
            curve = nccl_curves(gpu)["8"]
            bandwidth = get_gpu(gpu).nvlink_bandwidth
            for size in sizes:
                nccl = curve(size)
                own = model.time(size, 8, bandwidth, nccl, curve(model.reference_size_bytes))
                records.append(
                    {
                        "engine": engine,
                        "gpu": gpu,
                        "message_kib": size / 1024,
                        "own_us": 1e6 * own,
                        "nccl_us": 1e6 * nccl,
                    }
                )
    return pd.DataFrame(records)
