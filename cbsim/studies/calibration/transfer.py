"""GPUs without kernel tables: whose fits price them, and the error that transfer carries.

Most GPUs people rent have no measured kernel tables here (the shipped AI Configurator tables
cover A100 80GB, H100, H200, L40S and B200). Such a GPU is priced by the roofline with the
efficiencies, floors and corrections fitted on the nearest measured GPU (:data:`TRANSFERS`):
the same die where there is one (H100 PCIe and NVL, H20 from H100 SXM; the A100 variants from
A100 80GB; L40, RTX 4090 and RTX 6000 Ada from the L40S's AD102; GB200 from B200), else the
same generation (A10G and RTX 3090 from A100, L4 from L40S, B300 and RTX 5090 from B200), and
H100 for the AMD parts, as MI300X always was.

How wrong that is gets measured the only way it can be, by holding out GPUs that do have tables:
fit one, predict the other's measured kernels from its spec sheet alone (GEMM bf16, decode and
prefill attention with a bf16 KV cache), and pool the absolute percentage errors.

* **same die** — H200 predicted from H100 SXM and H100 SXM from H200, the one measured pair
  sharing a die (GH100, with different memory): what moving a fit to another package, memory
  or clock of the same silicon costs;
* **another die** — every measured GPU of another die predicted from the source's fit (from
  H100 SXM: A100, L40S, B200): what moving it across dies or architectures costs, and the
  figure the AMD parts carry (no AMD GPU is measured, so no closer check exists).

The figures go into each transferred profile's provenance (``transfer error <family>``), where
:func:`cbsim.cost.profile.transfer_note` reads them for the run's warnings and the catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.cost.profile import TRANSFER, TRANSFER_ERROR, keeps_collectives
from cbsim.studies.calibration import attention, gemm
from cbsim.studies.calibration.data import DEFAULT_ENGINE, load_table
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.profile import CalibrationProfile, Measured


@dataclass(frozen=True, slots=True)
class Transfer:
    """Where a GPU without tables takes its fits: ``source``'s, and whether the two share a die."""

    source: str
    same_die: bool
    why: str


TRANSFERS: Mapping[str, Transfer] = MappingProxyType(
    {
        "a100-40gb": Transfer("a100-80gb", True, "GA100, 40 GB HBM2"),
        "a100-40gb-pcie": Transfer("a100-80gb", True, "GA100, PCIe card"),
        "a100-80gb-pcie": Transfer("a100-80gb", True, "GA100, PCIe card"),
        "a10g": Transfer("a100-80gb", False, "GA102: Ampere, another die"),
        "rtx-3090": Transfer("a100-80gb", False, "GA102: Ampere, another die"),
        "h100-pcie": Transfer("h100-sxm", True, "GH100, PCIe card"),
        "h100-nvl": Transfer("h100-sxm", True, "GH100, PCIe card with 94 GB"),
        "h20": Transfer("h100-sxm", True, "GH100, cut down"),
        "h200-nvl": Transfer("h200", True, "GH100 with 141 GB, PCIe card"),
        "l40": Transfer("l40s", True, "AD102"),
        "rtx-4090": Transfer("l40s", True, "AD102, GeForce"),
        "rtx-6000-ada": Transfer("l40s", True, "AD102, workstation card"),
        "l4": Transfer("l40s", False, "AD104: Ada, another die"),
        "gb200": Transfer("b200", True, "B200's die in a Grace superchip"),
        "b300": Transfer("b200", False, "Blackwell Ultra: a revised die"),
        "rtx-5090": Transfer("b200", False, "GB202: GeForce Blackwell, another die"),
        "mi250x": Transfer("h100-sxm", False, "AMD CDNA2: no AMD GPU is measured"),
        "mi300x": Transfer("h100-sxm", False, "AMD CDNA3: no AMD GPU is measured"),
        "mi325x": Transfer("h100-sxm", False, "AMD CDNA3: no AMD GPU is measured"),
    }
)
"""Every catalog GPU without kernel tables and where its fits come from."""

DIES: Mapping[str, str] = MappingProxyType(
    {"a100-80gb": "GA100", "h100-sxm": "GH100", "h200": "GH100", "l40s": "AD102", "b200": "GB100"}
)
"""The die of every GPU with measured tables (which pairs share one)."""

SAME_DIE_PAIRS: tuple[tuple[str, str], ...] = (("h100-sxm", "h200"), ("h200", "h100-sxm"))
"""(fitted, predicted) pairs of measured GPUs sharing a die: the same-die transfer's check."""

FAMILIES = ("gemm bf16", "decode attention kv bf16", "prefill attention kv bf16")
"""The op families a transfer's error is reported for."""

Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    """The default :data:`Progress`: says nothing."""


