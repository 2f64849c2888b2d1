"""Named batch-size → draft-length tables, as the serving engines that ship such a table take it.

Pure data (no cbsim imports), so that the scenario schema can resolve ``speculative.policy:
{kind: batch_table, preset: NAME}`` into its ``table`` rows ``(min_batch, max_batch, k)``.

No engine ships a *default* table: each takes a user's mapping, and the values below are the
examples their own pull requests document, translated into cbsim's inclusive rows with the
engine's own gap and overflow rules:

* ``vllm-dsd-example`` — vLLM's Dynamic Speculative Decoding
  (``speculative_config.num_speculative_tokens_per_batch_size``, vLLM PR #32374,
  https://github.com/vllm-project/vllm/pull/32374). Its example ``{"1-16": 3, "64-128": 2,
  "256-4096": 0}``: ranges are inclusive and a batch size in a gap inherits the previous range's
  K, so 17–63 drafts 3 and 129–255 drafts 2; K is clamped to ``num_speculative_tokens`` (3).
* ``trtllm-draft-len-schedule-example`` — TensorRT-LLM's ``speculative_config.draft_len_schedule``
  (TensorRT-LLM PR #10860, https://github.com/NVIDIA/TensorRT-LLM/pull/10860), on every
  algorithm of the one-model path. Its example ``{4: 4, 8: 2, 32: 1}``: the key is the largest
  batch size of its band, so 1–4 draft 4, 5–8 draft 2, 9–32 draft 1 and above 32 the draft length
  is 0 ("implicit max concurrency control", speculation off).
* ``trtllm-max-concurrency-8`` — TensorRT-LLM's ``max_concurrency`` (same PR), which is
  translated into such a schedule: ``max_draft_len`` (here 3) up to the concurrency (here 8), 0
  above.

TensorRT-LLM's 0 band has a known defect (TensorRT-LLM PR #16888,
https://github.com/NVIDIA/TensorRT-LLM/pull/16888): while a request drafts 0 the one-model
drafter's state is not refreshed, and its acceptance collapses for the rest of the request once
speculation resumes. cbsim reproduces it with ``speculative.drafter_state_at_k0: stale``.
"""

from __future__ import annotations

from typing import Final

BIG: Final = 100_000

# name → (rows (min_batch, max_batch, k), source)
BATCH_TABLE_PRESETS: Final[dict[str, tuple[tuple[tuple[int, int, int], ...], str]]] = {
    "vllm-dsd-example": (
        ((1, 63, 3), (64, 255, 2), (256, BIG, 0)),
        "https://github.com/vllm-project/vllm/pull/32374",
    ),
    "trtllm-draft-len-schedule-example": (
        ((1, 4, 4), (5, 8, 2), (9, 32, 1), (33, BIG, 0)),
        "https://github.com/NVIDIA/TensorRT-LLM/pull/10860",
    ),
    "trtllm-max-concurrency-8": (
        ((1, 8, 3), (9, BIG, 0)),
        "https://github.com/NVIDIA/TensorRT-LLM/pull/10860",
    ),
}


def preset_names() -> list[str]:
    """Names of the batch-table presets."""
    return sorted(BATCH_TABLE_PRESETS)


def preset_table(name: str) -> list[tuple[int, int, int]]:
    """The rows of preset ``name`` (KeyError with the known names when there is none)."""
    if name not in BATCH_TABLE_PRESETS:
        raise KeyError(f"unknown batch_table preset {name!r}; known: {', '.join(preset_names())}")
    return list(BATCH_TABLE_PRESETS[name][0])


def preset_source(name: str) -> str:
    """Where preset ``name``'s table is documented."""
    return BATCH_TABLE_PRESETS[name][1]
