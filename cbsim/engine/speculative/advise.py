"""``cbsim spec-advise``: which k policy at which load, for one model, GPU and drafter.

Users of vLLM, SGLang or TensorRT-LLM first ask what *their* engine's policy does at their load,
then whether another does better. For request rates from light load to saturation this runs the
same workload (Poisson arrivals, fixed prompt and output lengths, one seed) with speculation off
and with each k policy — fixed k, the engines' documented batch tables
(:mod:`cbsim.catalog.engine_presets`), SGLang's adaptive hysteresis
(:mod:`cbsim.engine.speculative.adaptive_hysteresis`) and cbsim's goodput policy per batch and per
request — and reports, per load, mean TPOT, output throughput and the TPOT speed-up over no
speculation (no-spec TPOT / spec TPOT, > 1 favours speculation), marking the best policy —
only when it is meaningfully best: ahead of every other row, no speculation included, by at
least :data:`MEANINGFUL_GAIN`. Rows within that of the top are marked as tied, and the load's
verdict says that no policy is meaningfully better (or that speculation does not meaningfully
pay). A smaller lead is within the run-to-run noise of one seed (see :data:`MEANINGFUL_GAIN`).

Published measurements say the speed-up falls as the batch grows (the verify step turns
compute-bound): SpecDecode-Bench on vLLM/H100, https://specdecode-bench.github.io
(arXiv:2601.11580): "speedups shrink as batch size grows"; vLLM PR #32374 and TensorRT-LLM PR
#10860 ship batch tables that turn speculation off at large batches for that reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pandas as pd

import cbsim
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.common.limits import RATE
from cbsim.schema.setting_warnings import ignored_settings

DEFAULT_RATES = (1.0, 5.0, 15.0, 30.0, 60.0)

MEANINGFUL_GAIN = 0.02
"""A speed-up counts as better than another only when it is at least 2% higher. One seed's run
is a sample: on the default set-up (Llama-3-8B on an H100, EAGLE-3 acceptance, 300 requests of
300 + 300 tokens, 1 to 60 req/s) run with seeds 0 to 5, the gap between two policies whose mean
gap is under 2% has a standard deviation of up to 0.64% across seeds, reaches 0.97% in one seed
and changes sign, so the leader changes from seed to seed. 2% is three standard deviations of
the noisiest such gap and twice its largest swing: a smaller lead is no reason to pick a
policy."""

POLICIES: dict[str, dict[str, Any]] = {
    "fixed k=1": {"kind": "fixed", "k": 1},
    "fixed k=3": {"kind": "fixed", "k": 3},
    "fixed k=5": {"kind": "fixed", "k": 5},
    "vLLM DSD table": {"kind": "batch_table", "preset": "vllm-dsd-example"},
    "TRT-LLM schedule": {"kind": "batch_table", "preset": "trtllm-draft-len-schedule-example"},
    "SGLang adaptive": {"kind": "adaptive_hysteresis"},
    "goodput": {"kind": "goodput", "k_max": 6},
    "goodput per request": {"kind": "goodput", "k_max": 6, "per_request": True},
}


@dataclass(frozen=True)
class AdviseSetup:
    """The workload and hardware every point of the sweep shares."""

    model: str
    gpu: str
    tp: int = 1
    proposer: str = "eagle"  # eagle | ngram | draft_model:NAME
    acceptance_profile: str = "eagle3-llama-3.1-8b-mtbench"
    input_len: int = 300
    output_len: int = 300
    requests: int = 300
    seed: int = 0


def proposer_config(text: str) -> dict[str, Any]:
    """``eagle``, ``ngram``, ``mtp`` or ``draft_model:NAME`` as a proposer section."""
    if text.startswith("draft_model:"):
        return {"kind": "draft_model", "model": text.split(":", 1)[1]}
    if text in ("eagle", "ngram", "mtp"):
        return {"kind": text}
    raise CbsimError(f"unknown proposer {text!r}: eagle, ngram, mtp or draft_model:NAME")


def scenario(setup: AdviseSetup, rate: float, policy: dict[str, Any] | None) -> dict[str, Any]:
    """One point: ``policy`` None for no speculation."""
    data: dict[str, Any] = {
        "name": "spec-advise",
        "seed": setup.seed,
        "workload": {
            "num_requests": setup.requests,
            "arrival": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "fixed", "value": setup.input_len},
            "output_tokens": {"kind": "fixed", "value": setup.output_len},
        },
        "cluster": {"model": setup.model, "gpu": setup.gpu, "tp": setup.tp},
        "scheduler": {"kind": "prefill_first"},
        "speculative": {"enabled": False},
    }
    if policy is not None:
        data["speculative"] = {
            "enabled": True,
            "proposer": proposer_config(setup.proposer),
            "acceptance": {"kind": "positional", "profile": setup.acceptance_profile},
            "policy": policy,
        }
    return data


def advise_warnings(setup: AdviseSetup) -> list[str]:
    """What ``cbsim run`` warns of a speculating point of the sweep's settings (an ``mtp``
    proposer for a model without MTP layers, ...): the settings every point shares."""
    speculating = cbsim.load_scenario(scenario(setup, DEFAULT_RATES[0], {"kind": "fixed", "k": 1}))
    return ignored_settings(speculating, trace_ids=False)


def advise(
    setup: AdviseSetup,
    rates: Sequence[float] = DEFAULT_RATES,
    policies: dict[str, dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per (rate, policy), ``no speculation`` included: mean batch size, TPOT mean,
    output tokens/s, TPOT speed-up over no speculation, ``best`` (the highest speed-up at that
    rate), ``tied`` (within :data:`MEANINGFUL_GAIN` of it) and ``meaningful_best`` (the best,
    with no other row tied: the only one :func:`table_lines` calls best)."""
    chosen = POLICIES if policies is None else policies
    rows: list[dict[str, Any]] = []
    for rate in rates:
        base = cbsim.simulate(cbsim.load_scenario(scenario(setup, rate, None))).summary
        rows.append(_row(rate, "no speculation", base, base))
        for name, policy in chosen.items():
            summary = cbsim.simulate(cbsim.load_scenario(scenario(setup, rate, policy))).summary
            rows.append(_row(rate, name, summary, base))
    return _mark_best(pd.DataFrame(rows))


