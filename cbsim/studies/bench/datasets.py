"""vLLM's datasets, as ``cbsim bench`` simulates them: ``--dataset-name`` and its length flags.

A simulation needs token counts, not text. Four of vLLM's datasets are token counts, and are
simulated as vLLM builds them (``vllm/benchmarks/datasets``):

* ``random`` (the default): ``--random-input-len`` / ``--random-output-len`` tokens (vLLM's
  general ``--input-len`` / ``--output-len`` win over them), spread by ``--random-range-ratio``,
  after ``--random-prefix-len`` tokens every prompt shares;
* ``prefix_repetition``: ``--prefix-repetition-num-prefixes`` prefixes of
  ``--prefix-repetition-prefix-len`` tokens, each prompt one of them and
  ``--prefix-repetition-suffix-len`` tokens of its own, ``--prefix-repetition-output-len`` out;
* ``sonnet``: prompts of ``--sonnet-input-len`` tokens whose first ``--sonnet-prefix-len`` every
  prompt shares, ``--sonnet-output-len`` out (the lengths of vLLM's sonnet lines, not its text);
* ``timed_trace``: the Mooncake-style JSON-lines file of ``--dataset-path`` (``timestamp``,
  ``input_length``, ``output_length``, ``hash_ids``: what cbsim's trace replay reads), its first
  ``--num-prompts`` requests, at its timestamps (``--self-timed``, vLLM's default for it) or at the
  load's (``--no-self-timed``); ``--timed-trace-chunk-hash-size`` tokens per hash id (512 by
  default, Mooncake's; vLLM's default of 16 fits the Qwen traces), ``--timed-trace-sec-multiplier``
  the timestamps' unit as vLLM reads it (without it cbsim reads the unit off the file).

The other datasets (``sharegpt``, ``hf``, ``custom``, ...) hold text cbsim cannot count: their
prompts are simulated as the random dataset of ``--input-len``/``--output-len`` tokens, and a
``note:`` line says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from cbsim.common.errors import CbsimError, did_you_mean
from cbsim.studies.bench.load import Dataset
from cbsim.studies.bench.vllm_flags import SIMULATED_DATASETS, VLLM_DATASETS

__all__ = ["DATASET_FLAGS", "Prompts", "parse_range_ratio", "prompts_of"]

#: each dataset's own length flags and vLLM's defaults for them (unset: None in the flags)
DATASET_FLAGS: dict[str, dict[str, int]] = {
    "random": {"random_input_len": 1024, "random_output_len": 128, "random_prefix_len": 0},
    "prefix_repetition": {
        "prefix_repetition_prefix_len": 256,
        "prefix_repetition_suffix_len": 256,
        "prefix_repetition_num_prefixes": 10,
        "prefix_repetition_output_len": 128,
    },
    "sonnet": {"sonnet_input_len": 550, "sonnet_output_len": 150, "sonnet_prefix_len": 200},
}


@dataclass
class Prompts:
    """What the dataset flags make: the :class:`Dataset`, each prompt's own and output lengths,
    and the notes to print."""

    dataset: Dataset
    input_len: int
    output_len: int
    notes: list[str] = field(default_factory=list)
    length_flags: dict[str, str] = field(default_factory=dict)  # option -> the flag that set it
    prefix_flag: str = "--random-prefix-len"  # the flag that set the dataset's prefix_tokens


def _first(value: int | None, fallback: int) -> int:
    return fallback if value is None else value


def _random(flags: dict[str, Any]) -> Prompts:
    prompts = Prompts(
        Dataset(name="random", prefix_tokens=flags["random_prefix_len"]),
        _first(flags["input_len"], flags["random_input_len"]),
        _first(flags["output_len"], flags["random_output_len"]),
    )
    prompts.length_flags = {
        "input": "--input-len" if flags["input_len"] is not None else "--random-input-len",
        "output": "--output-len" if flags["output_len"] is not None else "--random-output-len",
    }
    return prompts


def _prefix_repetition(flags: dict[str, Any]) -> Prompts:
    prefixes = flags["prefix_repetition_num_prefixes"]
    if prefixes < 1:
        raise CbsimError(f"must be at least 1, got {prefixes}", field="--prefix-repetition-num-prefixes")  # fmt: skip
    dataset = Dataset(
        name="prefix_repetition",
        prefix_tokens=flags["prefix_repetition_prefix_len"],
        prefixes=prefixes,
    )
    prompts = Prompts(
        dataset,
        flags["prefix_repetition_suffix_len"],
        _first(flags["output_len"], flags["prefix_repetition_output_len"]),
    )
    prompts.length_flags = {"input": "--prefix-repetition-suffix-len", "output": "--output-len"}
    prompts.prefix_flag = "--prefix-repetition-prefix-len"
    return prompts


def _sonnet(flags: dict[str, Any]) -> Prompts:
    total = _first(flags["input_len"], flags["sonnet_input_len"])
    total_flag = "--input-len" if flags["input_len"] is not None else "--sonnet-input-len"
    prefix = flags["sonnet_prefix_len"]
    if total < 1:
        raise CbsimError(f"must be at least 1 token, got {total}", field=total_flag)
    if prefix < 0:
        raise CbsimError(f"must be 0 or more tokens, got {prefix}", field="--sonnet-prefix-len")
    if prefix >= total:
        raise CbsimError(
            f"a sonnet prompt of {total} tokens cannot share a prefix of {prefix}: the prefix "
            f"must be shorter than {total_flag}",
            field="--sonnet-prefix-len",
        )
    prompts = Prompts(
        Dataset(name="sonnet", prefix_tokens=prefix),
        total - prefix,
        _first(flags["output_len"], flags["sonnet_output_len"]),
    )
    prompts.length_flags = {"input": total_flag, "output": "--sonnet-output-len"}
    prompts.prefix_flag = "--sonnet-prefix-len"
    return prompts


def _trace_time_scale(path: str, multiplier: float | None) -> float | None:
    """The time scale that reads the trace's timestamps as vLLM would with
    ``--timed-trace-sec-multiplier``: its raw numbers times the multiplier are seconds."""
    if multiplier is None:
        return None
    if not multiplier > 0 or math.isinf(multiplier):
        raise CbsimError(
            f"must be a positive number, got {multiplier}", field="--timed-trace-sec-multiplier"
        )
    from cbsim.workload.traces import load_trace

    trace = load_trace(path, field="--dataset-path")
    units = trace.attrs.get("units_per_second")
    if units is None:
        return None
    scale = float(units) * multiplier
    return None if scale == 1.0 else scale


def _timed_trace(flags: dict[str, Any]) -> Prompts:
    path = flags["dataset_path"]
    if path is None:
        raise CbsimError(
            "the timed_trace dataset replays a trace: give --dataset-path FILE.jsonl (timestamp, "
            "input_length, output_length, hash_ids per line) or a shipped trace's name "
            "(azure-conv-2023, azure-code-2023, mooncake-conversation)",
            field="--dataset-path",
        )
    self_timed = flags["self_timed"] is not False
    dataset = Dataset(
        name="timed_trace",
        trace=path,
        self_timed=self_timed,
        block_tokens=flags["timed_trace_chunk_hash_size"],
        time_scale=_trace_time_scale(path, flags["timed_trace_sec_multiplier"]),
    )
    prompts = Prompts(dataset, 1, 1)
    given = [f for f in ("input_len", "output_len") if flags[f] is not None]
    if given:
        names = ", ".join("--" + f.replace("_", "-") for f in given)
        prompts.notes.append(f"{names}: the trace gives each request's lengths")
    return prompts


def _unread(flags: dict[str, Any], name: str) -> Prompts:
    prompts = _random(flags)
    prompts.dataset = Dataset(name=name, prefix_tokens=flags["random_prefix_len"])
    prompts.notes.append(
        f"--dataset-name {name}: its prompts are text, and a simulation counts tokens: simulated "
        f"as the random dataset of {prompts.input_len} prompt and {prompts.output_len} output "
        "tokens (replay real lengths with --dataset-name timed_trace --dataset-path FILE)"
    )
    return prompts


def prompts_of(flags: dict[str, Any]) -> Prompts:
    """The prompts the dataset flags describe (see the module docstring); flags of a dataset
    other than the one named are noted as ignored."""
    name = flags["dataset_name"]
    unread = _other_datasets_flags(flags, name)
    flags = _with_defaults(flags)
    if name not in VLLM_DATASETS:
        raise CbsimError(
            f"unknown dataset {name!r}; vLLM's: {', '.join(VLLM_DATASETS)}"
            f"{did_you_mean(name, VLLM_DATASETS)}",
            field="--dataset-name",
        )
    if flags["dataset_path"] is not None and name in ("random", "prefix_repetition"):
        raise CbsimError(
            f"the {name} dataset draws its prompts: leave out --dataset-path (vLLM refuses it "
            "too), or name the dataset the file holds (timed_trace replays a trace)",
            field="--dataset-path",
        )
    if name == "prefix_repetition":
        prompts = _prefix_repetition(flags)
    elif name == "sonnet":
        prompts = _sonnet(flags)
    elif name == "timed_trace":
        prompts = _timed_trace(flags)
    elif name in SIMULATED_DATASETS:
        prompts = _random(flags)
    else:
        prompts = _unread(flags, name)
    if flags["dataset_path"] is not None and name != "timed_trace":
        prompts.notes.append(f"--dataset-path: the {name} dataset's file is not read")
    if unread:
        prompts.notes.append(
            f"{', '.join(unread)}: --dataset-name {name} does not read "
            f"{'it' if len(unread) == 1 else 'them'}"
        )
    if name != "timed_trace":
        trace_only = [
            flag
            for flag, key in (
                ("--self-timed/--no-self-timed", "self_timed"),
                ("--timed-trace-chunk-hash-size", "timed_trace_chunk_hash_size"),
                ("--timed-trace-sec-multiplier", "timed_trace_sec_multiplier"),
            )
            if flags[key] is not None
        ]
        if trace_only:
            prompts.notes.append(
                f"{', '.join(trace_only)}: only --dataset-name timed_trace reads it"
            )
    return prompts


def _with_defaults(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with each unset dataset length flag at vLLM's default."""
    filled = dict(flags)
    for group in DATASET_FLAGS.values():
        for key, default in group.items():
            if filled.get(key) is None:
                filled[key] = default
    return filled


