"""Batching schedulers, registered by their YAML ``kind`` (static, orca, vllm, sarathi)."""

from __future__ import annotations

from cbsim.scheduler import orca, sarathi, static, vllm  # noqa: F401  (registration)
from cbsim.scheduler.base import Batch, SchedulerPolicy, make_scheduler, scheduler_kinds

__all__ = ["Batch", "SchedulerPolicy", "make_scheduler", "scheduler_kinds"]