def _mark_best(frame: pd.DataFrame) -> pd.DataFrame:
    """``best``: the highest speed-up at its rate (ties all marked); ``tied``: within
    :data:`MEANINGFUL_GAIN` of it; ``meaningful_best``: the best with no other row tied."""
    top = frame.groupby("rate")["speedup_tpot"].transform("max")
    frame["best"] = frame["speedup_tpot"] == top
    frame["tied"] = frame["speedup_tpot"] * (1.0 + MEANINGFUL_GAIN) > top
    ties = frame.groupby("rate")["tied"].transform("sum")
    frame["meaningful_best"] = frame["best"] & (ties == 1)
    return frame


def rate_verdict(rows: pd.DataFrame) -> str:
    """What one rate's rows say: the meaningfully best policy, or that none is (the rows within
    :data:`MEANINGFUL_GAIN` of the top named)."""
    best = rows[rows["meaningful_best"]]
    gain = f"{MEANINGFUL_GAIN:.0%}"
    if len(best):
        row = best.iloc[0]
        runner_up = float(rows[~rows["meaningful_best"]]["speedup_tpot"].max())
        lead = float(row["speedup_tpot"]) / runner_up - 1.0
        return f"best: {row['policy']} ({float(row['speedup_tpot']):.3f}x, {lead:.1%} ahead)"
    tied = [str(p) for p in rows[rows["tied"]]["policy"]]
    if "no speculation" in tied:
        return (
            f"no policy is meaningfully better than no speculation ({', '.join(tied)} within "
            f"{gain} of the top)"
        )
    text = f"no policy is meaningfully better: {', '.join(tied)} are within {gain} of the top"
    rest = rows[~rows["tied"]]
    if len(rest):
        after = rest.sort_values("speedup_tpot", kind="stable").iloc[-1]  # the best not tied
        lead = float(rows[rows["tied"]]["speedup_tpot"].min()) / float(after["speedup_tpot"])
        if lead - 1.0 >= MEANINGFUL_GAIN:
            text += f", together {lead - 1.0:.1%} or more ahead of {after['policy']}"
    return text


def _row(rate: float, name: str, s: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    tpot, base_tpot = float(s["tpot_mean_s"]), float(base["tpot_mean_s"])
    return {
        "rate": rate,
        "policy": name,
        "mean_batch_size": float(s["mean_batch_size"]),
        "tpot_mean_s": tpot,
        "output_tokens_per_s": float(s["output_tokens_per_s"]),
        "speedup_tpot": base_tpot / tpot if tpot > 0 and math.isfinite(tpot) else math.nan,
    }


def table_lines(frame: pd.DataFrame) -> list[str]:
    """The rows of :func:`advise` as text, one block per rate: the meaningfully best policy
    marked (or the rows tied within :data:`MEANINGFUL_GAIN` of the top), then the verdict."""
    if "meaningful_best" not in frame.columns:
        frame = _mark_best(frame.copy())
    lines: list[str] = []
    for _, rows in frame.groupby("rate", sort=False):
        lines.append(f"rate {float(rows['rate'].iloc[0]):g} req/s")
        lines += [_row_line(row) for row in rows.to_dict("records")]
        lines.append(f"  => {rate_verdict(rows)}")
    return lines


def _row_line(row: Mapping[Any, Any]) -> str:
    mark = "  <- best" if row["meaningful_best"] else "  ~ tied" if row["tied"] else ""
    return (
        f"  {row['policy']:<20} batch {float(row['mean_batch_size']):7.1f}  TPOT "
        f"{float(row['tpot_mean_s']) * 1e3:8.2f} ms  "
        f"{float(row['output_tokens_per_s']):9.1f} tok/s  "
        f"speed-up {float(row['speedup_tpot']):6.3f}{mark}"
    )


@click.command("spec-advise")
@click.option("--model", required=True, help="Target model (catalog name).")
@click.option("--gpu", required=True, help="GPU (catalog name).")
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--proposer", default="eagle", show_default=True,
              help="eagle | ngram | mtp | draft_model:NAME")  # fmt: skip
