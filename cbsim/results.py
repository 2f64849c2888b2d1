"""Results of a run: DataFrames, a summary, and writing them to disk atomically.

``requests``, ``iterations`` and ``timeseries`` are pandas DataFrames (columns in
:mod:`cbsim.metrics`); ``summary`` is a flat dict of key figures. :meth:`Results.write` stores them
as parquet plus ``summary.json`` and the resolved ``scenario.yaml`` in a temporary directory beside
the target and renames it into place, so a killed run never leaves a half-written result.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from cbsim.errors import CbsimError
from cbsim.scenario import Scenario

RESULT_FILES = (
    "requests.parquet",
    "iterations.parquet",
    "timeseries.parquet",
    "summary.json",
    "scenario.yaml",
    "run_info.json",
)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Results:
    """Everything a run produced."""

    scenario: Scenario
    requests: pd.DataFrame
    iterations: pd.DataFrame
    timeseries: pd.DataFrame
    summary: dict[str, Any]
    run_info: dict[str, Any] = field(default_factory=dict)

    def write(self, directory: str | Path) -> Path:
        """Write all results into ``directory`` (replacing it if it exists) atomically."""
        target = Path(directory).resolve()
        if target.exists() and not target.is_dir():
            raise CbsimError("exists and is not a directory", source=str(directory))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            self.requests.to_parquet(tmp / "requests.parquet", index=False)
            self.iterations.to_parquet(tmp / "iterations.parquet", index=False)
            self.timeseries.to_parquet(tmp / "timeseries.parquet", index=False)
            summary = {k: _json_safe(v) for k, v in self.summary.items()}
            (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            (tmp / "scenario.yaml").write_text(
                yaml.safe_dump(self.scenario.to_dict(), sort_keys=False)
            )
            if self.run_info:
                (tmp / "run_info.json").write_text(json.dumps(self.run_info, indent=2) + "\n")
            os.chmod(tmp, 0o755)
            if target.exists():
                old = target.with_name(f".{target.name}.old")
                if old.exists():
                    shutil.rmtree(old)
                target.rename(old)
                tmp.rename(target)
                shutil.rmtree(old)
            else:
                tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    @classmethod
    def read(cls, directory: str | Path) -> Results:
        """Load results written by :meth:`write`."""
        from cbsim.scenario import load_scenario

        path = Path(directory)
        summary = json.loads((path / "summary.json").read_text())
        return cls(
            scenario=load_scenario(path / "scenario.yaml"),
            requests=pd.read_parquet(path / "requests.parquet"),
            iterations=pd.read_parquet(path / "iterations.parquet"),
            timeseries=pd.read_parquet(path / "timeseries.parquet"),
            summary={k: (math.nan if v is None else v) for k, v in summary.items()},
        )
