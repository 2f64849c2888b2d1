"""Deployment planning: which layout serves a workload within an SLO most cheaply, searched as
NVIDIA's aiconfigurator searches (``aiconfigurator cli default --total_gpus --isl --osl --ttft
--tpot``), but every candidate simulated rather than read off kernel tables.

The question is "given this traffic and this latency target, how should I deploy?". The answer
is a search over every *layout* (:mod:`cbsim.studies.plan.layouts`: GPU kind, tensor / pipeline / expert /
attention-data parallelism, aggregated or disaggregated ``xP1D`` units, batch cap and token
budget), each searched for the highest request rate it sustains within the SLO by
:mod:`cbsim.studies.capacity`'s search (:mod:`cbsim.studies.plan.search`). Every passing rate is an operating
point, described by output tokens/s per GPU and tokens/s per user; the points no other beats on
both form the Pareto front, and each has a cost per million tokens (:mod:`cbsim.studies.plan.pareto`).
The winner is planned below its limit (the headroom, 80% by default), re-simulated there over
several seeds, and printed with the command that starts it in the chosen engine
(:mod:`cbsim.studies.plan.launch`). :mod:`cbsim.studies.plan.planner` runs the passes; :mod:`cbsim.studies.plan.render`
prints the tables and draws the plot; :mod:`cbsim.studies.plan.cli` is ``cbsim plan``.

Speed is what makes it interactive: layouts that cannot run (weights or one request's KV cache do
not fit, heads or experts that do not divide) are pruned before any simulation; each search
starts from the cost model's estimate of the layout's capacity (:mod:`cbsim.studies.plan.estimate`);
only the best parallel layouts get their batching refined.
"""

from __future__ import annotations

from cbsim.studies.plan.cli import plan_command
from cbsim.studies.plan.layouts import Batching, Instance, Layout, SearchSpace
from cbsim.studies.plan.planner import PlanSettings, plan_deployment

__all__ = [
    "Batching",
    "Instance",
    "Layout",
    "PlanSettings",
    "SearchSpace",
    "plan_command",
    "plan_deployment",
]
