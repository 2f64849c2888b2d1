"""Shared-prefix prompt pools: the recurring prompts benchmark tools send.

Serving benchmarks that exercise the prefix cache do not send random text: SGLang's
``generated-shared-prefix`` dataset, vLLM's ``prefix_repetition`` dataset and genai-perf's prefix
prompts build a fixed set of system prompts, each with its questions, and send prompts drawn from
that set, so the server sees the same prefixes again and again. ``workload.prompt_pool``
(:class:`cbsim.schema.workload.PromptPool`) describes such a set: ``system_prompts`` system prompts and
``questions`` questions for each, their lengths drawn once when the workload is built (named
streams ``prompt_pool.system_tokens`` and ``prompt_pool.question_tokens``). Each request then
picks a system prompt (Zipf popularity, stream ``prompt_pool.system``) and one of its questions
(uniformly, stream ``prompt_pool.question``): prompt ``s · questions + q``.

Its content for the prefix cache is two segments, as a session's is (:mod:`cbsim.workload.sessions`):
the system prompt (content id ``-1 - s``, as a session's system prompt template) and the
question (content id ``s · questions + q``), keyed by :class:`cbsim.memory.prefix_cache.PrefixInterner`
so that a question counts as the same content only after the same system prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cbsim.common.rng import stream
from cbsim.schema.workload import Length, PromptPool
from cbsim.workload.lengths import sample_lengths
from cbsim.workload.sessions import zipf_choice

__all__ = ["PoolPrompts", "draw_prompt_pool"]


@dataclass(frozen=True)
class PoolPrompts:
    """A drawn prompt pool: each system prompt's length and each question's, question q of system
    prompt s at ``s · questions + q``."""

    system_tokens: np.ndarray
    question_tokens: np.ndarray
    questions: int
    zipf: float

    @property
    def size(self) -> int:
        """Distinct prompts in the pool."""
        return len(self.question_tokens)

    def prompt_tokens(self, picks: np.ndarray) -> np.ndarray:
        """The prompt lengths of pool prompts ``picks``."""
        lengths: np.ndarray = (
            self.system_tokens[picks // self.questions] + self.question_tokens[picks]
        )
        return lengths

    def content(self, pick: int) -> tuple[list[int], list[int]]:
        """Prompt ``pick``'s content ids and their sizes in tokens (see the module docstring)."""
        system = pick // self.questions
        return [-1 - system, pick], [
            int(self.system_tokens[system]),
            int(self.question_tokens[pick]),
        ]

    def picker(self, seed: int) -> Callable[[int], np.ndarray]:
        """Draws of the next ``n`` requests' prompts, from continuing streams (a run that sends
        more requests extends the sequence and never changes its start)."""
        systems = stream(seed, "prompt_pool.system")
        questions = stream(seed, "prompt_pool.question")
        count = len(self.system_tokens)

        def pick(n: int) -> np.ndarray:
            system = zipf_choice(count, self.zipf, n, systems)
            question = questions.integers(0, self.questions, n)
            picks: np.ndarray = system * self.questions + question
            return picks

        return pick


def draw_prompt_pool(config: PromptPool, seed: int, source: str | None = None) -> PoolPrompts:
    """The prompt pool ``config`` describes, its lengths drawn from their streams of ``seed``."""

    def lengths(spec: Length, count: int, name: str) -> np.ndarray:
        rng = stream(seed, f"prompt_pool.{name}")
        return sample_lengths(spec, count, rng, field=f"workload.prompt_pool.{name}", source=source)

    return PoolPrompts(
        system_tokens=lengths(config.system_tokens, config.system_prompts, "system_tokens"),
        question_tokens=lengths(
            config.question_tokens, config.system_prompts * config.questions, "question_tokens"
        ),
        questions=config.questions,
        zipf=config.zipf,
    )
