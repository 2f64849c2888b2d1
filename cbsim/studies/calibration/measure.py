"""Measure kernel timings on this machine, in the calibration tables' schema.

``cbsim calibrate measure --model M --device cuda --out DIR`` builds a few decoder layers and the
LM head of a Llama-style model from its shape alone (random weights, nothing downloaded): RMSNorm,
a fused QKV projection (with bias for Qwen2), rotary embedding, grouped-query attention through
``torch.nn.functional.scaled_dot_product_attention`` (``enable_gqa``), the O projection and a
SwiGLU MLP with fused gate+up. It then times, over a grid of batch compositions:

* every linear layer (QKV, O, gate+up, down, LM head) at ``m`` = 1, 2, 4, ... tokens
  → ``gemm.parquet`` (``m, n, k, dtype, latency_ms`` + ``op``);
* decode attention over batch size × cached context, and causal prefill attention over batch
  size × input length, for the model's head configuration → ``decode_attention.parquet`` and
  ``prefill_attention.parquet`` (``batch_size, tokens, num_heads, num_kv_heads, head_dim,
  kv_dtype, latency_ms, kernel``);
* whole decoder-layer forwards on a few mixed batches (prefills plus decodes with a KV cache)
  → ``iterations.parquet`` (``num_prefill_tokens, num_decode_tokens, batch_size,
  decode_context_tokens, latency_ms, layers_timed``), extra information for checking a fit.

``meta.json`` records the device, torch version, dtype, model, grid and date. The directory is
written atomically (a temporary sibling renamed into place) and reads back with
:func:`cbsim.studies.calibration.data.load_table` (``data_dir=DIR``).

Timing: warm-up calls, then the median of ``repeats`` timed runs. On a GPU (``--timer graph``,
the default) a run replays a CUDA graph of up to eight independent instances of the kernel, each
with its own inputs and weights, back to back — as serving engines replay their forward passes
and as AI Configurator's collectors time the kernels cbsim ships — after an L2 flush, and counts
the replay's time over the instances; ``--timer events`` times one call between CUDA events
instead (launch latency included). ``time.perf_counter`` on a CPU. A grid point that runs out
of memory is skipped and listed in ``meta.json``.

PyTorch is optional (``pip install "cbsim[measure]"``, torch >= 2.5 for ``enable_gqa``) and
imported only when measuring. Everything a user can get wrong — no torch, no CUDA, a bad model,
an output path holding other files — raises :class:`~cbsim.common.errors.CbsimError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pandas as pd

from cbsim.catalog.models import ModelShape, get_model
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError, UserError
from cbsim.studies.calibration.measure_grid import GRIDS, IterationBatch, MeasureGrid, default_grid
from cbsim.studies.calibration.measure_layers import _Attention, _Layer, _Rope
from cbsim.studies.calibration.measure_timing import (
    DTYPES,
    GRAPH_INSTANCES,
    INSTALL_HINT,
    TIMERS,
    _device_name,
    _import_torch,
    _resolve_device,
    _Timer,
    _torch_dtype,
)

if TYPE_CHECKING:  # torch is optional: mypy sees it only where it is installed
    from torch import Tensor  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "DEFAULT_REPEATS",
    "DEFAULT_WARMUP",
    "DTYPES",
    "GRAPH_INSTANCES",
    "GRIDS",
    "INSTALL_HINT",
    "OUTPUT_FILES",
    "TIMERS",
    "IterationBatch",
    "MeasureGrid",
    "default_grid",
    "measure",
    "measure_command",
]

TABLES: tuple[str, ...] = ("gemm", "decode_attention", "prefill_attention", "iterations")
OUTPUT_FILES: frozenset[str] = frozenset({*(f"{t}.parquet" for t in TABLES), "meta.json"})
MEASUREMENTS = outputs.OutputKind(
    name="measurements",
    description="kernel measurements",
    entries=OUTPUT_FILES,
    required=frozenset({"meta.json"}),
)
"""The folder ``cbsim calibrate measure`` writes: replaced as a whole (see :mod:`cbsim.common.output_folders`)."""
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
KERNEL = "torch_sdpa"

Log = Callable[[str], None]


# --------------------------------------------------------------------------- measuring


class _Run:
    """One measurement session: the model pieces, the timer and the skipped points."""

    def __init__(
        self,
        torch: Any,
        shape: ModelShape,
        device: Any,
        dtype: Any,
        dtype_name: str,
        grid: MeasureGrid,
        timer: _Timer,
        log: Log,
    ) -> None:
        self.torch = torch
        self.shape = shape
        self.device = device
        self.dtype = dtype
        self.dtype_name = dtype_name
        self.grid = grid
        self.timer = timer
        self.log = log
        self.skipped: dict[str, list[dict[str, int]]] = {t: [] for t in TABLES}
        layers = max(1, min(grid.iteration_layers, shape.num_layers))
        self.layers = [_Layer(torch, shape, device, dtype) for _ in range(layers)]
        self.lm_head = torch.nn.Linear(
            shape.hidden_size, shape.vocab_size, bias=False, device=device, dtype=dtype
        )

    def _randn(self, *size: int) -> Tensor:
        out: Tensor = self.torch.randn(*size, device=self.device, dtype=self.dtype)
        return out

    def _try(
        self, table: str, point: dict[str, int], make: Callable[[], Callable[[], object]]
    ) -> float | None:
        """Time ``make()``'s function; None (and the point recorded) if it runs out of memory."""
        torch = self.torch
        try:
            return self.timer(make)
        except (torch.OutOfMemoryError, MemoryError):
            self.skipped[table].append(point)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return None

    def gemm(self) -> pd.DataFrame:
        s = self.shape
        ops = {**self.layers[0].linears(), "lm_head": self.lm_head}
        linear_fn = self.torch.nn.functional.linear
        rows: list[dict[str, Any]] = []
        for m in self.grid.gemm_m:
            for op, linear in ops.items():
                n, k = int(linear.out_features), int(linear.in_features)

                def make(linear: Any = linear, m: int = m, k: int = k) -> Callable[[], object]:
                    x = self._randn(m, k)
                    weight = self._randn(*linear.weight.shape)
                    bias = None if linear.bias is None else self._randn(*linear.bias.shape)
                    return lambda: linear_fn(x, weight, bias)

                ms = self._try("gemm", {"m": m, "n": n, "k": k}, make)
                if ms is not None:
                    rows.append(
                        {
                            "m": m,
                            "n": n,
                            "k": k,
                            "dtype": self.dtype_name,
                            "latency_ms": ms,
                            "op": op,
                        }
                    )
        self.log(
            f"gemm: {len(rows)} timings ({len(ops)} linear layers x {len(self.grid.gemm_m)} m) for {s.name}"
        )
        return pd.DataFrame(rows)

    def _attention_row(self, batch: int, tokens: int, ms: float) -> dict[str, Any]:
        s = self.shape
        return {
            "batch_size": batch,
            "tokens": tokens,
            "num_heads": s.num_heads,
            "num_kv_heads": s.num_kv_heads,
            "head_dim": s.head_dim,
            "kv_dtype": self.dtype_name,
            "latency_ms": ms,
            "kernel": KERNEL,
        }

    def decode_attention(self) -> pd.DataFrame:
        s, g = self.shape, self.grid
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        rows: list[dict[str, Any]] = []
        for batch in g.decode_batch:
            for context in g.decode_context:
                if batch * context > g.decode_max_tokens or context > s.max_position_embeddings:
                    continue

                def make(batch: int = batch, context: int = context) -> Callable[[], object]:
                    q = self._randn(batch, s.num_heads, 1, s.head_dim)
                    k = self._randn(batch, s.num_kv_heads, context, s.head_dim)
                    v = self._randn(batch, s.num_kv_heads, context, s.head_dim)
                    return lambda: sdpa(q, k, v, enable_gqa=True)

                point = {"batch_size": batch, "tokens": context}
                ms = self._try("decode_attention", point, make)
                if ms is not None:
                    rows.append(self._attention_row(batch, context, ms))
        self.log(f"decode attention: {len(rows)} timings")
        return pd.DataFrame(rows)

    def prefill_attention(self) -> pd.DataFrame:
        s, g = self.shape, self.grid
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        rows: list[dict[str, Any]] = []
        for batch in g.prefill_batch:
            for length in g.prefill_length:
                if batch * length > g.prefill_max_tokens or length > s.max_position_embeddings:
                    continue

                def make(batch: int = batch, length: int = length) -> Callable[[], object]:
                    q = self._randn(batch, s.num_heads, length, s.head_dim)
                    k = self._randn(batch, s.num_kv_heads, length, s.head_dim)
                    v = self._randn(batch, s.num_kv_heads, length, s.head_dim)
                    return lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)

                point = {"batch_size": batch, "tokens": length}
                ms = self._try("prefill_attention", point, make)
                if ms is not None:
                    rows.append(self._attention_row(batch, length, ms))
        self.log(f"prefill attention: {len(rows)} timings")
        return pd.DataFrame(rows)

    def iterations(self) -> pd.DataFrame:
        torch, s = self.torch, self.shape
        rows: list[dict[str, Any]] = []
        for batch in self.grid.iteration_batches:
            longest = max([*batch.prefill_lengths, batch.context + 1 if batch.decodes else 0])
            if batch.batch_size == 0 or longest > s.max_position_embeddings:
                continue

            def make(batch: IterationBatch = batch) -> Callable[[], object]:
                positions = torch.cat(
                    [
                        *(torch.arange(n, device=self.device) for n in batch.prefill_lengths),
                        torch.full((batch.decodes,), batch.context, device=self.device),
                    ]
                )
                rope = _Rope(torch, s.head_dim, positions, self.device, self.dtype)
                attention = _Attention(torch, s, batch, self.layers, self.device, self.dtype)
                x = self._randn(int(positions.shape[0]), s.hidden_size)

                def forward() -> object:
                    h = x
                    for layer in self.layers:
                        h = layer.forward(h, rope, attention)
                    return h

                return forward

            point = {
                "num_prefill_tokens": batch.num_prefill_tokens,
                "num_decode_tokens": batch.decodes,
                "decode_context_tokens": batch.context,
            }
            ms = self._try("iterations", point, make)
            if ms is not None:
                rows.append(
                    {
                        "num_prefill_tokens": batch.num_prefill_tokens,
                        "num_decode_tokens": batch.decodes,
                        "batch_size": batch.batch_size,
                        "decode_context_tokens": batch.context,
                        "latency_ms": ms,
                        "layers_timed": len(self.layers),
                    }
                )
        self.log(f"iterations: {len(rows)} timings of {len(self.layers)} layer(s)")
        return pd.DataFrame(rows)


