"""Fit the MoE layers of the shipped vLLM profiles (``moe`` in each profile JSON), leaving every
other fit of those files as it is (``tools/fit_profiles.py`` refits everything, MoE included).

    python tools/fit_moe_profiles.py
"""

from __future__ import annotations

from pathlib import Path

from cbsim.calibration import moe
from cbsim.calibration.data import load_table, measured_gpus
from cbsim.calibration.profile import read_profile, write_json
from cbsim.errors import CbsimError
from cbsim.hardware import get_gpu

PROFILES = Path(__file__).resolve().parents[1] / "cbsim" / "data" / "profiles"


def main() -> None:
    for gpu in measured_gpus():
        try:
            table = load_table("moe", gpu)
        except CbsimError:
            continue
        path = PROFILES / gpu / "aiconfigurator-vllm.json"
        profile = read_profile(path)
        fits = moe.fit_all(table, get_gpu(gpu))
        write_json(profile.model_copy(update={"moe": fits}), path)
        print(f"{path}: {len(fits)} MoE kernel paths")


if __name__ == "__main__":
    main()
