"""SGLang's adaptive speculative decoding: switch among preset draft lengths on a smoothed
acceptance average, with hysteresis, tracked per batch-size range.

Engine behaviour reproduced. SGLang's ``--speculative-adaptive`` (``--speculative-adaptive-config``
with ``candidate_steps``, default ``[1, 3, 7]``; sgl-project/sglang PR #21599,
https://github.com/sgl-project/sglang/pull/21599) keeps pre-built runtime tiers, one per candidate
``speculative_num_steps``. After every verify it feeds the batch's accept lengths into an
exponential moving average and moves the active tier towards ``round(ema) + 1`` (one draft more
than is being accepted), with up/down hysteresis so a tier is not left on noise; the switch takes
effect at the next round. Batch-size-aware support (PR #24055,
https://github.com/sgl-project/sglang/pull/24055; roadmap issue #23705,
https://github.com/sgl-project/sglang/issues/23705) keeps that state per batch-size range. The
state is the server's: every request in a round drafts the same k, and nothing is per request.

cbsim's rule, per replica and batch-size range (``batch_ranges``; a batch size outside every range
has a range of its own): the tier's k is ``candidate_steps[tier]`` and s is the EMA of the mean
accepted drafts per speculating request of each verify step run in that range,
s ← w·mean + (1 − w)·s, starting at s = k₀ − 1 (no switch before evidence). After the update:

* up one tier when s + 1 ≥ k + ½ + ``up_hysteresis`` (``round(s) + 1`` exceeds k: the drafts are
  nearly all accepted);
* down one tier when s + 1 < k_lower + ½ − ``down_hysteresis`` (``round(s) + 1`` would fit the
  lower tier).

Rounding with a margin of ½ and the two hysteresis margins make the dead zone between tiers; a
zero ``up_hysteresis`` and a tier pivot where the acceptance sits reproduce the flip-flopping that
users of SGLang's shipped configs report (ormandj/sglang-glm53-flash-sm120 issue #10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from cbsim.engine.speculative.policy_base import (
    BatchView,
    KController,
    KPolicy,
    StaticController,
    register,
)


class HysteresisConfig(Protocol):
    """What :class:`AdaptiveHysteresisK` reads of its scenario section."""

    kind: str
    candidate_steps: Sequence[int]
    initial: int | None
    ema_weight: float
    up_hysteresis: float
    down_hysteresis: float
    batch_ranges: Sequence[tuple[int, int]]


@dataclass(slots=True)
class ReplicaTiers:
    """One replica's state, one entry per batch-size range (the last: outside every range):
    active tier, EMA of accepted drafts per step, steps observed; ``last`` holds the range of the
    replica's latest choice. Plain arrays, so that compiled runs read and write the same state
    (:mod:`cbsim.engine.speculative.fast_run`)."""

    tiers: npt.NDArray[np.int64]
    emas: npt.NDArray[np.float64]
    steps: npt.NDArray[np.int64]
    last: npt.NDArray[np.int64] = field(default_factory=lambda: np.full(1, -1, dtype=np.int64))

    def copy(self) -> ReplicaTiers:
        return ReplicaTiers(
            self.tiers.copy(), self.emas.copy(), self.steps.copy(), self.last.copy()
        )

    def restore(self, other: ReplicaTiers) -> None:
        """Take ``other``'s values (after a compiled run computed them)."""
        self.tiers[:] = other.tiers
        self.emas[:] = other.emas
        self.steps[:] = other.steps
        self.last[:] = other.last


def next_tier(
    tier: int,
    ema: float,
    candidates: Sequence[int],
    up_hysteresis: float,
    down_hysteresis: float,
) -> int:
    """The tier after one EMA update: one up, one down, or the same (see the module docstring)."""
    k = candidates[tier]
    wish = ema + 1.0
    if tier + 1 < len(candidates) and wish >= k + 0.5 + up_hysteresis:
        return tier + 1
    if tier > 0 and wish < candidates[tier - 1] + 0.5 - down_hysteresis:
        return tier - 1
    return tier


@register("adaptive_hysteresis")
class AdaptiveHysteresisK(KPolicy):
    """SGLang-style adaptive draft length (``speculative.policy: {kind: adaptive_hysteresis}``)."""

    batch_aware = True
    observes_batches = True

    def __init__(self, config: HysteresisConfig) -> None:
        super().__init__(config)  # type: ignore[arg-type]
        self.candidates = sorted({int(k) for k in config.candidate_steps})
        middle = self.candidates[(len(self.candidates) - 1) // 2]
        initial = config.initial if config.initial is not None else middle
        self.initial_tier = self.candidates.index(initial)
        self.weight = float(config.ema_weight)
        self.up = float(config.up_hysteresis)
        self.down = float(config.down_hysteresis)
        self.ranges = [(int(lo), int(hi)) for lo, hi in config.batch_ranges]
        self._replicas: dict[int, ReplicaTiers] = {}

    @property
    def k_max(self) -> int:
        return self.candidates[-1]

    def controller(self) -> KController:
        return StaticController(self.k_max)

    def range_of(self, batch_size: int) -> int:
        """Index of the range holding ``batch_size`` (len(ranges) for none)."""
        for i, (low, high) in enumerate(self.ranges):
            if low <= batch_size <= high:
                return i
        return len(self.ranges)

    def replica_tiers(self, replica: int) -> ReplicaTiers:
        """``replica``'s state (every range at the initial tier and EMA k₀ − 1 at first)."""
        state = self._replicas.get(replica)
        if state is None:
            size = len(self.ranges) + 1
            k0 = self.candidates[self.initial_tier]
            state = self._replicas[replica] = ReplicaTiers(
                np.full(size, self.initial_tier, dtype=np.int64),
                np.full(size, float(k0 - 1)),
                np.zeros(size, dtype=np.int64),
            )
        return state

    def choose(self, view: BatchView) -> list[int]:
        return [self.k_for(view.batch_size, view.replica)] * len(view.proposals)

    def k_for(self, batch_size: int, replica: int) -> int:
        """The k of ``replica``'s tier for a batch of ``batch_size`` entries, the range it
        chose from remembered for the step's :meth:`observe_batch`."""
        index = self.range_of(batch_size)
        state = self.replica_tiers(replica)
        state.last[0] = index
        return int(self.candidates[int(state.tiers[index])])

    def observe_batch(self, replica: int, ks: Sequence[int], accepted: Sequence[int]) -> None:
        state = self.replica_tiers(replica)
        index = int(state.last[0])
        if index < 0:
            return
        total = count = 0
        for k, a in zip(ks, accepted, strict=True):
            if k > 0:
                total += a
                count += 1
        if count == 0:
            return
        mean = float(total) / float(count)
        ema = self.weight * mean + (1.0 - self.weight) * float(state.emas[index])
        state.emas[index] = ema
        state.steps[index] += 1
        state.tiers[index] = next_tier(
            int(state.tiers[index]), ema, self.candidates, self.up, self.down
        )


__all__ = ["AdaptiveHysteresisK", "HysteresisConfig", "ReplicaTiers", "next_tier"]
