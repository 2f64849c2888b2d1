"""Cost models: how long an iteration of a batch takes (see :mod:`cbsim.cost.roofline`)."""

from __future__ import annotations

from cbsim.cost.params import CostParams
from cbsim.cost.roofline import BatchStats, CostModel

__all__ = ["BatchStats", "CostModel", "CostParams"]
