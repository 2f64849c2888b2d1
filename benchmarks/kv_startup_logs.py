"""KV-cache capacity against published engine start-up logs (not a test; a few seconds).

Rebuilds every included row of cbsim/catalog/data/validation/kv_startup_logs.csv as a scenario and
compares cbsim's KV-cache tokens with the ones the engine printed
(:mod:`cbsim.studies.calibration.startup_logs`): per row, by engine, GPU and layout, then with the
vLLM rule's fitted terms re-derived without each row's source (leave-one-source-out).

    python benchmarks/kv_startup_logs.py
"""

from __future__ import annotations

import pandas as pd

from cbsim.studies.calibration import startup_logs


def main() -> None:
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", 48)
    frame = startup_logs.startup_logs()
    print(f"{len(frame)} logs, {int(frame['included'].sum())} included")
    errors = startup_logs.error_table(frame)
    shown = errors.drop(columns=["problem"]).round(1)
    print(shown.to_string(index=False))
    missing = errors[errors["problem"] != ""]
    for name, model, problem in zip(
        missing["id"], missing["model"], missing["problem"], strict=True
    ):
        print(f"not expressible: {name} {model}: {str(problem)[:100]}")
    print("\nall expressible rows:", _figures(startup_logs.summary(errors)))
    absolute = errors.assign(abs_pct=errors["error_pct"].abs())
    for column in ("engine", "gpu", "tp", "dtype"):
        table = absolute.groupby(column)["abs_pct"].agg(["count", "median", "max"])
        print(table.round(1).to_string())
    print("\nterms read off logs:", startup_logs.fitted_terms())
    held = startup_logs.leave_one_source_out(frame)
    print("leave-one-source-out:", _figures(startup_logs.summary(held)))


def _figures(figures: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in figures.items())


if __name__ == "__main__":
    main()
