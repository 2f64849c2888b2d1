"""Which kind of cbsim output a report source holds: a run, a sweep, a capacity plan or a
deployment plan (:func:`detect`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.run.results import RUN_RESULT
from cbsim.studies.report.document import ReportKind

#: Files a directory may hold the capacity JSON in (the first one present is used).
CAPACITY_FILES = ("capacity.json", "plan.json")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise CbsimError(f"cannot read: {err}", source=str(path)) from None
    except json.JSONDecodeError as err:
        raise CbsimError(f"not valid JSON: {err}", source=str(path)) from None


def _is_capacity(data: Any) -> bool:
    """A capacity plan: of one kind of replica, or of disaggregated pools."""
    from cbsim.studies.report.disaggregated_plan import is_disaggregated_plan

    return is_disaggregated_plan(data) or (
        isinstance(data, Mapping)
        and "slo" in data
        and "max_rate_rps" in data
        and ("evaluations" in data or "alternatives" in data)
    )


def _is_deployment_plan(data: Any) -> bool:
    from cbsim.studies.report.deployment_plan import is_deployment_plan

    return is_deployment_plan(data)


def _plan_kind(path: Path) -> ReportKind | None:
    """``capacity`` or ``plan`` for a JSON file holding one, else None."""
    data = _read_json(path)
    if _is_deployment_plan(data):
        return "plan"
    if _is_capacity(data):
        return "capacity"
    return None


_NOT_RECOGNISED = (
    "not a cbsim result: expected a run directory (summary.json), a sweep directory "
    "(sweep.parquet), a capacity plan (the JSON of cbsim capacity --json, or a directory "
    f"holding {' or '.join(CAPACITY_FILES)}) or a deployment plan (the folder of cbsim plan "
    "--out, or its plan.json)"
)


def detect(source: str | Path) -> tuple[ReportKind, Path]:
    """What ``source`` is and the path to read it from: a run or sweep directory, or the capacity
    or deployment plan's JSON file. ``summary.json`` or ``sweep.parquet`` given as files stand for their directory.

    Raises :class:`CbsimError` naming ``source`` when it is missing or not recognised.
    """
    path = Path(source)
    if not path.exists():  # a run result whose replacement was killed half way is restored
        outputs.recover(path, RUN_RESULT)
    if not path.exists():
        raise CbsimError("no such file or directory", source=str(source))
    if path.is_dir():
        if (path / "summary.json").is_file():
            return "run", path
        if (path / "sweep.parquet").is_file():
            return "sweep", path
        for name in CAPACITY_FILES:
            candidate = path / name
            if candidate.is_file():
                kind = _plan_kind(candidate)
                if kind is None:
                    raise CbsimError(
                        "not a capacity plan (the JSON of cbsim capacity --json) nor a "
                        "deployment plan (the plan.json of cbsim plan)",
                        source=str(candidate),
                    )
                return kind, candidate
        raise CbsimError(_NOT_RECOGNISED, source=str(source))
    if path.name == "summary.json":
        return "run", path.parent
    if path.name == "sweep.parquet":
        return "sweep", path.parent
    if path.suffix.lower() == ".json":
        kind = _plan_kind(path)
        if kind is not None:
            return kind, path
    raise CbsimError(_NOT_RECOGNISED, source=str(source))