# --------------------------------------------------------------------------- output


def _check_out(out: Path) -> None:
    """Refuse an ``out`` that writing would destroy: a file, or a folder of other things."""
    outputs.check_replaceable(out, MEASUREMENTS)


def _write(out: Path, tables: dict[str, pd.DataFrame], meta: dict[str, Any]) -> Path:
    """Write the tables and ``meta.json`` to a temporary sibling, then rename it to ``out``."""

    def fill(folder: Path) -> None:
        for name, frame in tables.items():
            frame.to_parquet(folder / f"{name}.parquet", index=False)
        (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    try:
        outputs.replace_folder(out, MEASUREMENTS, fill)
    except OSError as err:
        where = err.filename or out
        raise CbsimError(
            f"cannot write measurements: {err.strerror or err}", source=str(where)
        ) from None
    return out


# --------------------------------------------------------------------------- entry points


def measure(
    model: str | ModelShape,
    device: str,
    out: str | Path,
    *,
    dtype: str = "bf16",
    grid: str | MeasureGrid = "full",
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    threads: int | None = None,
    timer: str = "graph",
    log: Log | None = None,
) -> Path:
    """Time ``model``'s kernels on ``device`` and write the tables to the directory ``out``.

    Args:
        model: a catalog name, a Hugging Face ``config.json`` path, or a :class:`ModelShape`.
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        out: directory to create (or replace, if it holds only an earlier measurement).
        dtype: weights, activations and KV cache: ``bf16``, ``fp16`` or ``fp32`` (written in
            the ``dtype`` / ``kv_dtype`` columns as given).
        grid: ``full``, ``quick`` (a few points per table) or a :class:`MeasureGrid`.
        repeats: timed calls per point; the median is kept.
        warmup: untimed calls before them.
        threads: torch's intra-op CPU threads while measuring (restored after); None keeps
            the current number. On a busy CPU, 1 avoids stalls waiting on descheduled threads.
        timer: on a GPU, ``graph`` (independent instances replayed back to back from a CUDA
            graph, as engines run them) or ``events`` (one call between CUDA events, launch
            latency included); see :class:`_Timer`. Ignored on a CPU.
        log: called with one progress line per table (default: silent).

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        CbsimError: no torch, no CUDA, a bad model, dtype, grid or output path, or nothing
            measurable (every point out of memory).
    """
    say: Log = log if log is not None else (lambda _msg: None)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise CbsimError(f"must be an integer >= 1, got {repeats!r}", field="repeats")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise CbsimError(f"must be an integer >= 0, got {warmup!r}", field="warmup")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise CbsimError(f"must be an integer >= 1, got {threads!r}", field="threads")
    if dtype not in DTYPES:
        raise CbsimError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}", field="dtype")
    if timer not in TIMERS:
        raise CbsimError(f"unknown timer {timer!r}; known: {', '.join(TIMERS)}", field="timer")
    if isinstance(grid, str) and grid not in GRIDS:
        raise CbsimError(f"unknown grid {grid!r}; known: {', '.join(GRIDS)}", field="grid")
    if isinstance(model, ModelShape):
        shape = model
    else:
        try:
            shape = get_model(str(model))
        except CbsimError as err:  # a config file's errors already name the file and key
            raise (err if err.source else err.located(field="model")) from None
    if shape.is_moe or shape.is_mla:
        raise CbsimError(
            f"{shape.name}: measuring builds Llama-style dense layers; mixture-of-experts and "
            "latent-attention models are not measured yet",
            field="model",
        )
    out_path = Path(out).expanduser()
    _check_out(out_path)
    torch = _import_torch()
    dev = _resolve_device(torch, device)
    torch_dtype = _torch_dtype(torch, dtype, dev)
    chosen = grid if isinstance(grid, MeasureGrid) else default_grid(grid, dev.type)
    name = _device_name(torch, dev)
    say(f"measuring {shape.name} on {name} ({dev}, {dtype}, {chosen.name} grid)")
    started = datetime.now(UTC)
    previous_threads = int(torch.get_num_threads())
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        cpu_threads = int(torch.get_num_threads())
        with torch.inference_mode():
            torch.manual_seed(0)
            try:
                timing = _Timer(torch, dev, repeats, warmup, timer)
                run = _Run(torch, shape, dev, torch_dtype, dtype, chosen, timing, say)
            except (torch.OutOfMemoryError, MemoryError):
                raise CbsimError(
                    f"{min(chosen.iteration_layers, shape.num_layers)} layer(s) and the LM head "
                    f"of {shape.name} do not fit in {dev} memory",
                    field="model",
                ) from None
            try:
                tables = {
                    "gemm": run.gemm(),
                    "decode_attention": run.decode_attention(),
                    "prefill_attention": run.prefill_attention(),
                    "iterations": run.iterations(),
                }
            except RuntimeError as err:
                if not timing.graph:
                    raise
                raise CbsimError(
                    f"timing from a CUDA graph failed ({str(err).splitlines()[0]}); "
                    "measure with --timer events instead",
                    field="timer",
                ) from None
    finally:
        torch.set_num_threads(previous_threads)
    empty = [t for t, frame in tables.items() if frame.empty]
    if empty:
        raise CbsimError(
            f"nothing measured for {', '.join(empty)} (every point was skipped: out of memory "
            "or past the model's max_position_embeddings)",
            field="grid",
        )
    meta: dict[str, Any] = {
        "model": shape.name,
        "model_shape": asdict(shape),
        "device": str(dev),
        "device_type": dev.type,
        "device_name": name,
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda if dev.type == "cuda" else None,
        "cpu_threads": cpu_threads if dev.type == "cpu" else None,
        "dtype": dtype,
        "grid": chosen.name,
        "repeats": repeats,
        "warmup": warmup,
        "timer": timing.name,
        "graph_instances_max": timing.most_instances if timing.graph else None,
        "statistic": "median",
        "attention_kernel": KERNEL,
        "layers_timed": len(run.layers),
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3),
        "rows": {t: len(frame) for t, frame in tables.items()},
        "skipped": {t: points for t, points in run.skipped.items() if points},
    }
    written = _write(out_path, tables, meta)
    say(f"wrote {written}")
    return written


