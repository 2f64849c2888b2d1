"""Every request's speculative decoding figures, held as arrays indexed by the request's slot.

A request takes a slot when it first speculates and keeps it for life. Per slot: the accepted
drafts and the rejecting steps behind its α estimate (see
:class:`cbsim.engine.speculative.policy_base.AlphaEstimator`, whose posterior mean
:meth:`SpecSlots.alphas` computes for many slots at once, in the same float operations), the EMA
of its per-step acceptance rate (NaN before its first step), the α its acceptance model drew for
it, and whether its drafter went stale (a step skipped at k = 0). A batch's requests are then read
and updated with one numpy call per figure instead of a call per request.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from cbsim.cost.kernel_call import KernelCall

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
INITIAL_SLOTS = 256
EMA_WEIGHT = 0.1
"""The weight of a request's latest step in the EMA of its acceptance rate."""

# a speculative decode run's per-request state, one column per request in running order: the
# rows of its integer table (KV tokens, blocks, outputs so far, outputs, accepted drafts,
# rejecting steps, the request's slot, its outputs left when the run starts, then what the run
# kernel counts: verification steps, drafts, accepted drafts, decode steps and the iteration the
# request finished in, -1 if none) and of its real one (acceptance EMA, drawn α)
(
    RUN_KV,
    RUN_BLOCKS,
    RUN_GENERATED,
    RUN_OUTPUT,
    RUN_ACCEPTED,
    RUN_REJECTED,
    RUN_SLOT,
    RUN_LEFT,
    RUN_STEPS,
    RUN_DRAFTS,
    RUN_ACCEPTS,
    RUN_DECODE_STEPS,
    RUN_FINISHED_AT,
) = range(13)
RUN_INTS = 13
RUN_EMA, RUN_ALPHA = range(2)
RUN_REALS = 2


class SpecSlots:
    """The per-request speculative figures of one cluster's requests, by slot."""

    __slots__ = (
        "_alphas_call",
        "_observe_call",
        "_rows_call",
        "_store_call",
        "accepted",
        "count",
        "ema",
        "model_alpha",
        "rejected",
        "stale",
    )

    def __init__(self, capacity: int = INITIAL_SLOTS) -> None:
        self.count = 0
        # compiled: a batch costs one call, not a dozen numpy calls (most batches are small)
        self._alphas_call = KernelCall(_alphas)
        self._observe_call = KernelCall(observe_steps)
        self._rows_call = KernelCall(read_run_rows)
        self._store_call = KernelCall(write_run_rows)
        self.accepted: IntArray = np.zeros(capacity, dtype=np.int64)
        self.rejected: IntArray = np.zeros(capacity, dtype=np.int64)
        self.ema: FloatArray = np.full(capacity, np.nan)
        self.model_alpha: FloatArray = np.zeros(capacity)
        self.stale: npt.NDArray[np.bool_] = np.zeros(capacity, dtype=np.bool_)

    def new(self, model_alpha: float) -> int:
        """A fresh slot for a request whose acceptance model drew ``model_alpha``."""
        slot = self.count
        if slot == len(self.accepted):
            self._grow(2 * slot)
        self.model_alpha[slot] = model_alpha
        self.count = slot + 1
        return slot

    def _grow(self, capacity: int) -> None:
        extra = capacity - len(self.accepted)
        self.accepted = np.concatenate([self.accepted, np.zeros(extra, dtype=np.int64)])
        self.rejected = np.concatenate([self.rejected, np.zeros(extra, dtype=np.int64)])
        self.ema = np.concatenate([self.ema, np.full(extra, np.nan)])
        self.model_alpha = np.concatenate([self.model_alpha, np.zeros(extra)])
        self.stale = np.concatenate([self.stale, np.zeros(extra, dtype=np.bool_)])

    def alphas(self, slots: IntArray, prior: float, weight: float) -> FloatArray:
        """Each slot's posterior mean α under a Beta prior of mean ``prior`` and ``weight``
        pseudo-observations (``weight`` > 0): ``AlphaEstimator.estimate`` per slot."""
        alphas: FloatArray = self._alphas_call(self.accepted, self.rejected, slots, prior, weight)
        return alphas

    def run_rows(self, ints: IntArray, reals: FloatArray) -> None:
        """A speculative decode run's per-request figures of the slots in ``ints``' row
        ``RUN_SLOT`` (in run order) into its rows ``RUN_ACCEPTED``, ``RUN_REJECTED`` and
        ``RUN_LEFT`` (outputs left) and ``reals``' rows, beside the KV tokens, blocks, outputs
        so far and outputs already in ``ints``' first four rows."""
        self._rows_call(self.accepted, self.rejected, self.ema, self.model_alpha, ints, reals)

    def store_run(self, ints: IntArray, reals: FloatArray) -> None:
        """A speculative decode run's figures after it (``ints``' rows ``RUN_ACCEPTED`` and
        ``RUN_REJECTED``, ``reals``' row ``RUN_EMA``) written back to the slots in ``ints``' row
        ``RUN_SLOT``: :meth:`run_rows` the other way."""
        self._store_call(self.accepted, self.rejected, self.ema, ints, reals)

    def observe(self, slots: IntArray, ks: IntArray, accepted: IntArray, ema_weight: float) -> int:
        """Add one verification step of each of ``slots`` (``accepted`` of ``ks`` drafts, every
        k > 0, no slot twice): the counts and the EMA of a / k (the first sample sets it).
        Returns how many of the steps rejected a draft."""
        rejected: int = self._observe_call(
            self.accepted, self.rejected, self.ema, slots, ks, accepted, ema_weight
        )
        return rejected


