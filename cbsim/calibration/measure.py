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
:func:`cbsim.calibration.data.load_table` (``data_dir=DIR``).

Timing: warm-up calls, then the median of ``repeats`` timed runs. On a GPU (``--timer graph``,
the default) a run replays a CUDA graph of up to eight independent instances of the kernel, each
with its own inputs and weights, back to back — as serving engines replay their forward passes
and as AI Configurator's collectors time the kernels cbsim ships — after an L2 flush, and counts
the replay's time over the instances; ``--timer events`` times one call between CUDA events
instead (launch latency included). ``time.perf_counter`` on a CPU. A grid point that runs out
of memory is skipped and listed in ``meta.json``.

PyTorch is optional (``pip install "cbsim[measure]"``, torch >= 2.5 for ``enable_gqa``) and
imported only when measuring. Everything a user can get wrong — no torch, no CUDA, a bad model,
an output path holding other files — raises :class:`~cbsim.errors.CbsimError`.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pandas as pd

from cbsim import outputs
from cbsim.errors import CbsimError, UserError
from cbsim.models import ModelShape, get_model

if TYPE_CHECKING:  # torch is optional: mypy sees it only where it is installed
    from torch import Tensor  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "DEFAULT_REPEATS",
    "DEFAULT_WARMUP",
    "DTYPES",
    "GRIDS",
    "OUTPUT_FILES",
    "IterationBatch",
    "MeasureGrid",
    "default_grid",
    "measure",
    "measure_command",
]

INSTALL_HINT = 'pip install "cbsim[measure]"'
DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32")
GRIDS: tuple[str, ...] = ("full", "quick")
TABLES: tuple[str, ...] = ("gemm", "decode_attention", "prefill_attention", "iterations")
OUTPUT_FILES: frozenset[str] = frozenset({*(f"{t}.parquet" for t in TABLES), "meta.json"})
MEASUREMENTS = outputs.OutputKind(
    name="measurements",
    description="kernel measurements",
    entries=OUTPUT_FILES,
    required=frozenset({"meta.json"}),
)
"""The folder ``cbsim calibrate measure`` writes: replaced as a whole (see :mod:`cbsim.outputs`)."""
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
TIMERS: tuple[str, ...] = ("graph", "events")
GRAPH_INSTANCES = 8
"""Most independent instances of a kernel captured back to back in one timed CUDA graph."""
_GRAPH_BUDGET_BYTES = 2 * 2**30
KERNEL = "torch_sdpa"
# Smallest latency written: a CUDA event pair resolves about 0.5 µs and a table must be positive.
_MIN_LATENCY_MS = 1e-4
# Bytes written between timed CUDA calls so that weights do not stay in L2 (50 MB on H100).
_L2_FLUSH_BYTES = 256 * 2**20

Log = Callable[[str], None]


# --------------------------------------------------------------------------- grids


@dataclass(frozen=True, slots=True)
class IterationBatch:
    """A mixed batch for a whole-layer timing: prefills of these lengths plus ``decodes``
    requests of one new token each over ``context`` cached tokens."""

    prefill_lengths: tuple[int, ...] = ()
    decodes: int = 0
    context: int = 0

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_lengths)

    @property
    def batch_size(self) -> int:
        return len(self.prefill_lengths) + self.decodes


@dataclass(frozen=True, slots=True)
class MeasureGrid:
    """What to time. ``*_max_tokens`` caps batch × length so the cache fits in memory."""

    name: str
    gemm_m: tuple[int, ...]
    decode_batch: tuple[int, ...]
    decode_context: tuple[int, ...]
    decode_max_tokens: int
    prefill_batch: tuple[int, ...]
    prefill_length: tuple[int, ...]
    prefill_max_tokens: int
    iteration_batches: tuple[IterationBatch, ...]
    iteration_layers: int


def _pow2(low: int, high: int) -> tuple[int, ...]:
    return tuple(2**e for e in range(low.bit_length() - 1, high.bit_length()))


