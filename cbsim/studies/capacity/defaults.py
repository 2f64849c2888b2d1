"""What ``cbsim capacity`` and ``cbsim plan`` share, so that the same traffic gets one answer.

Both commands find a replica's *knee* (the highest rate it passes at) by the same search
(:func:`cbsim.studies.capacity.search.find_max_rate`), then plan at :data:`HEADROOM` of it, size the
fleet for a target load as ``ceil(target / (headroom × knee))`` replicas and verify that fleet by
simulation at the target on :data:`VERIFY_SEEDS` seeds (the scenario's and the next ones). Every
setting that changes that answer has one default, here:

* :data:`WINDOW_S` — the seconds of arrivals each rate is simulated over. A short window
  overstates the knee: a queue that grows slowly has not grown yet when the window ends. On the
  README's traffic (``scenarios/chat-llama3-8b-h100.yaml``, TTFT p99 ≤ 2 s, TPOT p99 ≤ 0.1 s,
  tolerance 1 %), the knee over seeds 1, 2, 3 was 23.6 / 22.1 / 23.3 req/s at 60 s, 21.9 / 20.5 /
  22.6 at 120 s, 20.5 / 20.5 / 21.0 at 300 s, 19.9 / 20.6 / 21.0 at 600 s and 19.9 / 20.8 / 21.1
  at 1,200 s: 60 s reads 12 % high and 120 s 5 %, while 300 s is within 1 % of the longer windows'
  mean (and its seeds within 2.5 % of each other). 300 s is where the knee has converged, so both
  commands simulate 300 s (``cbsim plan`` used 60 s: 23.5 req/s against ``cbsim capacity``'s
  20.5 on that traffic, so they bought different fleets).
* :data:`TOLERANCE` — the bisection's relative width (2 %).
* :data:`START_RPS` — the first rate tried. A search that starts elsewhere (``cbsim plan`` starts
  from the cost model's estimate) starts at the power of two next below it
  (:func:`snapped_start`): doubling and halving from any power of two meet the same bracket as
  from 1 req/s, so the bisection runs through the same rates and ends at the same knee.
* :data:`HEADROOM` — the planning load as a share of the knee (80 %: 25 % headroom).
* :data:`VERIFY_SEEDS` — the seeds the bought fleet is verified on (:func:`verify_seeds`); the
  knee itself is searched on the scenario's seed alone unless ``--seeds`` says otherwise.
* prices — ``--prices`` and ``--price`` (both spellings on both commands,
  :mod:`cbsim.studies.capacity.options`) over the catalog's list prices.

``cbsim plan`` screens its many layouts over a shorter window first (:data:`SCREEN_WINDOW_S`,
:data:`SCREEN_TOLERANCE`: fast, a little optimistic) and searches the layouts it may answer with
again at the shared window and tolerance, so its answer's knee is the one ``cbsim capacity``
finds for the same replica.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cbsim.common.errors import CbsimError

__all__ = [
    "HEADROOM",
    "SCREEN_TOLERANCE",
    "SCREEN_WINDOW_S",
    "START_RPS",
    "TOLERANCE",
    "VERIFY_SEEDS",
    "WINDOW_S",
    "check_headroom",
    "fleet_size",
    "snapped_start",
    "verify_seeds",
]

WINDOW_S = 300.0
"""Seconds of arrivals simulated per rate (see the module docstring for why 300)."""
TOLERANCE = 0.02
"""Relative width at which the bisection stops."""
START_RPS = 1.0
"""First rate a capacity search tries."""
HEADROOM = 0.8
"""Planning load as a share of the knee."""
VERIFY_SEEDS = 3
"""Seeds the fleet one buys is verified on."""
SCREEN_WINDOW_S = 60.0
"""``cbsim plan``: the window its layouts are screened over (capped at the window)."""
SCREEN_TOLERANCE = 0.05
"""``cbsim plan``: the tolerance its layouts are screened at (at least the tolerance)."""


def verify_seeds(seed: int, count: int = VERIFY_SEEDS) -> list[int]:
    """The seeds a fleet is verified on: ``seed`` and the ``count - 1`` after it."""
    return [seed + i for i in range(count)]


def snapped_start(guess: float) -> float:
    """The power of two at or below ``guess`` (a positive rate): where a search that has a guess
    starts, so that it brackets the knee as a search from :data:`START_RPS` does."""
    if not (math.isfinite(guess) and guess > 0):
        return START_RPS
    return float(2.0 ** math.floor(math.log2(guess) + 1e-9))


def fleet_size(target_rps: float, knee_rps: float, headroom: float) -> int:
    """Replicas that serve ``target_rps`` with each at most ``headroom`` × its knee."""
    return max(1, math.ceil(target_rps / (headroom * knee_rps) * (1 - 1e-12)))


def seeds_text(seeds: Sequence[int]) -> str:
    """``1,2,3``: seeds as the options take them."""
    return ",".join(str(s) for s in seeds)


def check_headroom(headroom: float) -> None:
    """A headroom in (0, 1]; a user error naming ``--headroom`` otherwise."""
    if isinstance(headroom, bool) or not isinstance(headroom, int | float):
        raise CbsimError(f"must be a number in (0, 1], got {headroom!r}", field="--headroom")
    if not (math.isfinite(headroom) and 0 < headroom <= 1):
        raise CbsimError(f"must be in (0, 1], got {headroom!r}", field="--headroom")
