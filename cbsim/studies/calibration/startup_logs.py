"""KV-cache capacity against published engine start-up logs.

Every serving engine prints how many tokens its KV cache holds when it starts (vLLM ``GPU KV
cache size: N tokens`` or, V0, ``# GPU blocks: B``; SGLang ``max_total_num_tokens=N``;
TensorRT-LLM ``Allocated X GiB for max tokens in paged KV cache (N)``). Users publish these
lines in issues, READMEs and committed logs, with the model, GPU, layout, flags and release
beside them: ``cbsim/catalog/data/validation/kv_startup_logs.csv`` holds those collected for cbsim, one
row per engine start, with its source, the line as printed and, for the rows not used, why
(a multimodal model, LoRA, a GPU shared with another process, an unknown release...).

:func:`predict` rebuilds each included row as a scenario (``cluster.engine: ENGINE@RELEASE``,
the printed flags as the user set them, the engine's defaults otherwise) and asks cbsim's
memory rule (:mod:`cbsim.cost.engine_memory`) for the same figure; :func:`error_table` gives the %
error per row and :func:`summary` the median, P90 and worst by engine, GPU and layout.

V0 of vLLM sizes its profiling run by ``max_num_batched_tokens``, whose default there is
``max(max_model_len, 2048)`` (512 with chunked prefill, which V0 turns on above 32,768 tokens of
context); rows without the flag get that default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.cost.engine_version import parse_release
from cbsim.run.loading import load_scenario
from cbsim.schema.replica_memory import replica_memory
from cbsim.studies.calibration.data import shipped_root

TABLE = "kv_startup_logs.csv"
V0_CHUNKED_ABOVE = 32_768


def startup_logs() -> pd.DataFrame:
    """The shipped table of published start-up logs (every row, included or not)."""
    path = shipped_root().parent / "validation" / TABLE
    frame = pd.read_csv(path, keep_default_na=False)
    frame["included"] = frame["included"].astype(str).str.lower() == "true"
    return frame


def _number(value: Any) -> float | None:
    if value in ("", None):
        return None
    return float(value)


def _is_v0(row: Mapping[str, Any]) -> bool:
    if row["engine"] == "vllm-v0":
        return True
    if row["engine"] != "vllm" or not row["version"]:
        return False
    return parse_release(str(row["version"])) < (0, 8, 0, 0)


def scenario_data(row: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario of one logged engine start: its model, GPU, layout, precision, release and
    the flags its user set."""
    engine = str(row["engine"])
    if row["version"]:
        engine = f"{engine}@{row['version']}"
    cluster: dict[str, Any] = {
        "model": row["model"],
        "gpu": row["gpu"],
        "tp": int(row["tp"]),
        "pp": int(row["pp"]),
        "dp": int(row["dp"]),
        "dtype": row["dtype"] or "bf16",
        "engine": engine,
    }
    if row["kv_dtype"]:
        cluster["kv_dtype"] = row["kv_dtype"]
    flag = _number(row["memory_flag"])
    if flag is not None:
        cluster["gpu_memory_utilization"] = flag
    context = _number(row["max_model_len"])
    if context is not None:
        cluster["max_model_len"] = int(context)
    scheduler: dict[str, Any] = {}
    budget = _number(row["max_num_batched_tokens"])
    if budget is None and _is_v0(row) and context is not None:
        budget = 512 if context > V0_CHUNKED_ABOVE else max(context, 2048)
    if budget is not None:
        scheduler["max_batched_tokens"] = int(budget)
    seqs = _number(row["max_num_seqs"])
    if seqs is not None:
        scheduler["max_batch_size"] = int(seqs)
    block = _number(row["block_size"])
    if block is not None:
        scheduler["block_size"] = int(block)
    return {
        "name": f"log-{row['id']}",
        "workload": {
            "num_requests": 1,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 16},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": cluster,
        "scheduler": scheduler,
    }


def predict(row: Mapping[str, Any], terms: Mapping[str, float] | None = None) -> int:
    """The KV-cache tokens cbsim's rule gives the logged engine start (one attention rank's,
    as the engine prints it); ``terms`` replace the vLLM V1 rule's fitted terms."""
    scenario = load_scenario(scenario_data(row))
    rule = load_engine_profile(scenario.cluster.engine).memory
    if terms and rule.kind == "vllm":
        rule = rule.model_copy(update=dict(terms))
    return replica_memory(scenario, rule).rank_tokens


