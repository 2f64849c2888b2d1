"""Request traces: when requests arrived and how many tokens each read and wrote.

A trace is a log of real LLM serving traffic reduced to what the simulator needs per request: its
arrival time, its prompt length (tokens to prefill) and its output length (tokens to decode).
Replaying one replaces the synthetic arrival process and length distributions of a workload, so the
simulated cluster sees real burstiness and real, heavy-tailed length mixes.

Shipped traces (load by name; stored as parquet under ``cbsim/catalog/data/traces/``):

``azure-conv-2023``
    19,366 requests to a conversational (chat) LLM service in Azure, about one hour on 2023-11-16
    (about 5.5 requests/s; mean prompt 1,155 tokens, mean output 211 tokens).
``azure-code-2023``
    8,819 requests to a code-completion LLM service in Azure over the same hour (about 2.6
    requests/s; long prompts, mean 2,048 tokens, short outputs, mean 28 tokens).

    Both are from the Azure LLM inference traces 2023, Azure/AzurePublicDataset, licensed
    CC-BY-4.0. Cite: Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase
    Splitting", ISCA 2024.
``mooncake-conversation``
    12,031 requests of the conversation workload of Moonshot AI's Kimi service, from the Mooncake
    FAST'25 release (kvcache-ai/Mooncake, licensed Apache-2.0; Qin et al., "Mooncake: Trading
    More Storage for Less Computation", USENIX FAST 2025). Besides the lengths it has
    ``prefix_hash_ids``: for each request, the ids of its prompt's 512-token blocks, where equal
    ids mean a shared prompt prefix (what a prefix cache could reuse).

The shipped files keep their source, licence and citation in the parquet key-value metadata, and
``cbsim/catalog/data/LICENSES.md`` (installed with the package) lists them with what was transformed.

User trace files are read and checked by :mod:`cbsim.workload.trace_files`.
"""

from __future__ import annotations

import functools
import os
from importlib.resources import files
from pathlib import Path

import pandas as pd

from cbsim.common.errors import CbsimError, canonical_name, did_you_mean
from cbsim.workload.trace_files import Where, load_trace_file, normalize, read_parquet

__all__ = ["TRACE_NAMES", "load_trace"]

TRACE_NAMES: tuple[str, ...] = ("azure-code-2023", "azure-conv-2023", "mooncake-conversation")


def load_trace(
    name_or_path: str | os.PathLike[str],
    *,
    source: str | None = None,
    field: str | None = None,
) -> pd.DataFrame:
    """Load a shipped trace by name, or a trace file by path.

    Returns one row per request, sorted by arrival, index ``0..n-1``, with columns ``arrival_s``
    (float64 seconds, 0 for the first request; NaN everywhere when the file has no arrival column),
    ``prompt_tokens`` and ``output_tokens`` (int64, positive), plus ``prefix_hash_ids`` (a tuple of
    ints per request) when the source has it. ``attrs["has_arrivals"]`` says whether arrivals were
    given, ``attrs["units_per_second"]`` in what unit the file's arrival column was read (1:
    seconds, 1000: milliseconds; None without one). The frame is the caller's own copy.

    ``source`` and ``field`` locate the reference in the caller's input (for example the scenario
    file and ``"workload.trace.path"``) and prefix every :class:`CbsimError` raised here.
    """
    key = os.fspath(name_or_path)
    shipped = key if key in TRACE_NAMES else canonical_name(key, TRACE_NAMES)
    if shipped is not None and (key in TRACE_NAMES or not Path(key).exists()):
        cached = _load_shipped(shipped)
        frame = cached.copy()
        frame.attrs = dict(cached.attrs)
        return frame
    path = Path(key)
    if not path.exists():
        where = f" (resolved to {path.resolve()})" if not path.is_absolute() else ""
        raise CbsimError(
            f"unknown trace {key!r}: not a shipped trace (shipped: {', '.join(TRACE_NAMES)}) "
            f"and the path does not exist{where}{did_you_mean(key, TRACE_NAMES)}",
            source=source,
            field=field,
        )
    return load_trace_file(path, Where(str(path), source, field))


@functools.lru_cache(maxsize=len(TRACE_NAMES))
def _load_shipped(name: str) -> pd.DataFrame:
    resource = files("cbsim.catalog") / "data" / "traces" / f"{name}.parquet"
    with resource.open("rb") as fh:
        raw = read_parquet(fh, Where(f"shipped trace {name!r}", None, None))
    return normalize(raw, Where(f"shipped trace {name!r}", None, None))
