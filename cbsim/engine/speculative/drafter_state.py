"""What the drafter must share with the target, and what it loses when an engine skips it.

Two engine behaviours reproduced here:

* **Vocabulary.** A separate draft model proposes token ids that the target verifies; the two
  must share one tokenizer (vocabulary), or its drafts are meaningless ids and acceptance is
  near zero. TensorRT-LLM's speculative-decoding guide says so for draft/target
  ("make sure that the draft and target models were trained with the same tokenizer, else the
  acceptance rate is extremely low",
  https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html). cbsim refuses such
  a scenario (exit 2) with the two vocabularies named (:func:`check_vocabulary`): Llama-2
  (32,000 ids) cannot draft for Llama-3 (128,256).
* **TensorRT-LLM's k = 0 drafter state.** One-model speculative decoding keeps cross-iteration
  drafter state (the draft KV cache, MTP's hidden states) that is only refreshed while the draft
  forward runs. When a ``draft_len_schedule`` (or ``max_concurrency``) resolves to 0, the drafter
  is skipped, positions are allocated but never written, and once speculation resumes "the
  acceptance rate silently collapsed for the remainder of every affected request"
  (TensorRT-LLM PR #16888, https://github.com/NVIDIA/TensorRT-LLM/pull/16888, which fixes it by
  flooring the schedule at 1). With ``speculative.drafter_state_at_k0: stale`` a request that the
  k policy gives k = 0 for one step is marked stale for the rest of its life
  (:func:`mark_skipped`), and each of its later drafts survives the base acceptance draw only
  with probability ``stale_acceptance_scale`` (:func:`stale_accepted`), so its conditional
  acceptance becomes α · scale per position. The thinning draws come from their own named stream
  (``acceptance:stale``), so turning the option on changes no other draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError


class DrafterStaleness(Protocol):
    """What this module needs of a request's speculative decoder
    (:class:`cbsim.engine.speculative.decoder.SpecState`): whether its drafter skipped a step of it."""

    stale: bool


def vocabulary_problem(draft_name: str, target: Any) -> str | None:
    """Why ``draft_name`` cannot draft for ``target`` (a model shape), or None when it can."""
    draft = get_model(draft_name)
    if draft.vocab_size == target.vocab_size:
        return None
    return (
        f"draft model {draft.name} has a vocabulary of {draft.vocab_size:,} tokens and the target "
        f"{target.name} one of {target.vocab_size:,}: a draft model must share the target's "
        f"tokenizer (its drafts are token ids the target verifies); pick a draft of the "
        f"target's family"
    )


def check_vocabulary(proposer: Any, target: Any) -> None:
    """Refuse a ``draft_model`` proposer whose vocabulary differs from the target cost model's."""
    if getattr(proposer, "kind", None) != "draft_model":
        return
    shape = getattr(target, "model", None)
    if shape is None or not hasattr(shape, "vocab_size"):
        return
    problem = vocabulary_problem(proposer.model, shape)
    if problem is not None:
        raise CbsimError(problem, field="speculative.proposer.model")


def mark_skipped(states: Sequence[DrafterStaleness], ks: npt.NDArray[np.int64]) -> None:
    """Mark stale every request whose k the policy set to 0 this step (its drafter skipped it)."""
    for state, k in zip(states, ks.tolist(), strict=True):
        if k == 0:
            state.stale = True


def stale_accepted(
    accepted: npt.NDArray[np.int64],
    states: Sequence[DrafterStaleness],
    scale: float,
    rng: np.random.Generator,
) -> npt.NDArray[np.int64]:
    """``accepted`` with each stale request's count thinned: its leading accepted drafts survive
    one by one with probability ``scale`` (the count stays within 0..accepted)."""
    stale = [i for i, s in enumerate(states) if s.stale]
    if not stale:
        return accepted
    out = accepted.copy()
    rows = np.asarray(stale, dtype=np.int64)
    width = int(out[rows].max()) if len(rows) else 0
    if width == 0:
        return out
    keep = rng.random((len(rows), width)) < scale
    keep &= np.arange(width)[None, :] < out[rows][:, None]
    out[rows] = np.cumprod(keep, axis=1).sum(axis=1)
    return out


__all__ = [
    "DrafterStaleness",
    "check_vocabulary",
    "mark_skipped",
    "stale_accepted",
    "vocabulary_problem",
]
