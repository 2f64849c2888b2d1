"""All-reduce calibration: how long tensor parallelism's two all-reduces per layer take.

With tensor parallelism each decoder layer ends its attention and its MLP with an all-reduce of the
N × hidden activations (N tokens in the iteration, 16-bit values) across the TP group. Its time is
a latency floor for small messages (kernel launch, NCCL protocol handshakes) that turns into a
bandwidth term for large ones. Rather than a two-parameter formula, calibration keeps the measured
curve: per GPU count, latency by message size, read by log-log interpolation
(:class:`~cbsim.studies.calibration.profile.CommFit`), and beyond the largest measured message a straight
line at the marginal rate the largest messages reach.

Measurements are noisy (two adjacent sizes can swap order by a few microseconds, and Vidur's
profiles are bimodal at small sizes), while true all-reduce time can only grow with the message.
So each curve is de-noised: (for dense sweeps) medians over log-spaced size bins, glitches left out
(a size timed more than :data:`GLITCH_FACTOR` times slower than both its neighbours: SGLang's
8-GPU H100 sweep has 38 µs at 512 elements between 3.3 and 3.5 µs, which an isotonic fit would
otherwise spread over the six sizes after it), then an isotonic (pool-adjacent-violators) fit in
log time, then a running maximum, which leaves it monotone non-decreasing.

Which kernel. vLLM's profile uses NCCL's all-reduce (the AI Configurator tables hold no vLLM
custom all-reduce). TensorRT-LLM and SGLang run their own all-reduce kernels (one-shot / two-shot
over NVLink, falling back to NCCL where they do not pay), and AI Configurator measured those as
each engine runs them: :func:`engine_allreduce_rows` takes the engine's ``custom_allreduce`` table
at every message size it measured (per GPU count) and NCCL's measurements beyond the largest of
them or for GPU counts the custom table lacks. On H100 and H200 the custom tables span 128 to 2^29
elements at 2, 4 and 8 GPUs, wider than NCCL's sweep (256 to 2^28), so NCCL only fills GPU counts
they lack; small messages are where the engines differ (8 GPUs, 1 KiB: 3–4 µs custom, 16 µs NCCL).

Sources:

* NVIDIA AI Configurator's NCCL tables (``load_table("nccl", gpu)``: ``message_elements`` are fp16
  elements, so bytes = 2 · elements). The original files hold two sweeps per GPU count, ``half``
  and ``int8``; the int8 sweep's element counts are bytes. Only the half sweep is used: with a
  ``dtype`` (or ``nccl_dtype``) column it is selected by name, otherwise by position (each sweep
  restarts at the smallest size) and confirmed by timing (at equal element counts the half sweep
  moves twice the bytes, so it is the slower one at large sizes).
* Vidur's NCCL profiles (``vidur_network(node)``: bytes and milliseconds), for the Vidur profile
  and as an independent second measurement to compare against.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.data import vidur_network
from cbsim.studies.calibration.profile import CommFit

ALLREDUCE_OP = "all_reduce"
ALLTOALL_OP = "alltoall"
FP16_BYTES = 2
HALF_DTYPES = frozenset({"half", "fp16", "float16", "bf16", "bfloat16"})
# Vidur's network profile of the node each catalog GPU sits in (DGX: NVSwitch, all-to-all NVLink).
VIDUR_NODES: dict[str, str] = {"h100-sxm": "h100_dgx", "a100-80gb": "a100_dgx"}
TAIL_POINTS = 3  # largest sizes the extrapolation slope is fitted on
GLITCH_FACTOR = 2.0
"""A message size timed this many times slower than both neighbours is a glitch, not a kernel."""


# --------------------------------------------------------------------------- de-noising


def by_count(frame: pd.DataFrame, column: str) -> list[tuple[int, pd.DataFrame]]:
    """The rows of ``frame`` per distinct integer value of ``column`` (GPU count), ascending."""
    values = frame[column].to_numpy(np.int64)
    return [(int(v), frame[values == v]) for v in np.unique(values)]


def _isotonic(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators, equal weights)."""
    means: list[float] = []
    counts: list[int] = []
    for value in values.astype(np.float64):
        means.append(float(value))
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            total = means[-1] * counts[-1] + means[-2] * counts[-2]
            count = counts[-1] + counts[-2]
            means.pop()
            counts.pop()
            means[-1] = total / count
            counts[-1] = count
    return np.repeat(np.asarray(means), np.asarray(counts))


