"""Every ``vllm bench serve`` flag, as ``cbsim bench`` takes it: simulated, or named as ignored.

vLLM's flags (``vllm/benchmarks/serve.py`` ``add_cli_args`` and
``vllm/benchmarks/datasets`` ``add_dataset_parser``; the list of docs.vllm.ai/en/latest/cli/bench/
serve/, 2026) fall in two kinds. Those that shape the run are ``cbsim bench``'s own options
(:mod:`cbsim.studies.bench.cli`): the model, the dataset and its lengths, the load, the result file and
what it reports. The others configure a client talking to a server (host, tokenizer, sampling,
plots, other datasets' files) and mean nothing in a simulation: they are taken, so a vLLM command
line runs unchanged, and the ones given are named on one ``note:`` line with why
(:func:`ignored_note`). None is an error.

:data:`VARIADIC` are vLLM's options that take several values after one flag (argparse
``nargs``): ``--goodput ttft:300 tpot:50``, ``--metadata a=1 b=2``
(:class:`cbsim.studies.tool_flags.ToolCommand` reads them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click

__all__ = ["IGNORED", "SIMULATED_DATASETS", "VARIADIC", "VLLM_DATASETS", "ignored_note"]

F = TypeVar("F", bound=Callable[..., Any])

Takes = Literal["flag", "value", "values"]


@dataclass(frozen=True)
class Ignored:
    """A vLLM flag with no meaning in a simulation: what it takes, and why it is ignored."""

    flag: str
    takes: Takes
    why: str

    @property
    def dest(self) -> str:
        """The keyword the command receives it as."""
        return "vllm_" + self.flag.removeprefix("--").replace("-", "_")


_SERVER = "no server is called"
_TOKENIZER = "lengths are token counts: no tokenizer"
_SAMPLING = "sampling does not change what a simulated step costs"
_PLOTS = "cbsim report draws a run saved with --out"
_DATASET = "an option of a dataset cbsim does not read"
_TRACE_LABELS = "cbsim reads a trace's columns by name (timestamp, input_length, output_length, hash_ids)"  # fmt: skip

IGNORED: tuple[Ignored, ...] = (
    Ignored("--host", "value", _SERVER),
    Ignored("--port", "value", _SERVER),
    Ignored("--base-url", "value", _SERVER),
    Ignored("--endpoint", "value", _SERVER),
    Ignored("--header", "values", _SERVER),
    Ignored("--insecure", "flag", _SERVER),
    Ignored("--ready-check-timeout-sec", "value", _SERVER),
    Ignored("--request-id-prefix", "value", _SERVER),
    Ignored("--served-model-name", "value", _SERVER),
    Ignored("--tokenizer", "value", _TOKENIZER),
    Ignored("--tokenizer-mode", "value", _TOKENIZER),
    Ignored("--trust-remote-code", "flag", _TOKENIZER),
    Ignored("--skip-tokenizer-init", "flag", _TOKENIZER),
    Ignored(
        "--ignore-eos",
        "flag",
        "a simulated output always runs to its requested length, as with --ignore-eos",
    ),
    Ignored("--use-beam-search", "flag", _SAMPLING),
    Ignored("--logprobs", "value", _SAMPLING),
    Ignored("--top-p", "value", _SAMPLING),
    Ignored("--top-k", "value", _SAMPLING),
    Ignored("--min-p", "value", _SAMPLING),
    Ignored("--temperature", "value", _SAMPLING),
    Ignored("--frequency-penalty", "value", _SAMPLING),
    Ignored("--presence-penalty", "value", _SAMPLING),
    Ignored("--repetition-penalty", "value", _SAMPLING),
    Ignored("--extra-body", "value", _SAMPLING),
    Ignored("--chat-template-kwargs", "value", _SAMPLING),
    Ignored("--disable-tqdm", "flag", "cbsim prints one progress line per load point"),
    Ignored("--profile", "flag", "no server to profile"),
    Ignored("--plot-timeline", "flag", _PLOTS),
    Ignored("--timeline-itl-thresholds", "value", _PLOTS),
    Ignored("--plot-dataset-stats", "flag", _PLOTS),
    Ignored("--num-warmups", "value", "a simulated server has nothing to warm up"),
    Ignored("--lora-modules", "values", "LoRA adapters are not modelled"),
    Ignored("--lora-assignment", "value", "LoRA adapters are not modelled"),
    Ignored("--probe-request-rate", "value", "probe requests are not simulated"),
    Ignored("--no-stream", "flag", _DATASET),
    Ignored("--no-oversample", "flag", _DATASET),
    Ignored("--skip-chat-template", "flag", _DATASET),
    Ignored("--enable-multimodal-chat", "flag", _DATASET),
    Ignored("--disable-shuffle", "flag", _DATASET),
    Ignored("--custom-output-len", "value", _DATASET),
    Ignored("--custom-ensure-client-side-data", "flag", _DATASET),
    Ignored("--spec-bench-output-len", "value", _DATASET),
    Ignored("--spec-bench-category", "value", _DATASET),
    Ignored("--sharegpt-output-len", "value", _DATASET),
    Ignored("--blazedit-min-distance", "value", _DATASET),
    Ignored("--blazedit-max-distance", "value", _DATASET),
    Ignored("--asr-max-audio-len-sec", "value", _DATASET),
    Ignored("--asr-min-audio-len-sec", "value", _DATASET),
    Ignored("--random-batch-size", "value", _DATASET),
    Ignored("--no-reranker", "flag", _DATASET),
    Ignored("--random-mm-base-items-per-request", "value", _DATASET),
    Ignored("--random-mm-num-mm-items-range-ratio", "value", _DATASET),
    Ignored("--random-mm-limit-mm-per-prompt", "value", _DATASET),
    Ignored("--random-mm-bucket-config", "value", _DATASET),
    Ignored("--hf-subset", "value", _DATASET),
    Ignored("--hf-split", "value", _DATASET),
    Ignored("--hf-name", "value", _DATASET),
    Ignored("--hf-output-len", "value", _DATASET),
    Ignored("--bfcl-categories", "value", _DATASET),
    Ignored("--speed-bench-dataset-subset", "value", _DATASET),
    Ignored("--speed-bench-output-len", "value", _DATASET),
    Ignored("--speed-bench-category", "value", _DATASET),
    Ignored("--timed-trace-label-timestamp", "value", _TRACE_LABELS),
    Ignored("--timed-trace-label-input-length", "value", _TRACE_LABELS),
    Ignored("--timed-trace-label-output-length", "value", _TRACE_LABELS),
    Ignored("--timed-trace-label-hash-ids", "value", _TRACE_LABELS),
)
"""vLLM's flags that ``cbsim bench`` takes without simulating, each with the reason it prints."""

