"""Compiled cost arithmetic: a cost model's decode-step pricing as numbers a numba kernel can read.

The engine advances pure-decode stretches of a replica (with or without speculation) in one SimPy
event (:mod:`cbsim.engine.decode_run`, :mod:`cbsim.engine.speculative.fast_run`). Those kernels price thousands
of iterations each; calling back into the Python cost model per iteration would cost more than
everything else they do. So a :class:`CostModel` is *compiled* once into a :class:`CompiledCost`:

* the kernels that depend only on the batch's token count (the four linear layers, element-wise
  kernels, all-reduces and the LM head of a decode or verify batch, where every token is sampled)
  as a table indexed by token count, filled by the Python cost model itself, so the values are its
  own;
* the decode-attention fit (efficiencies, floor and the correction grid specialised to the model's
  head layout), evaluated by :func:`decode_attention` with the same float operations in the same
  order as :meth:`CostModel.attention_time`, so bit for bit the same seconds;
* the engine's step overhead as plain floats (:meth:`CostModel.step_time`'s arithmetic).

A stepped iteration (prefill chunks and decodes, one SimPy event each) is priced the same way in
one call (:func:`stepped_seconds`): the batch's non-attention kernels from the cost model's own
cache, the decode attention as above, and the prefill attention by its fit passed as two arrays
(:func:`prefill_attention`), so :meth:`CostModel.time_stats` makes one compiled call per iteration
instead of a dozen Python ones.

Local attention (a sliding window: ``CompiledCost.window``), latent attention (MLA modules,
a verify step's extra query tokens included) and a GPU priced through another GPU's kernel
ratios (``CompiledCost.transfer_at``) are priced by every kernel of a whole batch
(:func:`decode_seconds`, :func:`verify_seconds`, :func:`scaled_step_seconds`), but for
:func:`stepped_seconds`, which refuses the latter two (their stepped iterations are priced in
Python). A cost model that cannot be compiled (a correction over more than two features) gives
None, and callers fall back to the Python path. One whose batches split into shares (pipeline
micro-batches, attention data-parallel ranks: ``CompiledCost.split``) compiles for
:func:`decode_seconds` and :func:`stepped_seconds` alone, which price the largest share as the
cost model does (``CostModel.compiled_decode``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# attention modes
ROOFLINE = 0  # uncalibrated: max(compute, memory) + floor with the raw efficiencies
FIT_PLAIN = 1  # a fitted roofline without correction
FIT_GRID1 = 2  # with a correction over one feature (batch or context)
FIT_GRID2 = 3  # with a correction over both

# a transfer block (CompiledCost.transfer_at): the transfer GPU's attention peak and bandwidth,
# then each fit's fields in this order (GRID_AT: where its grid starts in CompiledCost.grid)
TRANSFER_PEAK, TRANSFER_BANDWIDTH, TRANSFER_ENGINE = range(3)
TF_MODE, TF_USES_BATCH, TF_FLOOR, TF_COMPUTE, TF_MEMORY, TF_AXIS0, TF_AXIS1, TF_STRIDE0 = range(8)
TF_GRID_AT, TF_GRID_SIZE = 8, 9
TRANSFER_FIT_FIELDS = 10
TRANSFER_REFERENCE = TRANSFER_ENGINE + TRANSFER_FIT_FIELDS

TABLE_CHUNK = 256
# rows of CompiledCost.tables
TOKEN, LINEAR, HEAD, EXTRA, LINEAR_FLOOR, HEAD_FLOOR = range(6)
TABLE_ROWS = 6


class CompiledCost(NamedTuple):
    """A cost model's decode pricing as plain numbers (see the module docstring).

    Its arrays are two, not one per table: a kernel that receives the tuple unpacks (and
    reference-counts) every array in it, per call, so fewer arrays make calls cheaper."""

    # tables[row, n] by token count n (rows TOKEN .. HEAD_FLOOR): TOKEN the non-attention kernels
    # of a decode batch of n tokens, split as LINEAR (the layers' GEMMs, norms and all-reduces at
    # n tokens) + HEAD (the LM head for n sampled positions), the same float; EXTRA a per-step
    # GEMM priced on top (an EAGLE head's fusion layer); LINEAR_FLOOR and HEAD_FLOOR the least
    # LINEAR / HEAD from n on (suffix minima): no step of n or more tokens costs less than these
    # in those kernels, what lets the goodput sweep stop early
    tables: FloatArray
    mode: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    kv_bytes: float
    act_bytes: float  # a query's and an output's element (2 bytes; 4 in an fp32 model)
    attn_peak: float
    bandwidth: float
    floor_s: float
    compute_eff: float
    memory_eff: float
    # the correction grid: axis 0 (grid[:axis0_size]), axis 1 (the next axis1_size), then the
    # values, row-major with stride0
    grid: FloatArray
    axis0_size: int
    axis1_size: int
    stride0: int
    uses_batch: bool  # a one-feature grid over the batch (else over the context)
    # step overhead: cpu, per request, per token, serial, serial per request, overlap, zero
    cpu_s: float
    cpu_per_request_s: float
    cpu_per_token_s: float
    serial_s: float
    serial_per_request_s: float
    overlap: bool
    overhead_zero: bool
    # the engine's CPU time per step never falls with more tokens (a non-negative per-token term)
    overhead_rises: bool
    # the batch's shares (data-parallel ranks or pipeline micro-batches; 1: none) and the
    # pipeline's stage factor (1.0 without stages); with shares only decode_seconds and
    # stepped_seconds price (the TOKEN row then the whole batch's non-attention kernels, the
    # other rows unfilled)
    split: int
    stage_factor: float
    # local attention (a sliding window or Llama 4's chunks): the window (0: none) and how many of
    # the layers read at most the last ``window`` tokens of each request
    window: int = 0
    window_layers: int = 0
    # latent attention (MLA: cbsim.cost.mla): one layer's whole module priced by the attention
    # fields above (then the MLA decode fit's), from its weights (parameters a GPU reads), query
    # heads, the latent's widths ((r + d_rope + r) and (r + d_rope)), the bytes of a weight and
    # of a cached value, and the projections' peak; every kernel but stepped_seconds prices it
    mla: bool = False
    mla_weights: float = 0.0
    mla_heads: float = 0.0
    mla_attention_width: int = 0
    mla_cache_width: int = 0
    mla_weight_bytes: float = 0.0
    mla_kv_bytes: float = 0.0
    mla_peak: float = 0.0
    # a GPU priced through another GPU's kernels (``OpPricing._transfer``): where in ``grid`` the
    # transfer block starts (-1: none): that GPU's attention peak and bandwidth, then the
    # engine's and the reference's decode fits there (TRANSFER_FIT_FIELDS each, their grids
    # after them); every kernel but stepped_seconds prices it
    transfer_at: int = -1

    @property
    def size(self) -> int:
        """Token counts the tables cover: 0 .. size - 1."""
        return int(self.tables.shape[1])

    def _row(self, row: int) -> FloatArray:
        values: FloatArray = self.tables[row]
        return values

    @property
    def token_s(self) -> FloatArray:
        return self._row(TOKEN)

    @property
    def linear_s(self) -> FloatArray:
        return self._row(LINEAR)

    @property
    def head_s(self) -> FloatArray:
        return self._row(HEAD)

    @property
    def extra_s(self) -> FloatArray:
        return self._row(EXTRA)

    @property
    def linear_floor_s(self) -> FloatArray:
        return self._row(LINEAR_FLOOR)

    @property
    def head_floor_s(self) -> FloatArray:
        return self._row(HEAD_FLOOR)


@numba.njit(cache=True, inline="always")
def _log2_feature(value: float) -> float:
    return math.log2(value) if value > 1e-30 else -100.0


@numba.njit(cache=True)
def _cell(grid: FloatArray, lo: int, size: int, x: float) -> tuple[int, float]:
    """The cell of the axis ``grid[lo:lo + size]`` holding ``x`` (clamped to the axis's ends) and
    the weight of its upper edge. Called, not inlined: compiled once rather than typed again at
    each of its three calls (0.2 s less to compile; the same speed)."""
    top = size - 2
    # np.searchsorted(axis, x, side="right") - 1, written out (numba's takes a third of a second
    # to compile): the same comparisons, a NaN ``x`` ordered after every value as numpy orders it
    above, below = 0, size
    while above < below:
        middle = above + ((below - above) >> 1)
        if x != x or grid[lo + middle] <= x:
            above = middle + 1
        else:
            below = middle
    i = above - 1
    i = 0 if i < 0 else (top if i > top else i)
    low, high = grid[lo + i], grid[lo + i + 1]
    w = float((x - low) / (high - low))
    w = 0.0 if w < 0.0 else (1.0 if w > 1.0 else w)
    return i, w


@numba.njit(cache=True)
def _correction(
    mode: int,
    uses_batch: bool,
    grid: FloatArray,
    axis0_size: int,
    axis1_size: int,
    stride0: int,
    batch: float,
    per_request: float,
) -> float:
    """The correction grid (a :class:`CompiledCost`'s ``grid`` and its sizes) at (``batch``,
    ``per_request``), interpolated bilinearly in log2 of its features (given the grid, not the
    whole cost tuple: a call then costs less than its arithmetic)."""
    # axis 0 starts the grid: int(0), an int64, where numba's literal 0 would compile _cell twice
    axis0 = int(0)  # noqa: RUF046, UP018
    if mode == FIT_GRID1:
        i, w = _cell(grid, axis0, axis0_size, _log2_feature(batch if uses_batch else per_request))
        flat = axis0_size
        return float(0.0 + (1.0 - w) * grid[flat + i] + w * grid[flat + i + 1])
    i, w0 = _cell(grid, axis0, axis0_size, _log2_feature(batch))
    j, w1 = _cell(grid, axis0_size, axis1_size, _log2_feature(per_request))
    base = axis0_size + axis1_size + i * stride0 + j
    low, high = 1.0 - w0, w0
    return float(
        0.0
        + low * (1.0 - w1) * grid[base]
        + low * w1 * grid[base + 1]
        + high * (1.0 - w1) * grid[base + stride0]
        + high * w1 * grid[base + stride0 + 1]
    )


@numba.njit(cache=True, inline="always")
def attention_factor(c: CompiledCost, requests: int, context_tokens: int) -> float:
    """The calibrated correction of decode attention (a factor on the fitted roofline) for
    ``requests`` requests whose caches hold ``context_tokens`` tokens before the step; 1 when
    the fit has no grid. It does not depend on how many tokens each request adds, so one factor
    serves every candidate draft length of a batch."""
    return _grid_factor(
        c.mode,
        c.uses_batch,
        c.grid,
        c.axis0_size,
        c.axis1_size,
        c.stride0,
        requests,
        context_tokens,
    )


@numba.njit(cache=True, inline="always")
def _grid_factor(
    mode: int,
    uses_batch: bool,
    grid: FloatArray,
    axis0_size: int,
    axis1_size: int,
    stride0: int,
    requests: int,
    tokens: int,
) -> float:
    """A fit's correction grid as a factor for ``requests`` requests over ``tokens`` tokens in
    all (read per request, at least one of each); 1 for a fit without a grid."""
    if mode != FIT_GRID1 and mode != FIT_GRID2:
        return 1.0
    batch = requests if requests > 1 else 1
    per_request = tokens / batch
    per_request = per_request if per_request > 1.0 else 1.0
    return math.exp(
        _correction(mode, uses_batch, grid, axis0_size, axis1_size, stride0, batch, per_request)
    )


@numba.njit(cache=True, inline="always")
def scaled_decode_attention(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, factor: float
) -> float:
    """:func:`decode_attention` given its :func:`attention_factor` (not for a transfer GPU)."""
    return _decode_fit_seconds(c, tokens, kv_tokens, pairs, factor, 1.0)


@numba.njit(cache=True, inline="always")
def _decode_fit_seconds(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, factor: float, ratio: float
) -> float:
    """One layer's decode attention by the model's own fit on its own GPU, its correction
    ``factor`` and a transfer GPU's engine/reference ``ratio`` given."""
    return _attention_seconds(
        c,
        c.mode,
        c.floor_s,
        c.compute_eff,
        c.memory_eff,
        tokens,
        kv_tokens,
        pairs,
        factor,
        c.attn_peak,
        c.bandwidth,
        ratio,
    )


@numba.njit(cache=True, inline="always")
def _attention_seconds(
    c: CompiledCost,
    mode: int,
    floor_s: float,
    compute_eff: float,
    memory_eff: float,
    tokens: int,
    kv_tokens: int,
    pairs: float,
    factor: float,
    peak: float,
    bandwidth: float,
    ratio: float,
) -> float:
    """One layer's attention over a group by a fit (``mode``, its floor and efficiencies) and its
    correction ``factor``: :meth:`CostModel.attention_time`'s arithmetic, ``c`` giving the
    model's heads, on a GPU of attention ``peak`` and ``bandwidth``; a fitted time is scaled by
    a transfer GPU's engine/reference ``ratio`` (1.0: none, which leaves it as it is)."""
    if tokens <= 0:
        return 0.0
    flops = 4.0 * pairs * c.q_heads * c.head_dim
    bytes_moved = (
        kv_tokens * 2 * c.kv_heads * c.head_dim * c.kv_bytes
        + 2 * tokens * c.q_heads * c.head_dim * c.act_bytes
    )
    t_compute = flops / (peak * compute_eff)
    t_memory = bytes_moved / (bandwidth * memory_eff)
    if mode == ROOFLINE:
        return max(t_compute, t_memory) + floor_s
    fitted = floor_s + (t_compute if t_compute >= t_memory else t_memory)
    if mode != FIT_PLAIN:
        fitted = fitted * factor
    light = bytes_moved / bandwidth
    fitted = fitted * ratio
    return fitted if fitted > light else light


@numba.njit(cache=True)
def _transfer_attention(
    c: CompiledCost, at: int, tokens: int, kv_tokens: int, pairs: float, requests: int
) -> float:
    """One layer's decode attention by the transfer block's fit at ``at`` (the engine's or the
    reference's) on the transfer GPU: that bare cost model's ``attention_time``."""
    g = c.grid
    lo = int(g[at + TF_GRID_AT])
    mode = int(g[at + TF_MODE])
    factor = _grid_factor(
        mode,
        g[at + TF_USES_BATCH] != 0.0,
        g[lo : lo + int(g[at + TF_GRID_SIZE])],
        int(g[at + TF_AXIS0]),
        int(g[at + TF_AXIS1]),
        int(g[at + TF_STRIDE0]),
        requests,
        kv_tokens - tokens,
    )
    block = c.transfer_at
    return _attention_seconds(
        c,
        mode,
        g[at + TF_FLOOR],
        g[at + TF_COMPUTE],
        g[at + TF_MEMORY],
        tokens,
        kv_tokens,
        pairs,
        factor,
        g[block + TRANSFER_PEAK],
        g[block + TRANSFER_BANDWIDTH],
        1.0,
    )


@numba.njit(cache=True)
def decode_attention(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, requests: int
) -> float:
    """One layer's decode attention (:meth:`CostModel.attention_time` with ``decode=True``)."""
    if tokens <= 0:
        return 0.0
    return _scaled_layer(
        c, tokens, kv_tokens, pairs, requests, attention_factor(c, requests, kv_tokens - tokens)
    )


@numba.njit(cache=True)
def _scaled_layer(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, requests: int, factor: float
) -> float:
    """:func:`decode_attention` given its :func:`attention_factor`, also on a transfer GPU (its
    engine/reference ratio priced here). Called, not inlined: compiled once for its callers."""
    if tokens <= 0:
        return 0.0
    ratio = 1.0
    block = c.transfer_at
    if block >= 0 and c.mode != ROOFLINE:  # OpPricing.attention_time: a fitted time scaled
        ratio = _transfer_attention(
            c, block + TRANSFER_ENGINE, tokens, kv_tokens, pairs, requests
        ) / _transfer_attention(c, block + TRANSFER_REFERENCE, tokens, kv_tokens, pairs, requests)
    return _decode_fit_seconds(c, tokens, kv_tokens, pairs, factor, ratio)


# a prefill fit as prefill_attention reads it (compile_prefill): its fields in this order
FIT_MODE, FIT_USES_BATCH, FIT_FLOOR, FIT_COMPUTE, FIT_MEMORY, FIT_AXIS0, FIT_AXIS1, FIT_STRIDE0 = (
    range(8)
)


@numba.njit(cache=True)
def prefill_attention(
    c: CompiledCost,
    fit: FloatArray,
    grid: FloatArray,
    tokens: int,
    kv_tokens: int,
    pairs: float,
    requests: int,
) -> float:
    """One layer's prefill attention (:meth:`CostModel.attention_time` with ``decode=False``)
    by the prefill fit ``fit`` (fields ``FIT_MODE`` ..) and its correction ``grid``
    (:func:`cbsim.cost.roofline.compile_prefill`); the correction reads the new tokens per
    request where the decode one reads the cached context."""
    if tokens <= 0:
        return 0.0
    mode = int(fit[FIT_MODE])
    factor = _grid_factor(
        mode,
        fit[FIT_USES_BATCH] != 0.0,
        grid,
        int(fit[FIT_AXIS0]),
        int(fit[FIT_AXIS1]),
        int(fit[FIT_STRIDE0]),
        requests,
        tokens,
    )
    return _attention_seconds(
        c,
        mode,
        fit[FIT_FLOOR],
        fit[FIT_COMPUTE],
        fit[FIT_MEMORY],
        tokens,
        kv_tokens,
        pairs,
        factor,
        c.attn_peak,
        c.bandwidth,
        1.0,
    )


@numba.njit(cache=True, inline="always")
def step_seconds(c: CompiledCost, gpu_s: float, requests: int, tokens: int) -> float:
    """:meth:`CostModel.step_time`: the engine's CPU work added to ``gpu_s`` of kernels."""
    if c.overhead_zero:
        return gpu_s
    cpu = c.cpu_s + c.cpu_per_request_s * requests + c.cpu_per_token_s * tokens
    serial = c.serial_s + c.serial_per_request_s * requests
    if c.overlap:
        return (gpu_s if gpu_s > cpu else cpu) + serial
    return gpu_s + cpu + serial


@numba.njit(cache=True, inline="always")
def decode_seconds(c: CompiledCost, requests: int, kv_tokens: int) -> float:
    """:meth:`CostModel.decode_time`: ``requests`` single-token steps reading ``kv_tokens``."""
    if c.split > 1 or c.window > 0 or c.mla:
        return _shared_decode_seconds(c, requests, kv_tokens)
    gpu = c.tables[TOKEN, requests] + c.layers * decode_attention(
        c, requests, kv_tokens, float(kv_tokens), requests
    )
    return step_seconds(c, gpu, requests, requests)


@numba.njit(cache=True)
def _shared_decode_seconds(c: CompiledCost, requests: int, kv_tokens: int) -> float:
    """:func:`decode_seconds` of a batch split into ``c.split`` shares (ranks or micro-batches),
    each request whole in one, or of a model with local attention: the largest share's attention
    over every layer (``CostModel._attention_all_layers``) through every stage, and the engine's
    step for that share (``CostModel.step_time``)."""
    tokens, kv, pairs, group = _group_share(
        c.split, requests, kv_tokens, float(kv_tokens), requests
    )
    if c.mla:
        full = _mla_decode_module(c, tokens, kv, group)
    else:
        full = decode_attention(c, tokens, kv, pairs, group)
    local = full
    if c.window > 0:
        kv, pairs = _windowed(tokens, kv, pairs, group, c.window, True)
        local = decode_attention(c, tokens, kv, pairs, group)
    attention = _all_layers(c, full, local)
    gpu = c.tables[TOKEN, requests] + attention * c.stage_factor
    return step_seconds(c, gpu, -(-requests // c.split), _share(c.split, requests, requests))


@numba.njit(cache=True)
def _mla_decode_module(c: CompiledCost, tokens: int, kv_tokens: int, requests: int) -> float:
    """One layer's MLA module for ``requests`` decoding (or verifying) requests adding ``tokens``
    new tokens in all over ``kv_tokens`` keys/values: ``OpPricing.attention_time`` with
    ``decode=True``: the module at the requests' cached context and, for a verify step's extra
    query tokens, what their projections add (the cache is read once)."""
    if tokens <= 0:
        return 0.0
    whole = requests if requests > 1 else 1  # an int, as _grid_factor passes _correction one
    module = _mla_at_context(c, whole, kv_tokens - tokens)
    if tokens > whole:
        return _plus_extra_queries(c, tokens, module, _mla_module(c, whole, 1.0))
    return module


@numba.njit(cache=True, inline="always")
def _mla_at_context(c: CompiledCost, whole: int, context_tokens: int) -> float:
    """:func:`_mla_module` of ``whole`` requests whose caches hold ``context_tokens`` tokens in
    all (at least one each)."""
    per_request = context_tokens / float(whole)
    return _mla_module(c, whole, per_request if per_request >= 1.0 else 1.0)


@numba.njit(cache=True, inline="always")
def _plus_extra_queries(c: CompiledCost, tokens: int, module: float, at_one: float) -> float:
    """An MLA ``module`` of some requests plus what a verify step's ``tokens`` query tokens add
    beyond one per request: their projections (the cache is read once), the module of
    ``tokens`` one-token requests less that of the requests themselves at one cached token
    (``at_one``), if positive."""
    more = _mla_module(c, tokens, 1.0) - at_one
    return module + (more if more > 0.0 else 0.0)


@numba.njit(cache=True)
def _mla_module(c: CompiledCost, whole: int, per_request: float) -> float:
    """``MlaPricing.module_time`` with ``decode=True``: ``whole`` requests of one new token each
    over ``per_request`` (at least 1) cached tokens each (``mla_terms``' arithmetic in its order,
    then the decode fit or, uncalibrated, the raw roofline). Called, not inlined, from its several
    sites: a speculative run's kernels compile some 10 s sooner on a fresh install."""
    batch = float(whole)
    flops = (
        2.0 * batch * c.mla_weights
        + 2.0 * batch * c.mla_heads * (per_request + 1) * c.mla_attention_width
    )
    cache = batch * (per_request + 1) * c.mla_cache_width * c.mla_kv_bytes
    bytes_moved = c.mla_weights * c.mla_weight_bytes + cache
    t_compute = flops / (c.mla_peak * c.compute_eff)
    t_memory = bytes_moved / (c.bandwidth * c.memory_eff)
    if c.mode == ROOFLINE:
        return (t_compute if t_compute >= t_memory else t_memory) + c.floor_s
    fitted = c.floor_s + (t_compute if t_compute >= t_memory else t_memory)
    if c.mode == FIT_PLAIN:
        return fitted
    return fitted * math.exp(
        _correction(
            c.mode, c.uses_batch, c.grid, c.axis0_size, c.axis1_size, c.stride0, whole, per_request
        )
    )


@numba.njit(cache=True, inline="always")
def _all_layers(c: CompiledCost, full: float, local: float) -> float:
    """Every layer's attention from one full-attention layer's and one local layer's
    (``CostModel._attention_all_layers``' sum, before the stage factor)."""
    if c.window <= 0:
        return c.layers * full
    total = (c.layers - c.window_layers) * full
    total += c.window_layers * local
    return total


@numba.njit(cache=True, inline="always")
def _windowed(
    tokens: int, kv_tokens: int, pairs: float, requests: int, window: int, decode: bool
) -> tuple[int, float]:
    """``cbsim.cost.op_pricing.windowed``: a group's (keys/values read, query-key pairs) in a
    layer attending to at most the last ``window`` tokens."""
    batch = requests if requests > 1 else 1
    if decode:
        cached = (kv_tokens - tokens) / batch
        if cached <= window:
            return kv_tokens, pairs
        kv = batch * window + tokens
        return kv, (pairs * kv / kv_tokens if kv_tokens else pairs)
    limit = tokens + batch * window
    kv = kv_tokens if kv_tokens <= limit else limit
    most = float(tokens) * window
    return kv, (pairs if pairs <= most else most)


@numba.njit(cache=True, inline="always")
def _share(split: int, count: int, requests: int) -> int:
    """``OpPricing._share_of``: the largest share's part of ``count`` (tokens, keys) of a batch
    of ``requests`` requests, each whole in one share."""
    if split == 1 or count <= 0:
        return count
    if requests <= 0:
        return -(-count // split)
    return -(-count * -(-requests // split) // requests)


@numba.njit(cache=True, inline="always")
def _group_share(
    split: int, tokens: int, kv_tokens: int, pairs: float, requests: int
) -> tuple[int, int, float, int]:
    """An attention group's (tokens, keys/values, pairs, requests) in its largest share, as
    ``CostModel._attention_all_layers`` takes them (the group whole when empty)."""
    if split == 1 or tokens <= 0 or requests <= 0:
        return tokens, kv_tokens, pairs, requests
    held = -(-requests // split)
    return (
        _share(split, tokens, requests),
        _share(split, kv_tokens, requests),
        pairs * held / requests,
        held,
    )


class DecodeScale(NamedTuple):
    """What the attention of a decode/verify group reads from its cached context alone, the same
    for every draft length its requests may choose (:func:`decode_scale`): the correction
    factors of its full-attention layers and of its local layers (over their window), and one
    layer's MLA module at the group's context and at one cached token each (a verify step's
    extra query tokens are priced against the latter); 0 where the model has none."""

    full: float
    local: float
    mla_module: float
    mla_at_one: float


@numba.njit(cache=True)
def decode_scale(c: CompiledCost, requests: int, context_tokens: int) -> DecodeScale:
    """The :class:`DecodeScale` of ``requests`` decoding requests whose caches hold
    ``context_tokens`` tokens before the step: the floats :func:`decode_attention` and
    :func:`_mla_decode_module` compute for any tokens the requests add."""
    full = attention_factor(c, requests, context_tokens)
    local = full
    if c.window > 0:  # _windowed's keys/values less the new tokens: they do not depend on them
        kv, _ = _windowed(int(0), context_tokens, 0.0, requests, c.window, True)  # noqa: RUF046, UP018
        local = attention_factor(c, requests, kv)
    module = 0.0
    at_one = 0.0
    if c.mla:
        whole = requests if requests > 1 else 1
        module = _mla_at_context(c, whole, context_tokens)
        at_one = _mla_module(c, whole, 1.0)
    return DecodeScale(full, local, module, at_one)


@numba.njit(cache=True)
def verify_seconds(c: CompiledCost, requests: int, tokens: int, kv_tokens: int, pairs: float) -> (
    float
):  # fmt: skip
    """:meth:`CostModel.time_stats` of a batch of decode/verify entries only (every token
    sampled): ``tokens`` new tokens in all, ``kv_tokens`` keys/values read, ``pairs`` causal
    pairs."""
    scale = decode_scale(c, requests, kv_tokens - tokens)
    return scaled_step_seconds(
        c, requests, tokens, tokens, 0.0, tokens, kv_tokens, pairs, scale, requests
    )


@numba.njit(cache=True, inline="always")
def scaled_step_seconds(
    c: CompiledCost,
    requests: int,
    tokens: int,
    sampled: int,
    prefill_layers_s: float,
    decode_tokens: int,
    decode_kv_tokens: int,
    decode_pairs: float,
    scale: DecodeScale,
    decode_requests: int,
) -> float:
    """:meth:`CostModel.time_stats` of a whole batch (no shares) given by its stats: ``tokens``
    in all (``sampled`` of them sampled) over ``requests`` requests, every layer's prefill
    attention already priced (``prefill_layers_s``), and its decode entries' attention sums
    over ``decode_requests`` requests (with their :func:`decode_scale`)."""
    gpu = (
        (c.tables[LINEAR, tokens] + c.tables[HEAD, sampled])
        + prefill_layers_s
        + decode_layers_seconds(
            c, decode_tokens, decode_kv_tokens, decode_pairs, decode_requests, scale
        )
    )
    return step_seconds(c, gpu, requests, tokens)


@numba.njit(cache=True, inline="always")
def decode_layers_seconds(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, requests: int, scale: DecodeScale
) -> float:
    """Every layer's attention over a whole batch's decode/verify entries
    (``CostModel._attention_all_layers`` with ``decode=True``), their :func:`decode_scale`
    given."""
    if c.window <= 0 and not c.mla and c.transfer_at < 0:
        return c.layers * scaled_decode_attention(c, tokens, kv_tokens, pairs, scale.full)
    return _mixed_decode_layers(c, tokens, kv_tokens, pairs, requests, scale)


@numba.njit(cache=True)
def _mixed_decode_layers(
    c: CompiledCost, tokens: int, kv_tokens: int, pairs: float, requests: int, scale: DecodeScale
) -> float:
    """:func:`decode_layers_seconds` of a model with local or latent attention or on a transfer
    GPU: full-attention layers (MLA modules with a verify step's extra query tokens; a transfer
    GPU's kernel ratio), then the local layers over their window."""
    if tokens <= 0:
        return 0.0
    if c.mla:
        full = _mla_verify_module(c, tokens, requests, scale)
    else:
        full = _scaled_layer(c, tokens, kv_tokens, pairs, requests, scale.full)
    local = full
    if c.window > 0:
        kv, local_pairs = _windowed(tokens, kv_tokens, pairs, requests, c.window, True)
        if c.mla:
            local = _mla_decode_module(c, tokens, kv, requests)
        else:
            local = _scaled_layer(c, tokens, kv, local_pairs, requests, scale.local)
    return _all_layers(c, full, local)


@numba.njit(cache=True, inline="always")
def _mla_verify_module(c: CompiledCost, tokens: int, requests: int, scale: DecodeScale) -> float:
    """:func:`_mla_decode_module` of ``tokens`` new tokens over the context ``scale`` was taken
    at: its module there, plus what a verify step's extra query tokens add."""
    whole = requests if requests > 1 else 1
    if tokens > whole:
        return _plus_extra_queries(c, tokens, scale.mla_module, scale.mla_at_one)
    return scale.mla_module


@numba.njit(cache=True)
def mla_verify_slack(c: CompiledCost, tokens: int, requests: int, scale: DecodeScale) -> float:
    """How much less every layer's attention over a decode group of ``requests`` requests could
    cost at more than ``tokens`` new tokens than at ``tokens``, for a model with latent
    attention (0 for any other): the extra query tokens' share of its MLA modules, which has a
    correction of its own and need not rise with them (the cached context's does not change)."""
    if not c.mla or tokens <= 0:
        return 0.0
    return c.layers * (_mla_verify_module(c, tokens, requests, scale) - scale.mla_module)


@numba.njit(cache=True)
def stepped_seconds(
    c: CompiledCost,
    fit: FloatArray,
    grid: FloatArray,
    token_s: float,
    requests: int,
    tokens: int,
    prefill_tokens: int,
    prefill_kv_tokens: int,
    prefill_pairs: float,
    prefill_requests: int,
    decode_tokens: int,
    decode_kv_tokens: int,
    decode_pairs: float,
    decode_requests: int,
) -> float:
    """:meth:`CostModel.time_stats` of any batch given by its stats, its kernels other than
    attention already priced (``token_s``): both attention kernels over every layer (the prefill
    one by the fit ``fit``/``grid`` of :func:`prefill_attention`) and the engine's step."""
    if c.split > 1:  # each attention group's and the step's largest share (CostModel's order)
        split = c.split
        prefill_tokens, prefill_kv_tokens, prefill_pairs, prefill_requests = _group_share(
            split, prefill_tokens, prefill_kv_tokens, prefill_pairs, prefill_requests
        )
        decode_tokens, decode_kv_tokens, decode_pairs, decode_requests = _group_share(
            split, decode_tokens, decode_kv_tokens, decode_pairs, decode_requests
        )
        tokens = _share(split, tokens, requests)
        requests = -(-requests // split)
    prefill = prefill_attention(
        c, fit, grid, prefill_tokens, prefill_kv_tokens, prefill_pairs, prefill_requests
    )
    decode = decode_attention(c, decode_tokens, decode_kv_tokens, decode_pairs, decode_requests)
    prefill_local, decode_local = prefill, decode
    if c.window > 0:
        kv, pairs = _windowed(
            prefill_tokens, prefill_kv_tokens, prefill_pairs, prefill_requests, c.window, False
        )
        prefill_local = prefill_attention(c, fit, grid, prefill_tokens, kv, pairs, prefill_requests)
        kv, pairs = _windowed(
            decode_tokens, decode_kv_tokens, decode_pairs, decode_requests, c.window, True
        )
        decode_local = decode_attention(c, decode_tokens, kv, pairs, decode_requests)
    # through every stage: the stage factor (1.0 without stages, which leaves each float as is)
    gpu = (
        token_s
        + _all_layers(c, prefill, prefill_local) * c.stage_factor
        + _all_layers(c, decode, decode_local) * c.stage_factor
    )
    return step_seconds(c, gpu, requests, tokens)