def _bin_medians(
    sizes: np.ndarray, latency: np.ndarray, bins_per_octave: float
) -> tuple[np.ndarray, np.ndarray]:
    """Median size and latency per log-spaced size bin (for dense, noisy sweeps)."""
    octave = np.floor(np.log2(sizes) * bins_per_octave)
    frame = pd.DataFrame({"bin": octave, "size": sizes, "latency": latency})
    grouped = frame.groupby("bin", sort=True).median()
    return grouped["size"].to_numpy(np.float64), grouped["latency"].to_numpy(np.float64)


def glitches(times: np.ndarray, factor: float = GLITCH_FACTOR) -> np.ndarray:
    """Interior points of a curve (sorted by size) more than ``factor`` times slower than both
    their neighbours."""
    out = np.zeros(len(times), dtype=bool)
    if len(times) >= 3:
        middle = times[1:-1]
        out[1:-1] = (middle > factor * times[:-2]) & (middle > factor * times[2:])
    return out


def _tail_rate(sizes: np.ndarray, latency: np.ndarray, points: int = TAIL_POINTS) -> float:
    """Message bytes per second the largest messages add: the slope of t = a + size / rate."""
    tail_s = sizes[-points:]
    tail_t = latency[-points:]
    if len(tail_s) >= 2:
        slope = float(np.polyfit(tail_s, tail_t, 1)[0])
        if slope > 0.0:
            return 1.0 / slope
    return float(sizes[-1] / latency[-1])


def fit_comm_curve(
    sizes_bytes: np.ndarray | list[float],
    latency_s: np.ndarray | list[float],
    *,
    bins_per_octave: float | None = None,
) -> CommFit:
    """A de-noised, monotone all-reduce curve from (size, latency) measurements of one GPU count.

    Repeated sizes are merged by their median; ``bins_per_octave`` first merges a dense sweep into
    log-spaced bins. ``bus_bandwidth`` is the marginal rate of the largest messages (message bytes
    per second, what :class:`CommFit` extrapolates with; NCCL's "bus bandwidth" is this times
    2·(n − 1)/n).
    """
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    times = np.asarray(latency_s, dtype=np.float64)
    keep = np.isfinite(sizes) & np.isfinite(times) & (sizes > 0) & (times > 0)
    sizes, times = sizes[keep], times[keep]
    if bins_per_octave is not None:
        sizes, times = _bin_medians(sizes, times, bins_per_octave)
    else:
        frame = pd.DataFrame({"size": sizes, "latency": times})
        merged = frame.groupby("size", sort=True)["latency"].median()
        sizes = merged.index.to_numpy(np.float64)
        times = merged.to_numpy(np.float64)
    keep = ~glitches(times)
    sizes, times = sizes[keep], times[keep]
    if len(sizes) < 2:
        raise CbsimError("an all-reduce curve needs at least two message sizes")
    smooth = np.exp(_isotonic(np.log(times)))
    smooth = np.maximum.accumulate(smooth)
    return CommFit(
        sizes_bytes=[float(s) for s in sizes],
        latency_s=[float(t) for t in smooth],
        bus_bandwidth=_tail_rate(sizes, smooth),
    )


# --------------------------------------------------------------------------- aiconfigurator NCCL


def _half_sweep(group: pd.DataFrame) -> pd.DataFrame:
    """The fp16 sweep of one GPU count's all-reduce rows (see the module docstring)."""
    for column in ("dtype", "nccl_dtype"):
        if column in group.columns:
            return group[group[column].astype(str).str.lower().isin(HALF_DTYPES)]
    elements = group["message_elements"].to_numpy(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], np.diff(elements) <= 0]))
    sweeps = [group.iloc[a:b] for a, b in zip(starts, [*starts[1:], len(group)], strict=True)]
    if len(sweeps) == 1:
        return sweeps[0]

    # at an element count every sweep measured, the half sweep (twice the bytes) is the slowest
    def slowest_at_common_size(sweep: pd.DataFrame) -> float:
        common = set.intersection(*(set(s["message_elements"].tolist()) for s in sweeps))
        size = max(common) if common else int(sweep["message_elements"].max())
        rows = sweep[sweep["message_elements"] == size]
        return float(rows["latency_s"].median()) if len(rows) else 0.0

    return max(sweeps, key=slowest_at_common_size)


def allreduce_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The fp16 all-reduce measurements of an NCCL table: num_gpus, size_bytes, latency_s."""
    return collective_rows(table, ALLREDUCE_OP)


def alltoall_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The fp16 all-to-all measurements of an NCCL table (``size_bytes``: what each GPU sends in
    all, split evenly over the group, nccl-tests' convention): num_gpus, size_bytes, latency_s."""
    return collective_rows(table, ALLTOALL_OP)