VARIADIC = ("--goodput", "--metadata", "--header", "--lora-modules")
"""vLLM's options that take several values after one flag."""

VLLM_DATASETS = (
    "random", "sharegpt", "burstgpt", "sonnet", "random-mm", "random-rerank", "hf", "custom",
    "custom_mm", "custom_audio", "custom_image", "prefix_repetition", "spec_bench",
    "speed_bench", "timed_trace", "txt-slices", "bfcl",
)  # fmt: skip
"""``--dataset-name`` values vLLM has had."""

SIMULATED_DATASETS = ("random", "prefix_repetition", "sonnet", "timed_trace")
"""The datasets whose prompts cbsim simulates; the others' prompts are text it cannot count."""


def ignored_options(command: F) -> F:
    """Add every :data:`IGNORED` flag to ``command`` (hidden from ``--help``: docs/bench.md lists
    them)."""
    for item in reversed(IGNORED):
        if item.takes == "flag":
            option = click.option(item.flag, item.dest, is_flag=True, hidden=True)
        else:
            option = click.option(item.flag, item.dest, multiple=True, hidden=True)
        command = option(command)
    return command


def pop_ignored(options: dict[str, Any]) -> list[str]:
    """Remove the ignored flags from the command's keywords; the ones given, in vLLM's order."""
    given = []
    for item in IGNORED:
        if options.pop(item.dest, None):
            given.append(item.flag)
    return given


def ignored_note(flags: list[str], extra: Mapping[str, str] | None = None) -> str | None:
    """One line naming the ignored flags given, grouped by why (``extra``: more flags and why)."""
    why_of = {item.flag: item.why for item in IGNORED}
    groups: dict[str, list[str]] = {}
    for flag in flags:
        groups.setdefault(why_of[flag], []).append(flag)
    for flag, why in (extra or {}).items():
        groups.setdefault(why, []).append(flag)
    if not groups:
        return None
    parts = [f"{', '.join(names)} ({why})" for why, names in groups.items()]
    return "ignored in a simulation: " + "; ".join(parts)
