"""Write each shipped engine profile's memory rule and release ranges from
cbsim/studies/calibration/engine_releases.py, leaving its fitted terms as they are (tools/fit_engines.py
writes them too, with a refit).

    python tools/write_engine_facts.py
"""

from __future__ import annotations

from pathlib import Path

from cbsim.cost.engine_profile import read_engine_profile, write_engine_profile
from cbsim.studies.calibration.engine_releases import MEMORY_RULES, RELEASES

ENGINES = (
    Path(__file__).resolve().parents[1] / "cbsim" / "catalog" / "data" / "profiles" / "engines"
)


def main() -> None:
    for engine, rule in MEMORY_RULES.items():
        path = ENGINES / f"{engine}.json"
        profile = read_engine_profile(path)
        versions = RELEASES.get(engine, [])
        update = {"memory": rule, "versions": versions}
        write_engine_profile(profile.model_copy(update=update), path)
        print(f"{path}: memory rule {rule.kind}, {len(versions)} release ranges")


if __name__ == "__main__":
    main()