@click.option("--acceptance-profile", default="eagle3-llama-3.1-8b-mtbench", show_default=True,
              help="Published per-position acceptance (cbsim.catalog.acceptance_profiles).")  # fmt: skip
@click.option("--rates", default=",".join(f"{r:g}" for r in DEFAULT_RATES), show_default=True,
              help="Request rates (req/s), comma-separated.")  # fmt: skip
@click.option("--requests", type=int, default=300, show_default=True)
@click.option("--input-len", type=int, default=300, show_default=True)
@click.option("--output-len", type=int, default=300, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the rows as CSV.")
def spec_advise_command(
    model: str, gpu: str, tp: int, proposer: str, acceptance_profile: str, rates: str,
    requests: int, input_len: int, output_len: int, seed: int, out: str | None,
) -> None:  # fmt: skip
    """Which k policy at which load: speed-up over no speculation per request rate."""
    parsed = parse_rates(rates)
    if out is not None:
        check_rows_file(Path(out))
    setup = AdviseSetup(model, gpu, tp, proposer, acceptance_profile, input_len, output_len,
                        requests, seed)  # fmt: skip
    for warning in advise_warnings(setup):
        click.echo(f"warning: {warning}", err=True)
    frame = advise(setup, parsed)
    for line in table_lines(frame):
        click.echo(line)
    if out is not None:
        write_rows_file(frame, Path(out))
        click.echo(f"rows: {out}")


def parse_rates(text: str) -> list[float]:
    """``--rates``: request rates, comma-separated, each within the arrival-rate limit."""
    try:
        parsed = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise CbsimError(f"not numbers: {text!r}", field="--rates") from None
    if not parsed:
        raise CbsimError("no rate given (e.g. --rates 1,5,15)", field="--rates")
    for rate in parsed:
        problem = RATE.violation(rate)
        if problem is not None:
            raise CbsimError(problem, field="--rates")
    return parsed


ROWS_COLUMNS = (
    "rate", "policy", "mean_batch_size", "tpot_mean_s", "output_tokens_per_s", "speedup_tpot",
    "best", "tied", "meaningful_best",
)  # fmt: skip
"""The columns of the CSV ``--out`` writes (its header: how an earlier one is recognised)."""
_ROWS_DESCRIPTION = "a cbsim spec-advise table"


def _is_rows_file(path: Path) -> bool:
    """Whether ``path`` is a regular file whose first line is spec-advise's header."""
    if not path.is_file():
        return False
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline().strip() == ",".join(ROWS_COLUMNS)
    except (OSError, UnicodeDecodeError):
        return False


def check_rows_file(path: Path) -> None:
    """Refuse, before simulating, an ``--out`` that is a folder or a file cbsim did not write."""
    try:
        outputs.check_path(path)
        if path.is_dir():
            raise CbsimError("is a folder; give a file name", source=str(path))
        if path.exists() and not _is_rows_file(path):
            raise CbsimError(
                f"exists and is not {_ROWS_DESCRIPTION}, so cbsim will not overwrite it: give a "
                "new file name (or move the file away)",
                source=str(path),
            )
    except CbsimError as err:
        raise err.located(field="--out") from None


def write_rows_file(frame: pd.DataFrame, path: Path) -> None:
    """The rows as CSV, atomically; an existing file only if spec-advise wrote it."""
    try:
        outputs.write_file(
            path,
            lambda temporary: frame[list(ROWS_COLUMNS)].to_csv(temporary, index=False),
            replaceable=_is_rows_file,
            description=_ROWS_DESCRIPTION,
        )
    except CbsimError as err:
        raise err.located(field="--out") from None


__all__ = [
    "MEANINGFUL_GAIN",
    "POLICIES",
    "AdviseSetup",
    "advise",
    "advise_warnings",
    "rate_verdict",
    "scenario",
    "spec_advise_command",
    "table_lines",
]
