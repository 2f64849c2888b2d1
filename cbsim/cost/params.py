"""The replaceable parameters of the roofline cost model.

The roofline says how long an operation takes if it ran at the GPU's peak compute or peak memory
bandwidth. Real kernels reach a fraction of either (an *efficiency*) and pay a fixed
launch/latency *floor*. Every such number of the *uncalibrated* roofline lives here, named; a
calibration profile replaces them with values fitted to measured kernel timings. The serving
engine's own time per step is not a kernel: it lives in the engine profile
(:mod:`cbsim.cost.engine_profile`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class CostParams:
    """Efficiencies (fractions of peak) and floors (seconds) of the uncalibrated roofline."""

    gemm_compute_eff: float = 0.70
    gemm_memory_eff: float = 0.80
    gemm_floor_s: float = 4e-6
    # one efficiency pair for both attention kernels, so that a request's attention never gets
    # cheaper by growing from the decode kernel's size class into the prefill kernel's
    attn_compute_eff: float = 0.50
    attn_memory_eff: float = 0.65
    attn_floor_s: float = 6e-6
    elementwise_memory_eff: float = 0.70
    elementwise_floor_s: float = 2e-6
    allreduce_latency_s: float = 8e-6
    allreduce_bw_eff: float = 0.70
    source: str = "uncalibrated defaults"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_eff") and not 0.0 < value <= 1.0:
                raise ValueError(f"{f.name} must be in (0, 1], got {value}")
            if f.name.endswith("_s") and value < 0.0:
                raise ValueError(f"{f.name} must be non-negative, got {value}")

    def with_updates(self, **changes: Any) -> CostParams:
        """A copy with some parameters replaced."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
