"""Acceptance traces: per-position oracle acceptance lengths measured on real requests.

A trace is a CSV with columns ``request_id, prompt_len, output_len, acc_len``. ``acc_len`` is a
space-separated list with one integer per output position: how many tokens a single speculative
step starting at that position would emit if the draft length were unlimited — the accepted drafts
plus the correction/bonus token, so always ≥ 1. A step with draft length k at position i then emits
min(acc_len[i], k + 1) tokens, whatever k policy is being simulated: one measurement replays under
any policy. The requests of a trace also supply the prompt and output lengths of a run.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.common.limits import REQUESTS, TOKENS

REQUIRED_COLUMNS = ("request_id", "prompt_len", "output_len", "acc_len")


@dataclass(frozen=True, slots=True)
class AcceptanceTrace:
    request_ids: list[str]
    prompt_len: np.ndarray
    output_len: np.ndarray
    acc_len: list[np.ndarray]

    @property
    def mean_alpha(self) -> float:
        """Conditional α implied by the trace (geometric MLE over every position)."""
        lengths = np.concatenate(
            [a[:n] for a, n in zip(self.acc_len, self.output_len, strict=True)]
        )
        return float((lengths - 1).sum() / lengths.sum())


def _positive_int(text: str, where: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise CbsimError(f"{where}: {what} {shown!r} is not an integer") from None
    if value < 1:
        raise CbsimError(f"{where}: {what} must be >= 1, got {value}")
    problem = TOKENS.violation(value)
    if problem is not None:
        raise CbsimError(f"{where}: {what} {problem}")
    return value


def load_acceptance_trace(path: str | Path, *, source: str | None = None) -> AcceptanceTrace:
    """Read and validate an acceptance trace; errors name the file and line."""
    field = "speculative.acceptance.path"
    file = Path(path)
    try:
        handle = file.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise CbsimError(
            f"acceptance trace {str(file)!r} not found", source=source, field=field
        ) from None
    except OSError as err:
        raise CbsimError(
            f"cannot read {str(file)!r}: {err.strerror}", source=source, field=field
        ) from None
    ids: list[str] = []
    prompts: list[int] = []
    outputs: list[int] = []
    acc: list[np.ndarray] = []
    try:
        with handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise CbsimError(
                    f"{file}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})"
                )
            for row in reader:
                where = f"{file}: line {reader.line_num}"
                prompt = _positive_int(row["prompt_len"] or "", where, "prompt_len")
                output = _positive_int(row["output_len"] or "", where, "output_len")
                entries = (row["acc_len"] or "").split()
                lengths = np.array(
                    [_positive_int(t, where, "acc_len entry") for t in entries], dtype=np.int64
                )
                if len(lengths) < output:
                    raise CbsimError(
                        f"{where}: acc_len has {len(lengths)} positions, fewer than output_len {output}"
                    )
                if len(ids) >= REQUESTS.high:
                    raise CbsimError(f"{where}: more than {REQUESTS.high:,} requests")
                ids.append(row["request_id"] or "")
                prompts.append(prompt)
                outputs.append(output)
                acc.append(lengths)
    except CbsimError as err:
        raise err.located(source=source, field=field) from None
    except (csv.Error, UnicodeDecodeError) as err:
        raise CbsimError(
            f"{file}: not a readable CSV ({err})", source=source, field=field
        ) from None
    if not ids:
        raise CbsimError(f"{file}: no requests", source=source, field=field)
    return AcceptanceTrace(
        request_ids=ids,
        prompt_len=np.array(prompts, dtype=np.int64),
        output_len=np.array(outputs, dtype=np.int64),
        acc_len=acc,
    )
