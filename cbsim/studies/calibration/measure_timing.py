"""Timing kernels on a device: PyTorch, the device, and the timer.

Warm-up calls, then the median of ``repeats`` timed runs. On a GPU (``graph`` timer, the default)
a run replays a CUDA graph of up to :data:`GRAPH_INSTANCES` independent instances of the kernel,
each with its own inputs and weights, back to back, after an L2 flush, and counts the replay's
time over the instances; the ``events`` timer times one call between CUDA events instead (launch
latency included); ``time.perf_counter`` on a CPU. PyTorch is optional and imported only here,
when measuring; a missing torch or device is a :class:`~cbsim.common.errors.CbsimError`.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from cbsim.common.errors import CbsimError

INSTALL_HINT = 'pip install "cbsim[measure]"'
DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32")
TIMERS: tuple[str, ...] = ("graph", "events")
GRAPH_INSTANCES = 8
"""Most independent instances of a kernel captured back to back in one timed CUDA graph."""
_GRAPH_BUDGET_BYTES = 2 * 2**30
# Smallest latency written: a CUDA event pair resolves about 0.5 µs and a table must be positive.
_MIN_LATENCY_MS = 1e-4
# Bytes written between timed CUDA calls so that weights do not stay in L2 (50 MB on H100).
_L2_FLUSH_BYTES = 256 * 2**20


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