def _other_datasets_flags(flags: dict[str, Any], name: str) -> list[str]:
    """The length flags given for a dataset other than ``name`` (the random dataset's are read
    by the text datasets simulated as random)."""
    reads = name if name in DATASET_FLAGS else "random" if name != "timed_trace" else None
    return [
        f"--{key.replace('_', '-')} (the {group} dataset's)"
        for group, keys in DATASET_FLAGS.items()
        if group != reads
        for key in keys
        if flags.get(key) is not None
    ]


def parse_range_ratio(text: str) -> tuple[float, float]:
    """``--random-range-ratio``: one number for inputs and outputs, or vLLM's JSON
    ``{"input": r1, "output": r2}``; each in [0, 1)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise CbsimError(f"{text!r} is not JSON", field="--random-range-ratio") from None
        if not isinstance(data, dict) or not set(data) <= {"input", "output"}:
            raise CbsimError(
                'give a number or {"input": r, "output": r}', field="--random-range-ratio"
            )
        ratios = (_ratio(data.get("input", 0.0)), _ratio(data.get("output", 0.0)))
    else:
        ratios = (_ratio(text), _ratio(text))
    return ratios


def _ratio(value: Any) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise CbsimError(f"{value!r} is not a number", field="--random-range-ratio") from None
    if not 0 <= ratio < 1:
        raise CbsimError(f"must be within [0, 1), got {value}", field="--random-range-ratio")
    return ratio