def fit_alltoall(table: pd.DataFrame) -> dict[str, CommFit]:
    """All-to-all curves per GPU count from an NCCL table (the expert dispatch and combine of
    attention data parallelism with expert parallelism; :mod:`cbsim.cost.roofline`)."""
    return fit_allreduce_rows(alltoall_rows(table))


def collective_rows(table: pd.DataFrame, op: str) -> pd.DataFrame:
    """The fp16 measurements of one collective of an NCCL table: num_gpus, size_bytes,
    latency_s."""
    rows = table[table["op"].astype(str) == op]
    if rows.empty:
        raise CbsimError(f"the nccl table has no {op} rows")
    parts = []
    for num_gpus, group in by_count(rows, "num_gpus"):
        half = _half_sweep(group)
        parts.append(
            pd.DataFrame(
                {
                    "num_gpus": num_gpus,
                    "size_bytes": half["message_elements"].to_numpy(np.float64) * FP16_BYTES,
                    "latency_s": half["latency_s"].to_numpy(np.float64),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def custom_allreduce_rows(table: pd.DataFrame) -> pd.DataFrame:
    """An engine's own all-reduce measurements (``custom_allreduce`` table: 16-bit elements) as
    num_gpus, size_bytes, latency_s."""
    return pd.DataFrame(
        {
            "num_gpus": table["num_gpus"].to_numpy(np.int64),
            "size_bytes": table["message_elements"].to_numpy(np.float64) * FP16_BYTES,
            "latency_s": table["latency_s"].to_numpy(np.float64),
        }
    )


def engine_allreduce_rows(custom: pd.DataFrame, nccl: pd.DataFrame | None) -> pd.DataFrame:
    """The all-reduce a serving engine runs: its own kernel (``custom``, a ``custom_allreduce``
    table) at every message size up to the largest that table measured for a GPU count, NCCL
    (``nccl``, an NCCL table) beyond it and for GPU counts the custom table lacks. (Below the
    smallest custom size the curve stays at its first point: a one-shot kernel does not get slower
    for a smaller message, while NCCL's small messages cost several times more.)

    Columns: num_gpus, size_bytes, latency_s, source ("custom" or "nccl").
    """
    own = custom_allreduce_rows(custom).assign(source="custom")
    if nccl is None:
        return own
    fallback = allreduce_rows(nccl).assign(source="nccl")
    parts = [own]
    for num_gpus, group in by_count(fallback, "num_gpus"):
        measured = own[own["num_gpus"] == num_gpus]["size_bytes"]
        if measured.empty:
            parts.append(group)
            continue
        parts.append(group[group["size_bytes"] > measured.max()])
    return (
        pd.concat(parts, ignore_index=True)
        .sort_values(["num_gpus", "size_bytes"], kind="stable")
        .reset_index(drop=True)
    )


def fit_allreduce_rows(rows: pd.DataFrame) -> dict[str, CommFit]:
    """All-reduce curves per GPU count (keys "2", "4", "8") from num_gpus, size_bytes, latency_s
    rows (:func:`allreduce_rows`, :func:`engine_allreduce_rows`)."""
    return {
        str(num_gpus): fit_comm_curve(
            group["size_bytes"].to_numpy(np.float64), group["latency_s"].to_numpy(np.float64)
        )
        for num_gpus, group in by_count(rows, "num_gpus")
    }


def fit_allreduce(table: pd.DataFrame, gpu: str) -> dict[str, CommFit]:
    """All-reduce curves per GPU count (keys "2", "4", "8") from an NCCL table of ``gpu``."""
    get_gpu(gpu)  # an unknown GPU is an error here, not a silently mislabelled profile
    return fit_allreduce_rows(allreduce_rows(table))


def holdout_sizes(table: pd.DataFrame) -> pd.DataFrame:
    """Leave-one-size-out error: each interior message size, predicted from a curve fitted
    without it (so interpolated between its neighbours), against its raw measurement.

    Columns: num_gpus, size_bytes, measured_s, predicted_s, ape.
    """
    return holdout_rows(allreduce_rows(table))


def holdout_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`holdout_sizes` on num_gpus, size_bytes, latency_s rows."""
    out: list[dict[str, float]] = []
    for num_gpus, group in by_count(rows, "num_gpus"):
        merged = group.groupby("size_bytes", sort=True)["latency_s"].median()
        sizes = merged.index.to_numpy(np.float64)
        times = merged.to_numpy(np.float64)
        for i in range(1, len(sizes) - 1):
            keep = np.arange(len(sizes)) != i
            fit = fit_comm_curve(sizes[keep], times[keep])
            predicted = fit(float(sizes[i]))
            out.append(
                {
                    "num_gpus": float(num_gpus),
                    "size_bytes": float(sizes[i]),
                    "measured_s": float(times[i]),
                    "predicted_s": predicted,
                    "ape": abs(predicted / float(times[i]) - 1.0),
                }
            )
    frame = pd.DataFrame(out)
    frame["num_gpus"] = frame["num_gpus"].astype(int)
    return frame


def error_summary(frame: pd.DataFrame, by: str = "num_gpus") -> pd.DataFrame:
    """Median and P90 of the ``ape`` column (fractions) and the point count, per ``by``."""
    return (
        frame.groupby(by, sort=True)["ape"]
        .agg(
            median_ape="median",
            p90_ape=lambda a: float(np.percentile(a, 90)),
            points="size",
        )
        .reset_index()
    )


# --------------------------------------------------------------------------- Vidur network


def fit_vidur_allreduce(node: str, *, bins_per_octave: float = 2.0) -> dict[str, CommFit]:
    """All-reduce curves per GPU count from Vidur's network profile of ``node`` (``h100_dgx``...).

    Vidur sweeps sizes densely and its small-message timings are bimodal, so sizes are merged into
    half-octave bins (median) before the monotone fit.
    """
    frame = vidur_network(node)
    return {
        str(workers): fit_comm_curve(
            group["size_bytes"].to_numpy(np.float64),
            group["latency_ms"].to_numpy(np.float64) / 1e3,
            bins_per_octave=bins_per_octave,
        )
        for workers, group in by_count(frame, "num_workers")
    }


def compare_vidur_network(gpu: str, table: pd.DataFrame, node: str | None = None) -> pd.DataFrame:
    """Vidur's measured all-reduce times against the curve fitted to ``table`` (AI Configurator's
    NCCL table of ``gpu``) at Vidur's sizes inside the fitted range, for GPU counts both have.

    Columns: num_gpus, size_bytes, vidur_s, fitted_s, ratio (vidur / fitted), ape.
    """
    node = node or VIDUR_NODES.get(gpu)
    if node is None:
        raise CbsimError(f"no Vidur network profile for {gpu}", field="gpu")
    fits = fit_allreduce(table, gpu)
    vidur = vidur_network(node)
    parts = []
    for workers, group in by_count(vidur, "num_workers"):
        fit = fits.get(str(workers))
        if fit is None:
            continue
        sizes = group["size_bytes"].to_numpy(np.float64)
        inside = (sizes >= fit.sizes_bytes[0]) & (sizes <= fit.sizes_bytes[-1])
        measured = group["latency_ms"].to_numpy(np.float64)[inside] / 1e3
        predicted = np.array([fit(float(s)) for s in sizes[inside]])
        parts.append(
            pd.DataFrame(
                {
                    "num_gpus": workers,
                    "size_bytes": sizes[inside],
                    "vidur_s": measured,
                    "fitted_s": predicted,
                    "ratio": measured / predicted,
                    "ape": np.abs(measured / predicted - 1.0),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


SIZE_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("<64KiB", 0.0, 2.0**16),
    ("64KiB-1MiB", 2.0**16, 2.0**20),
    ("1-16MiB", 2.0**20, 2.0**24),
    (">=16MiB", 2.0**24, float("inf")),
)


def disagreement_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per GPU count and message-size class (latency-bound small messages to bandwidth-bound
    large ones; Vidur's sweep is linear in bytes, so an overall median would only speak for the
    large sizes): median ratio, median and P90 APE of a :func:`compare_vidur_network` frame."""
    rows = []
    for num_gpus, group in by_count(frame, "num_gpus"):
        for label, low, high in SIZE_CLASSES:
            part = group[(group["size_bytes"] >= low) & (group["size_bytes"] < high)]
            if part.empty:
                continue
            rows.append(
                {
                    "num_gpus": num_gpus,
                    "sizes": label,
                    "median_ratio": float(part["ratio"].median()),
                    "median_ape": float(part["ape"].median()),
                    "p90_ape": float(np.percentile(part["ape"], 90)),
                    "points": len(part),
                }
            )
    return pd.DataFrame(rows)
