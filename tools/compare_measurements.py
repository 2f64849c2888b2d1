"""Print, as Markdown, how the shipped profiles predict every measurement under measurements/.

    python tools/compare_measurements.py [measurements]

Each folder ``measurements/<gpu>/<timer>/<model>`` is what ``cbsim calibrate measure`` wrote on
that GPU; each line is :func:`cbsim.studies.calibration.compare.compare_measurements` on one table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cbsim.studies.calibration.compare import compare_measurements


def main(root: Path) -> None:
    print(
        "| GPU | timer | model | table | points | median APE % | P90 APE % | predicted / measured |"
    )
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for folder in sorted(p for p in root.glob("*/*/*") if (p / "meta.json").is_file()):
        gpu, timer, model = folder.relative_to(root).parts
        for row in compare_measurements(gpu, folder).itertuples(index=False):
            print(
                f"| {gpu} | {timer} | {model} | {row.table} | {row.points} | "
                f"{row.median_ape_pct:.1f} | {row.p90_ape_pct:.1f} | {row.median_ratio:.3f} |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "measurements"))