def default_grid(name: str, device_type: str) -> MeasureGrid:
    """The ``full`` or ``quick`` grid for a device type (``cuda`` or ``cpu``).

    ``quick`` is a handful of points per table (tests, smoke runs). ``full`` on a GPU covers m up
    to 8192 (vLLM's default token budget), decode contexts to 32k and prefills to 16k; on a CPU
    it stops far earlier (m ≤ 512, contexts ≤ 4096, prefills ≤ 1024).
    """
    if name == "quick":
        return MeasureGrid(
            name="quick",
            gemm_m=(1, 4, 16, 64),
            decode_batch=(1, 4),
            decode_context=(32, 128),
            decode_max_tokens=1 << 12,
            prefill_batch=(1, 2),
            prefill_length=(16, 64),
            prefill_max_tokens=1 << 12,
            iteration_batches=(
                IterationBatch(decodes=4, context=64),
                IterationBatch(prefill_lengths=(32,)),
                IterationBatch(prefill_lengths=(32,), decodes=4, context=64),
            ),
            iteration_layers=1,
        )
    if name != "full":
        raise CbsimError(f"unknown grid {name!r}; known: {', '.join(GRIDS)}", field="grid")
    if device_type == "cuda":
        return MeasureGrid(
            name="full",
            gemm_m=_pow2(1, 8192),
            decode_batch=_pow2(1, 256),
            decode_context=_pow2(128, 32768),
            decode_max_tokens=1 << 20,
            prefill_batch=_pow2(1, 16),
            prefill_length=_pow2(64, 16384),
            prefill_max_tokens=1 << 15,
            iteration_batches=(
                *(IterationBatch(decodes=b, context=1024) for b in (1, 8, 32, 128)),
                IterationBatch(decodes=64, context=4096),
                IterationBatch(prefill_lengths=(512,)),
                IterationBatch(prefill_lengths=(2048,)),
                IterationBatch(prefill_lengths=(512,), decodes=32, context=1024),
                IterationBatch(prefill_lengths=(2048,), decodes=64, context=2048),
                IterationBatch(prefill_lengths=(256, 256), decodes=128, context=1024),
            ),
            iteration_layers=4,
        )
    return MeasureGrid(
        name="full",
        gemm_m=_pow2(1, 512),
        decode_batch=_pow2(1, 32),
        decode_context=_pow2(128, 4096),
        decode_max_tokens=1 << 16,
        prefill_batch=_pow2(1, 4),
        prefill_length=_pow2(32, 1024),
        prefill_max_tokens=1 << 12,
        iteration_batches=(
            *(IterationBatch(decodes=b, context=256) for b in (1, 8, 32)),
            IterationBatch(prefill_lengths=(128,)),
            IterationBatch(prefill_lengths=(512,)),
            IterationBatch(prefill_lengths=(128,), decodes=8, context=256),
        ),
        iteration_layers=2,
    )


# --------------------------------------------------------------------------- torch set-up


def _import_torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise CbsimError(
            f"measuring needs PyTorch, which is not installed: {INSTALL_HINT}"
        ) from None
    return torch


def _resolve_device(torch: Any, device: str) -> Any:
    text = device.strip().lower()
    text = "cuda" if text == "gpu" else text
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cuda", "cpu"):
        raise CbsimError(f"unknown device {device!r}; use cuda, cuda:N or cpu", field="device")
    if dev.type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = torch.version.cuda or torch.version.hip
        how = f"CUDA {built}" if built else "no CUDA support"
        raise CbsimError(
            f"CUDA was requested but no GPU is available (torch {torch.__version__}, {how}); "
            "use --device cpu or a CUDA build of torch",
            field="device",
        )
    index = 0 if dev.index is None else int(dev.index)
    count = int(torch.cuda.device_count())
    if index >= count:
        raise CbsimError(f"no GPU {device!r}: {count} visible", field="device")
    return torch.device("cuda", index)


def _torch_dtype(torch: Any, dtype: str, device: Any) -> Any:
    if dtype not in DTYPES:
        raise CbsimError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}", field="dtype")
    if dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise CbsimError("this GPU does not support bf16; use --dtype fp16", field="dtype")
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]


def _device_name(torch: Any, device: Any) -> str:
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# --------------------------------------------------------------------------- timing