def error_table(
    frame: pd.DataFrame | None = None, terms: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """Every included row with cbsim's prediction and its signed % error (positive: cbsim's
    cache larger), or why it cannot be expressed."""
    frame = startup_logs() if frame is None else frame
    rows = []
    for record in frame[frame["included"]].to_dict("records"):
        row = {str(k): v for k, v in record.items()}
        out = {k: row[k] for k in ("id", "engine", "version", "model", "gpu", "tp", "pp", "dtype")}
        out["kv_tokens"] = int(row["kv_tokens"])
        try:
            predicted = predict(row, terms)
        except CbsimError as err:
            out.update(predicted=np.nan, error_pct=np.nan, problem=err.message)
        else:
            error = 100.0 * (predicted / out["kv_tokens"] - 1.0)
            out.update(predicted=predicted, error_pct=error, problem="")
        rows.append(out)
    return pd.DataFrame(rows)


def summary(errors: pd.DataFrame) -> dict[str, float]:
    """Median, P90 and largest absolute % error over the rows cbsim expresses."""
    values = errors["error_pct"].dropna().abs().to_numpy()
    if not values.size:
        return {"rows": 0.0}
    return {
        "rows": float(values.size),
        "median_abs_pct": float(np.median(values)),
        "p90_abs_pct": float(np.percentile(values, 90)),
        "max_abs_pct": float(values.max()),
    }


# --------------------------------------------------------------------------- fitted terms

# vLLM V1's profiling-run quantities as published logs print them (`Memory profiling takes ...
# torch peak memory increase: X; non-torch forward increase memory: Y`, `Free memory on device
# ... peak activation`); the source of each (the table's ``source`` grouped by repository or
# issue) lets every term be re-derived without the logs it is judged on.
PLANNER = "llm-d-incubation/llm-d-planner"
SAMPLER_PEAKS: tuple[tuple[str, str, int, int, float], ...] = (
    # (source, model, max_num_batched_tokens, rows = min(max_num_seqs, tokens), torch peak GiB)
    (PLANNER, "llama-3.1-8b", 8192, 1024, 1.89),
    (PLANNER, "qwen2.5-7b", 8192, 1024, 2.21),
    (PLANNER, "qwen1.5-moe-a2.7b", 8192, 1024, 2.47),
    (PLANNER, "mistral-small-24b", 8192, 1024, 2.18),
    (PLANNER, "llama-3.3-70b", 8192, 1024, 1.97),
    (PLANNER, "gpt-oss-20b", 8192, 1024, 2.87),
    ("file 21240355802", "llama-3.2-1b", 2048, 256, 0.45),
)
NON_TORCH_GROWTH: tuple[tuple[str, float], ...] = (
    # (source, GiB that grew outside PyTorch during the profiling run on one GPU, vLLM 0.11+)
    (PLANNER, 0.25),
    (PLANNER, 0.24),
    (PLANNER, 0.26),
    ("file 70682754770", 0.27),  # vLLM 0.31: 15.26 GiB consumed less 14.99 of weights
)
HOPPER_COMM_GROWTH: tuple[tuple[str, float], ...] = (
    # (source, GiB more with tensor parallelism over NVLink on H100)
    (PLANNER, 2.10),
    (PLANNER, 2.21),
    (PLANNER, 2.07),
)


def source_group(source: str) -> str:
    """The repository, issue or stored file a log came from (logs of one sweep share it)."""
    text = str(source)
    if text.startswith("https://github.com/"):
        return "/".join(text.removeprefix("https://github.com/").split("/")[:4]).split("#")[0]
    if "file id" in text:
        return "file " + text.split("file id", 1)[1].split()[0].strip(";,)")
    if text.startswith("https://"):
        return text.removeprefix("https://").split("#")[0]
    return text.split(":", 1)[0]


def _per_source_median(observations: list[tuple[str, float]], without: str | None) -> float:
    by_source: dict[str, list[float]] = {}
    for source, value in observations:
        if source != without:
            by_source.setdefault(source, []).append(value)
    if not by_source:
        return float("nan")
    return float(np.median([np.median(values) for values in by_source.values()]))


def fitted_terms(without: str | None = None) -> dict[str, float]:
    """The vLLM memory rule's fitted terms, each the median over sources of its published
    values (a source's own median first), leaving out the source ``without``."""
    from cbsim.catalog.models import get_model

    sampler = []
    for source, name, tokens, rows, peak_gib in SAMPLER_PEAKS:
        model = get_model(name)
        hidden = tokens * model.hidden_size * 2
        sampler.append((source, (peak_gib * 2**30 - hidden) / (rows * model.vocab_size)))
    return {
        "sampler_bytes_per_logit": _per_source_median(sampler, without),
        "non_torch_gib": _per_source_median(list(NON_TORCH_GROWTH), without),
        "comm_gib": _per_source_median(list(HOPPER_COMM_GROWTH), without),
    }


def leave_one_source_out(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`error_table` with the vLLM rule's fitted terms re-derived, for each row, without
    the logs of that row's source (a term no other source measures is kept, and the row
    flagged ``sole_source``)."""
    frame = startup_logs() if frame is None else frame
    frame = frame.assign(group=frame["source"].map(source_group))
    shipped = fitted_terms()
    rows = []
    for group, part in frame[frame["included"]].groupby("group", sort=False):
        terms = fitted_terms(without=str(group))
        sole = [k for k, v in terms.items() if not np.isfinite(v)]
        terms = {k: (shipped[k] if not np.isfinite(v) else v) for k, v in terms.items()}
        table = error_table(part, terms)
        table["source_group"] = group
        table["sole_source"] = ", ".join(sole)
        rows.append(table)
    return pd.concat(rows, ignore_index=True)
