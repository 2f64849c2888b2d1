"""Capacity planning: how much traffic a replica sustains within a latency SLO, and what a load costs.

The question a capacity planner asks is "how many GPUs of which kind serve this traffic within this
SLO, and at what price per token?". cbsim answers it by simulation, in three steps:

1. **Maximum sustainable rate of one replica.** With ``cluster.replicas`` forced to 1, the offered
   load is varied: ``workload.arrival.rate`` for synthetic arrivals, ``workload.trace.rate_scale``
   for a replayed trace (rate = the trace's base rate × scale, base rate = requests / span of the
   replayed part). Each rate is simulated over a window of arrivals (``window_s``, 300 s by
   default, stretched to at least ``min_requests`` arrivals; a trace replay can end sooner). A rate
   *passes* when, for every seed,

   * the queue is stable: late arrivals are admitted about as fast as early ones. Of the admitted
     requests arriving in the last quarter of the window, at least 95 % (``served_ratio``) wait
     for admission (``queue_s``) no longer than three times the p90 admission delay of the first
     half's requests (``served_lag_s``), and never less than 1 s: a backlog that grows makes late
     arrivals wait ever longer, while a bursty trace's long outputs do not count against it;
     the time-averaged waiting count of the last quarter is not growing
     against the second quarter (``waiting_q4`` ≤ ``waiting_q2`` + max(2, ``waiting_q2``/2, 1 % of
     the window's arrivals), read from the run's timeseries in windows of a twentieth of the
     window); and nothing is still queued at the horizon (2 × window + 600 s);
   * every SLO metric is within its threshold. A metric is any numeric key of the run's summary
     (``ttft_p99_s``, ``tpot_p99_s``, ``e2e_p90_s``, ...), which must be at most its threshold, or
     one of the ratios ``slo_attainment`` / ``goodput_ratio`` (its alias: the fraction of requests
     meeting the scenario's per-request ``slo``), which must be at least its threshold. An
     undefined metric (NaN) fails.

   The search brackets the limit by doubling from a start rate (1 req/s; halving when that already
   fails, down to 1/64 of it: failing there means the SLO cannot be met at all), then bisects the
   bracket until its width is within a relative tolerance (2 %). Every simulation is counted.

2. **Fleet for a target load.** ``replicas = ceil(target / max_rate)``, then the fleet is
   simulated at the target rate (``cluster.replicas = N``, router ``least_loaded`` unless the
   scenario routes ``prefix_aware`` or ``session_affinity``) under the same
   checks and grown one replica at a time until it passes. ``gpus = replicas × tp``,
   ``cost_per_hour = gpus × price per GPU-hour`` (:attr:`cbsim.catalog.hardware.GPU.price_per_hour`, or a
   ``prices`` override), and ``cost_per_million_output_tokens = cost_per_hour / output tokens per
   hour × 1e6`` with output tokens per hour = target × 3600 × output tokens per arrived request in
   the fleet simulation (its summary's ``output_tokens`` / ``requests``; rejected requests count
   as zero). Without a target the cost figures are those of one replica at its maximum rate.

3. **Alternatives.** ``vary`` maps dotted scenario keys to lists of values; every combination is
   planned on its own and ``best`` is the cheapest that meets the SLO (by cost per million output
   tokens, then cost per hour). Combinations that make an invalid scenario only together (fp4
   weights on a GPU without FP4) are reported with their error and skipped; a value that every
   combination holding it refuses for that key (a misspelt GPU), or combinations none of which
   is valid, are bad input, refused before any search. The keys the search sets itself (load,
   window, replicas, router, seed, horizon) cannot be varied or ``--set``. A run of the search
   that the scenario's limits refuse (the requests a target rate sends over the window) is an
   error naming the option that led there (``--target-rps``, ``--window-s``).

:func:`find_max_rate` does step 1, :func:`plan` all three and returns one JSON-ready mapping;
:data:`capacity_command` is the ``cbsim capacity`` command line. Each search is serial and
deterministic: same scenario, SLO and seeds give the same answer. The alternatives are searched
at once on ``workers`` local processes (``--workers``, default one per CPU; from Python the
default is this process alone), with the same answer, byte for byte
(:mod:`~cbsim.studies.capacity.workers`).

The package: :mod:`~cbsim.studies.capacity.fields` (the scenario's dotted keys),
:mod:`~cbsim.studies.capacity.checks` (what a run must pass), :mod:`~cbsim.studies.capacity.search` (step 1),
:mod:`~cbsim.studies.capacity.planning` (steps 2 and 3), :mod:`~cbsim.studies.capacity.workers` (searches on
several processes), :mod:`~cbsim.studies.capacity.rendering` (the table) and :mod:`~cbsim.studies.capacity.cli`
(option parsing and the command).
"""

from __future__ import annotations

from cbsim.studies.capacity.checks import TIMESERIES_WINDOWS as TIMESERIES_WINDOWS
from cbsim.studies.capacity.checks import _check_run as _check_run
from cbsim.studies.capacity.cli import (
    EXIT_INFEASIBLE,
    Infeasible,
    capacity_command,
    parse_prices,
    parse_slo,
    parse_vary,
)
from cbsim.studies.capacity.fields import CONTROLLED_KEYS as CONTROLLED_KEYS
from cbsim.studies.capacity.fields import scenario_field_paths
from cbsim.studies.capacity.planning import plan
from cbsim.studies.capacity.rendering import render as render
from cbsim.studies.capacity.search import DEFAULT_MIN_REQUESTS as DEFAULT_MIN_REQUESTS
from cbsim.studies.capacity.search import DEFAULT_START_RPS as DEFAULT_START_RPS
from cbsim.studies.capacity.search import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from cbsim.studies.capacity.search import DEFAULT_WINDOW_S as DEFAULT_WINDOW_S
from cbsim.studies.capacity.search import (
    CapacityResult,
    Evaluation,
    evaluate_rate,
    find_max_rate,
)

__all__ = [
    "EXIT_INFEASIBLE",
    "CapacityResult",
    "Evaluation",
    "Infeasible",
    "capacity_command",
    "evaluate_rate",
    "find_max_rate",
    "parse_prices",
    "parse_slo",
    "parse_vary",
    "plan",
    "scenario_field_paths",
]
