"""Batching schedulers, registered by their YAML ``kind`` (static, orca, prefill_first, sarathi)."""

from __future__ import annotations

from cbsim.engine.scheduler import orca, prefill_first, sarathi, static  # noqa: F401  (registration)
from cbsim.engine.scheduler.base import Batch, SchedulerPolicy, make_scheduler, scheduler_kinds

__all__ = ["Batch", "SchedulerPolicy", "make_scheduler", "scheduler_kinds"]