@lru_cache(maxsize=32)
def pair_points(source: str, target: str, engine: str = DEFAULT_ENGINE) -> pd.DataFrame:
    """``target``'s measured kernels predicted by ``source``'s fits on ``target``'s spec sheet:
    one row per kernel (``family``, ``measured_s``, ``predicted_s``) of :data:`FAMILIES`."""
    frame = gemm.leave_one_gpu_out(source, target, "bf16", engine=engine)
    parts = [
        pd.DataFrame(
            {
                "family": FAMILIES[0],
                "measured_s": frame["measured_s"].to_numpy(),
                "predicted_s": frame["predicted_s"].to_numpy(),
            }
        )
    ]
    source_spec, target_spec = get_gpu(source), get_gpu(target)
    for phase, family in (("decode", FAMILIES[1]), ("prefill", FAMILIES[2])):
        moved = attention.transfer(
            load_table(f"{phase}_attention", source, engine=engine),
            source_spec,
            load_table(f"{phase}_attention", target, engine=engine),
            target_spec,
            phase,
            "bf16",
            features=attention.EXTENDED_FEATURES,
        )
        parts.append(
            pd.DataFrame(
                {
                    "family": family,
                    "measured_s": moved["latency_s"].to_numpy(),
                    "predicted_s": moved["predicted_s"].to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def held_out_pairs(source: str, same_die: bool) -> tuple[tuple[str, str], ...]:
    """The (fitted, predicted) pairs that check a transfer from ``source``: the measured pair
    sharing a die, or every measured GPU of another die than ``source``'s."""
    if same_die:
        return SAME_DIE_PAIRS
    die = DIES[source]
    return tuple((source, other) for other, its in DIES.items() if its != die)


def describe_pairs(pairs: tuple[tuple[str, str], ...], same_die: bool) -> str:
    """How a transfer was held out, in words: ``same die: h200 from h100-sxm, ...``."""
    kind = "same die" if same_die else "another die"
    return f"{kind}: " + ", ".join(f"{target} from {source}" for source, target in pairs)


def pooled_errors(
    pairs: tuple[tuple[str, str], ...], engine: str = DEFAULT_ENGINE, progress: Progress = _quiet
) -> dict[str, dict[str, float]]:
    """Median and P90 absolute percentage error (fractions) and point count per op family, the
    points of every held-out pair pooled."""
    frames = []
    for source, target in pairs:
        progress(f"transfer error: {target} predicted from {source}")
        frames.append(pair_points(source, target, engine))
    points = pd.concat(frames, ignore_index=True)
    stats = {}
    for family in FAMILIES:
        rows = points[points["family"] == family]
        stats[family] = summarize(
            rows["predicted_s"].to_numpy(dtype=np.float64),
            rows["measured_s"].to_numpy(dtype=np.float64),
        )
    return stats


def error_provenance(
    source: str, same_die: bool, engine: str = DEFAULT_ENGINE, progress: Progress = _quiet
) -> dict[str, Measured]:
    """The provenance entries recording a transfer's held-out error, one per op family."""
    pairs = held_out_pairs(source, same_die)
    where = describe_pairs(pairs, same_die)
    return {
        TRANSFER_ERROR + family: Measured(
            source=where,
            rows=int(stats["points"]),
            holdout_median_ape=stats["median_ape"],
            holdout_p90_ape=stats["p90_ape"],
        )
        for family, stats in pooled_errors(pairs, engine, progress).items()
    }


def _collectives_text(source: str, target: str) -> str:
    if keeps_collectives(source, target):
        return f"all-reduce and all-to-all: {source}'s measured curves (links within 10 %)"
    return (
        f"all-reduce and all-to-all: the roofline ring on the {target}'s own link ({source}'s "
        "measured curves are for another link)"
    )


def transfer_profile(
    source: CalibrationProfile,
    target_gpu: str,
    errors: Mapping[str, Measured] | None = None,
    *,
    name: str | None = None,
) -> CalibrationProfile:
    """A profile for a GPU without measurements: the source's dimensionless efficiencies, floors
    and corrections on the target's spec sheet (its peak FLOP/s and bandwidth), with the held-out
    ``errors`` of such a transfer (:func:`error_provenance`) in its provenance."""
    spec = get_gpu(target_gpu)
    transfer = TRANSFERS.get(spec.name)
    why = f" ({transfer.why})" if transfer is not None else ""
    return CalibrationProfile(
        gpu=spec.name,
        name=name or f"transfer-{source.gpu}",
        description=(
            f"{spec.name}{why} has no kernel measurements here: {source.gpu}'s fitted "
            f"efficiencies and corrections ({source.name}) applied to the {spec.name} spec "
            f"sheet; {_collectives_text(source.gpu, spec.name)}."
        ),
        provenance={
            TRANSFER: Measured(source=f"{source.gpu}/{source.name}"),
            **(errors or {}),
        },
        based_on=f"{source.gpu}/{source.name}",
    )


def transfer_profiles(
    fitted: Mapping[str, CalibrationProfile],
    engine: str = DEFAULT_ENGINE,
    progress: Progress = _quiet,
) -> dict[str, CalibrationProfile]:
    """Every :data:`TRANSFERS` target's profile from its source's ``fitted`` profile, with the
    held-out error of its kind of transfer (each kind measured once)."""
    errors: dict[tuple[str, bool], dict[str, Measured]] = {}
    profiles = {}
    for target, transfer in TRANSFERS.items():
        key = (transfer.source, transfer.same_die)
        if key not in errors:
            errors[key] = error_provenance(transfer.source, transfer.same_die, engine, progress)
        profiles[target] = transfer_profile(fitted[transfer.source], target, errors[key])
    return profiles
