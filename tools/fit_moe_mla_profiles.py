"""Fit the MoE layers, MLA modules and NCCL all-to-all curves of the shipped vLLM profiles
(``moe``, ``mla`` and ``alltoall`` in each profile JSON), leaving every other fit of those files
as it is (``tools/fit_profiles.py`` refits everything, these included).

    python tools/fit_moe_mla_profiles.py
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from cbsim.calibration import comm, mla, moe
from cbsim.calibration.data import load_table, measured_gpus
from cbsim.calibration.profile import read_profile, write_json
from cbsim.errors import CbsimError
from cbsim.hardware import get_gpu

PROFILES = Path(__file__).resolve().parents[1] / "cbsim" / "data" / "profiles"


def main() -> None:
    for gpu in measured_gpus():
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


if __name__ == "__main__":
    main()
