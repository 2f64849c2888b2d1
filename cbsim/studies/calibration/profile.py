"""Writing calibration profiles; the profile types and their loading live beside the cost model
that reads them (:mod:`cbsim.cost.profile`) and are re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.cost.profile import (
    DEFAULT_PROFILE,
    PROFILE_DIR,
    SCHEMA_VERSION,
    UNCALIBRATED,
    CalibrationProfile,
    CommFit,
    GridCorrection,
    Measured,
    MoeFit,
    RooflineFit,
    _read_json,
    load_profile,
    profile_names,
    read_profile,
)

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILE_DIR",
    "SCHEMA_VERSION",
    "UNCALIBRATED",
    "CalibrationProfile",
    "CommFit",
    "GridCorrection",
    "Measured",
    "MoeFit",
    "RooflineFit",
    "check_json_target",
    "load_profile",
    "profile_names",
    "read_profile",
    "write_json",
]


def _holds_json_of(kind: type[BaseModel]) -> Callable[[Path], bool]:
    """A check that a file holds a JSON object that validates as ``kind`` (a profile cbsim wrote)."""

    def check(path: Path) -> bool:
        try:
            kind.model_validate(_read_json(path))
        except (CbsimError, ValidationError, ValueError, RecursionError):
            return False
        return True

    return check


def check_json_target(kind: type[BaseModel], path: Path) -> None:
    """Refuse, before fitting, a path :func:`write_json` would refuse for a ``kind``."""
    outputs.check_file(
        path, replaceable=_holds_json_of(kind), description=f"a cbsim {kind.__name__}"
    )


def write_json(model: BaseModel, path: Path) -> Path:
    """Write a profile atomically (temporary file, then rename); an existing file is replaced
    only if it holds a profile of the same type."""
    text = json.dumps(_rounded(model.model_dump(mode="json")), separators=(",", ":")) + "\n"
    return outputs.write_bytes(
        path,
        text.encode("utf-8"),
        replaceable=_holds_json_of(type(model)),
        description=f"a cbsim {type(model).__name__}",
    )


def _rounded(value: Any, key: str = "") -> Any:
    """Grid corrections are logs of ratios: 5 decimals (0.001 %) is far below measurement noise.
    Grid axes keep full precision (nodes one m apart, log2 4096 and 4097, sit 0.00035 apart)."""
    if key == "axes":
        return value
    if isinstance(value, float):
        return round(value, 5) if abs(value) >= 1e-3 else float(f"{value:.6g}")
    if isinstance(value, list):
        return [_rounded(v, key) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, k) for k, v in value.items()}
    return value
