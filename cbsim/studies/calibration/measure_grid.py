"""The measurement grid: which kernel shapes and batch compositions ``cbsim calibrate measure`` times.

Linear layers are timed at ``m`` = 1, 2, 4, ... tokens, decode attention over batch size × cached
context, causal prefill attention over batch size × input length, and whole decoder layers on a
few mixed batches (:class:`IterationBatch`: prefills plus decodes with a KV cache).
:func:`default_grid` gives the ``full`` grid or a ``quick`` one for a smoke test.
"""

from __future__ import annotations

from dataclasses import dataclass

from cbsim.common.errors import CbsimError

GRIDS: tuple[str, ...] = ("full", "quick")


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