@numba.njit(cache=True)
def _alphas(
    accepted: IntArray, rejected: IntArray, slots: IntArray, prior: float, weight: float
) -> FloatArray:  # pragma: no cover - compiled
    out = np.empty(len(slots))
    for j in range(len(slots)):
        slot = slots[j]
        a = accepted[slot]
        out[j] = (a + prior * weight) / ((a + rejected[slot]) + weight)
    return out


@numba.njit(cache=True)
def read_run_rows(
    accepted: IntArray,
    rejected: IntArray,
    ema: FloatArray,
    model_alpha: FloatArray,
    ints: IntArray,
    reals: FloatArray,
) -> None:  # pragma: no cover - compiled
    """:meth:`SpecSlots.run_rows` on the slots' arrays (also called by compiled code)."""
    for j in range(ints.shape[1]):
        slot = ints[RUN_SLOT, j]
        ints[RUN_ACCEPTED, j] = accepted[slot]
        ints[RUN_REJECTED, j] = rejected[slot]
        reals[RUN_EMA, j] = ema[slot]
        reals[RUN_ALPHA, j] = model_alpha[slot]
        ints[RUN_LEFT, j] = ints[RUN_OUTPUT, j] - ints[RUN_GENERATED, j]


@numba.njit(cache=True)
def write_run_rows(
    accepted: IntArray, rejected: IntArray, ema: FloatArray, ints: IntArray, reals: FloatArray
) -> None:  # pragma: no cover - compiled
    """:meth:`SpecSlots.store_run` on the slots' arrays (also called by compiled code)."""
    for j in range(ints.shape[1]):
        slot = ints[RUN_SLOT, j]
        accepted[slot] = ints[RUN_ACCEPTED, j]
        rejected[slot] = ints[RUN_REJECTED, j]
        ema[slot] = reals[RUN_EMA, j]


@numba.njit(cache=True, inline="always")
def observe_step(
    accepted: IntArray,
    rejected: IntArray,
    ema: FloatArray,
    slot: int,
    k: int,
    a: int,
    weight: float,
) -> int:  # pragma: no cover - compiled
    """One verification step of ``slot`` (``a`` of ``k`` drafts accepted) added to its counts
    and EMA; returns 1 where it rejected a draft."""
    accepted[slot] += a
    rejecting = 0
    if a < k:
        rejected[slot] += 1
        rejecting = 1
    rate = a / k
    last = ema[slot]
    ema[slot] = rate if last != last else weight * rate + (1.0 - weight) * last  # NaN: first
    return rejecting


@numba.njit(cache=True)
def observe_steps(
    accepted: IntArray,
    rejected: IntArray,
    ema: FloatArray,
    slots: IntArray,
    ks: IntArray,
    drawn: IntArray,
    weight: float,
) -> int:  # pragma: no cover - compiled
    rejecting = 0
    for j in range(len(slots)):
        rejecting += observe_step(accepted, rejected, ema, slots[j], ks[j], drawn[j], weight)
    return rejecting


__all__ = [
    "EMA_WEIGHT",
    "RUN_ACCEPTED",
    "RUN_ACCEPTS",
    "RUN_ALPHA",
    "RUN_BLOCKS",
    "RUN_DECODE_STEPS",
    "RUN_DRAFTS",
    "RUN_EMA",
    "RUN_FINISHED_AT",
    "RUN_GENERATED",
    "RUN_INTS",
    "RUN_KV",
    "RUN_LEFT",
    "RUN_OUTPUT",
    "RUN_REALS",
    "RUN_REJECTED",
    "RUN_SLOT",
    "RUN_STEPS",
    "SpecSlots",
    "read_run_rows",
    "write_run_rows",
]