@click.command("measure")
@click.option("--model", "-m", required=True, help="Catalog model name or a config.json path.")
@click.option("--device", "-d", default="cuda", show_default=True, help="cuda, cuda:N or cpu.")
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(path_type=Path),
    help="Output directory (created; replaced only if it holds an earlier measurement).",
)
@click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True)
@click.option("--quick", is_flag=True, help="A tiny grid, for tests and smoke runs.")
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=DEFAULT_REPEATS,
    show_default=True,
    help="Timed calls per point (the median is kept).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=DEFAULT_WARMUP,
    show_default=True,
    help="Untimed calls before them.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="CPU threads for torch while measuring (default: torch's own choice).",
)
@click.option(
    "--timer",
    type=click.Choice(TIMERS),
    default="graph",
    show_default=True,
    help="GPU timing: graph replays independent instances back to back from a CUDA graph (as "
    "engines run them); events times one call, launch latency included.",
)
def measure_command(
    model: str,
    device: str,
    out: Path,
    dtype: str,
    quick: bool,
    repeats: int,
    warmup: int,
    threads: int | None,
    timer: str,
) -> None:
    """Time a model's GEMMs, attention and decoder layers on this machine (needs PyTorch).

    Writes gemm, decode_attention, prefill_attention and iterations tables (parquet) and
    meta.json to OUT, in the schema `cbsim calibrate` reads.
    """
    try:
        written = measure(
            model,
            device,
            out,
            dtype=dtype,
            grid="quick" if quick else "full",
            repeats=repeats,
            warmup=warmup,
            threads=threads,
            timer=timer,
            log=lambda line: click.echo(line, err=True),
        )
    except CbsimError as err:
        raise UserError(str(err)) from None
    click.echo(str(written))
