"""Scheduler settings that quietly defeat batching, found before they cost a user a wrong answer.

A token budget is a cap on the new tokens of one iteration. Set below what a prompt needs beside
the requests already decoding, it does not fail: the scheduler just never mixes that prompt into
a running batch, and the replica runs at batch 1 while the figures look plausible. These checks
compare the settings with the workload's prompt lengths and say so in one sentence each; the
command line prints them and the run's summary carries them (``warnings``).
"""

from __future__ import annotations

import numpy as np

from cbsim.schema.scheduler import Scheduler


def _share(mask: np.ndarray) -> str:
    return f"{100.0 * float(mask.mean()):.3g}%"


def scheduler_warnings(config: Scheduler, prompts: np.ndarray) -> list[str]:
    """Warnings for this scheduler configuration and these prompt lengths (tokens)."""
    if len(prompts) == 0:
        return []
    budget = config.max_batched_tokens
    median = int(np.median(prompts))
    warnings: list[str] = []
    if config.kind == "sarathi" or (config.kind == "orca" and config.chunked_prefill):
        # a prompt that does not fit is chunked: only a budget the decodes fill holds prompts back
        if budget <= config.max_batch_size:
            given = config.model_fields_set  # the budget by the name the user gave it
            alias = "chunk_size" in given and "max_batched_tokens" not in given
            warnings.append(
                f"scheduler.{'chunk_size' if alias else 'max_batched_tokens'} ({budget}) is not "
                f"above max_batch_size ({config.max_batch_size}): with a full batch decoding no "
                "prefill token fits, and new prompts wait for requests to finish"
            )
    elif config.kind in ("orca", "static"):
        over = prompts > budget
        if over.any():
            warnings.append(
                f"scheduler.max_batched_tokens ({budget}) is below {_share(over)} of the prompts: "
                "each of those waits for an idle replica and then runs alone"
            )
        if config.kind == "orca":
            room = budget - median
            if 0 <= room < 1:
                warnings.append(
                    f"scheduler.max_batched_tokens ({budget}) leaves no room for a running decode "
                    f"beside a median prompt ({median} tokens): prompts start only on an idle "
                    "replica, so batches stay at about 1"
                )
            elif 1 <= room < config.max_batch_size:
                warnings.append(
                    f"scheduler.max_batched_tokens ({budget}) lets a median prompt ({median} "
                    f"tokens) join a running batch only while at most {room} requests decode "
                    f"(max_batch_size {config.max_batch_size}); the token budget is usually at "
                    "least the prompt plus the batch"
                )
    elif config.kind == "prefill_first":
        over = prompts > budget
        if over.any():
            warnings.append(
                f"scheduler.max_batched_tokens ({budget}) is below {_share(over)} of the prompts: "
                "each of those is prefilled alone, beyond the budget"
            )
    return warnings
