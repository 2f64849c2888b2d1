"""Fit the MoE layers, MLA modules and NCCL all-to-all curves of the shipped vLLM profiles
(``moe``, ``mla`` and ``alltoall`` in each profile JSON), and the MoE layers of the other engines'
kernel profiles from their own MoE tables (``moe`` and its held-out ``moe_*`` provenance in
``aiconfigurator-{trtllm,sglang}.json``), leaving every other fit of those files as it is
(``tools/fit_profiles.py`` refits everything, these included).

    python tools/fit_moe_mla_profiles.py [--engines-only]
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration import comm, mla, moe
from cbsim.studies.calibration.data import (
    DEFAULT_ENGINE,
    load_table,
    measured_engines,
    measured_gpus,
)
from cbsim.studies.calibration.fit import moe_family, percent_table, profile_name
from cbsim.studies.calibration.profile import read_profile, write_json

PROFILES = Path(__file__).resolve().parents[1] / "cbsim" / "catalog" / "data" / "profiles"


def refit_vllm(gpu: str) -> None:
    """The vLLM profile's MoE, MLA and all-to-all fits (no held-out figures)."""
    path = PROFILES / gpu / "aiconfigurator-vllm.json"
    profile = read_profile(path)
    update: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(CbsimError):  # no MoE measurements for this GPU
        update["moe"] = moe.fit_all(load_table("moe", gpu), get_gpu(gpu))
    with contextlib.suppress(CbsimError):  # no MLA measurements for this GPU
        tables = {phase: load_table(f"mla_{phase}", gpu) for phase in mla.PHASES}
        update["mla"] = mla.fit_all(tables, get_gpu(gpu))
    with contextlib.suppress(CbsimError):  # no NCCL all-to-all measurements for this GPU
        update["alltoall"] = comm.fit_alltoall(load_table("nccl", gpu))
    if update:
        write_json(profile.model_copy(update=update), path)
        print(f"{path}: " + ", ".join(f"{len(v)} {k} fits" for k, v in update.items()))


def refit_engine_moe(gpu: str, engine: str) -> None:
    """An engine profile's MoE fits and their held-out provenance from the engine's MoE table
    (nothing where that GPU has no MoE table of the engine), and the held-out error printed."""
    path = PROFILES / gpu / f"{profile_name(engine)}.json"
    try:
        table = load_table("moe", gpu, engine=engine)
    except CbsimError:
        return
    if not path.is_file():
        print(f"{path} does not exist (skipped): tools/fit_profiles.py fits it whole")
        return
    profile = read_profile(path)
    rows: list[dict[str, object]] = []
    fits, found = moe_family(table, gpu, engine, rows, [], progress=print)
    kept = {k: v for k, v in profile.provenance.items() if not k.startswith("moe_")}
    write_json(profile.model_copy(update={"moe": fits, "provenance": {**kept, **found}}), path)
    print(f"{path}: {len(fits)} moe fits")
    print(percent_table(pd.DataFrame(rows)).to_string(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines-only", action="store_true")
    args = parser.parse_args()
    for gpu in measured_gpus():
        if not args.engines_only:
            refit_vllm(gpu)
        for engine in measured_engines(gpu):
            if engine != DEFAULT_ENGINE:
                refit_engine_moe(gpu, engine)


if __name__ == "__main__":
    main()
