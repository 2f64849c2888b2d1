"""Cost models: how long an iteration of a batch takes (see :mod:`cbsim.cost.roofline`), and how an
engine lays out a GPU's memory (:mod:`cbsim.cost.engine_memory`: weights, activations, the KV
cache it leaves).

The roofline per operator (:mod:`~cbsim.cost.op_pricing`, :mod:`~cbsim.cost.moe`,
:mod:`~cbsim.cost.mla`), its fitted corrections (:mod:`~cbsim.cost.grid`,
:mod:`~cbsim.cost.profile`), the engines' overheads and defaults
(:mod:`~cbsim.cost.engine_profile`), and the numba kernels below them
(:mod:`~cbsim.cost.compiled`; :mod:`~cbsim.cost.kernel_cache`: whether numba's cache holds them,
and pricing in Python while it does not). Fitting them is :mod:`cbsim.studies.calibration`'s work.

Layer 2: imports :mod:`cbsim.common` and :mod:`cbsim.catalog` only; it prices a batch, never a
scenario (:mod:`cbsim.engine.cost_models` builds a cost model for a scenario).
"""

from __future__ import annotations

from cbsim.cost.params import CostParams
from cbsim.cost.roofline import BatchStats, CostModel

__all__ = ["BatchStats", "CostModel", "CostParams"]