class _Timer:
    """Median milliseconds of one call of a kernel, from ``repeats`` timed runs after ``warmup``
    untimed ones.

    ``mode`` (CUDA only) says how a run is timed:

    * ``graph`` (the default on a GPU): up to :data:`GRAPH_INSTANCES` independent instances of
      the call (each with its own inputs and weights, within :data:`_GRAPH_BUDGET_BYTES`) are
      captured back to back in one CUDA graph, the way serving engines replay their forward
      passes and the way AI Configurator's collectors time kernels; a timed run is one replay
      of the graph after an L2 flush, divided by the instance count. No launch gaps, no reuse
      of one instance's data in L2 by the next.
    * ``events``: one call between two CUDA events, the L2 flushed before it; launch latency
      and the event pair's own cost are part of each timing (noticeable below ~50 µs).

    On a CPU every run is one call timed with ``time.perf_counter``.
    """

    def __init__(
        self, torch: Any, device: Any, repeats: int, warmup: int, mode: str = "graph"
    ) -> None:
        self.torch = torch
        self.device = device
        self.repeats = repeats
        self.warmup = warmup
        self.cuda = device.type == "cuda"
        self.graph = self.cuda and mode == "graph"
        self.flush = (
            torch.empty(_L2_FLUSH_BYTES, dtype=torch.uint8, device=device) if self.cuda else None
        )
        self.most_instances = 0

    @property
    def name(self) -> str:
        """What ``meta.json`` calls this way of timing."""
        if not self.cuda:
            return "perf_counter"
        return "cuda_graph" if self.graph else "cuda_events"

    def __call__(self, make: Callable[[], Callable[[], object]]) -> float:
        """Time the call ``make()`` returns (``make`` builds a fresh instance on each call)."""
        if self.graph:
            return self._graph_time(make)
        fn = make()
        for _ in range(self.warmup):
            fn()
        if self.cuda:
            return self._event_time(fn, 1)
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return max(float(statistics.median(times)), _MIN_LATENCY_MS)

    def _event_time(self, run: Callable[[], object], per: int) -> float:
        """Median milliseconds of ``run`` between CUDA events, each after an L2 flush, over the
        ``per`` kernel calls it makes."""
        torch = self.torch
        torch.cuda.synchronize(self.device)
        pairs = []
        for _ in range(self.repeats):
            if self.flush is not None:
                self.flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(self.device)
        times = [float(s.elapsed_time(e)) / per for s, e in pairs]
        return max(float(statistics.median(times)), _MIN_LATENCY_MS)

    def _instances(self, make: Callable[[], Callable[[], object]]) -> list[Callable[[], object]]:
        """As many fresh instances as fit the graph budget (at least one, at most
        :data:`GRAPH_INSTANCES`), sized by the memory the first one took."""
        torch = self.torch
        before = int(torch.cuda.memory_allocated(self.device))
        fns = [make()]
        size = max(int(torch.cuda.memory_allocated(self.device)) - before, 1)
        count = max(1, min(GRAPH_INSTANCES, _GRAPH_BUDGET_BYTES // size))
        fns.extend(make() for _ in range(count - 1))
        return fns

    def _graph_time(self, make: Callable[[], Callable[[], object]]) -> float:
        torch = self.torch
        fns = self._instances(make)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # capture needs its kernels' first runs off the graph
            for _ in range(max(self.warmup, 1)):
                for fn in fns:
                    fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for fn in fns:
                fn()
        self.most_instances = max(self.most_instances, len(fns))
        try:
            graph.replay()
            return self._event_time(graph.replay, len(fns))
        finally:
            del graph


# --------------------------------------------------------------------------- the model


class _Layer:
    """One Llama-style decoder layer (pre-norm, fused QKV and gate+up, SwiGLU, no biases but
    Qwen2's QKV bias) with random weights."""

    def __init__(self, torch: Any, shape: ModelShape, device: Any, dtype: Any) -> None:
        nn = torch.nn
        h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
        inner = shape.intermediate_size
        opts: dict[str, Any] = {"device": device, "dtype": dtype}
        self.torch = torch
        self.shape = shape
        self.input_norm = torch.ones(h, **opts)
        self.qkv_proj = nn.Linear(h, q + 2 * kv, bias=shape.qkv_bias, **opts)
        self.o_proj = nn.Linear(q, h, bias=False, **opts)
        self.post_norm = torch.ones(h, **opts)
        self.gate_up_proj = nn.Linear(h, (2 if shape.gated_mlp else 1) * inner, bias=False, **opts)
        self.down_proj = nn.Linear(inner, h, bias=False, **opts)

    def linears(self) -> dict[str, Any]:
        return {
            "qkv_proj": self.qkv_proj,
            "o_proj": self.o_proj,
            "gate_up_proj": self.gate_up_proj,
            "down_proj": self.down_proj,
        }

    def forward(self, x: Tensor, rope: _Rope, attention: _Attention) -> Tensor:
        torch, s = self.torch, self.shape
        F = torch.nn.functional
        tokens = x.shape[0]
        qkv = self.qkv_proj(_rms_norm(torch, x, self.input_norm))
        q, k, v = qkv.split([s.q_dim, s.kv_dim, s.kv_dim], dim=-1)
        q = rope.apply(q.view(tokens, s.num_heads, s.head_dim))
        k = rope.apply(k.view(tokens, s.num_kv_heads, s.head_dim))
        v = v.view(tokens, s.num_kv_heads, s.head_dim)
        x = x + self.o_proj(attention(self, q, k, v))
        up = self.gate_up_proj(_rms_norm(torch, x, self.post_norm))
        if s.gated_mlp:
            gate, up = up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(up)
        out: Tensor = x + self.down_proj(act)
        return out


def _rms_norm(torch: Any, x: Tensor, weight: Tensor) -> Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    out: Tensor = (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype) * weight
    return out


class _Rope:
    """Rotary embedding (NeoX layout) read from a cos/sin cache at given positions."""

    def __init__(
        self, torch: Any, head_dim: int, positions: Tensor, device: Any, dtype: Any
    ) -> None:
        self.torch = torch
        half = head_dim // 2
        inv_freq = 1.0 / (
            10000.0 ** (torch.arange(0, half, device=device, dtype=torch.float32) / max(half, 1))
        )
        angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
        self.cos = angles.cos().to(dtype)[:, None, :]
        self.sin = angles.sin().to(dtype)[:, None, :]
        self.half = half

    def apply(self, x: Tensor) -> Tensor:
        half = self.half
        x1, x2 = x[..., :half], x[..., half : 2 * half]
        rotated = [x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin]
        if x.shape[-1] > 2 * half:  # odd head_dim: the last channel passes through
            rotated.append(x[..., 2 * half :])
        out: Tensor = self.torch.cat(rotated, dim=-1)
        return out


class _Attention:
    """Attention over a flattened mixed batch: causal self-attention for each prefill, then the
    decodes (one token each) over their KV cache, which this call appends to."""

    def __init__(
        self,
        torch: Any,
        shape: ModelShape,
        batch: IterationBatch,
        layers: Sequence[_Layer],
        device: Any,
        dtype: Any,
    ) -> None:
        self.torch = torch
        self.batch = batch
        self.shape = shape
        self.cache: dict[int, tuple[Tensor, Tensor]] = {}
        if batch.decodes:
            size = (batch.decodes, shape.num_kv_heads, batch.context + 1, shape.head_dim)
            for layer in layers:
                self.cache[id(layer)] = (
                    torch.randn(size, device=device, dtype=dtype),
                    torch.randn(size, device=device, dtype=dtype),
                )

    def __call__(self, layer: _Layer, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        torch, s, b = self.torch, self.shape, self.batch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        outputs = []
        start = 0
        for length in b.prefill_lengths:
            end = start + length
            out = sdpa(
                q[start:end].transpose(0, 1).unsqueeze(0),
                k[start:end].transpose(0, 1).unsqueeze(0),
                v[start:end].transpose(0, 1).unsqueeze(0),
                is_causal=True,
                enable_gqa=True,
            )
            outputs.append(out.squeeze(0).transpose(0, 1).reshape(length, s.q_dim))
            start = end
        if b.decodes:
            cache_k, cache_v = self.cache[id(layer)]
            cache_k[:, :, b.context] = k[start:]
            cache_v[:, :, b.context] = v[start:]
            out = sdpa(q[start:].unsqueeze(2), cache_k, cache_v, enable_gqa=True)
            outputs.append(out.reshape(b.decodes, s.q_dim))
        result: Tensor = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        return result


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
