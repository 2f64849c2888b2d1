"""Multi-turn sessions: conversations whose every turn resends the conversation so far.

A chat or agent session is a sequence of turns. Turn t's prompt is the whole conversation up to
it: an optional system prompt shared with other sessions, every earlier user message and answer,
and the new user message; the model answers it, and the user sends the next turn a think time
after the answer has reached them. So prompts grow turn by turn, and most of each prompt is a
prefix the serving engine has just computed for the previous turn: what prefix caching
(:mod:`cbsim.memory.prefix_cache`) reuses. A session's turns arrive one after another, never together:
the next one waits for the previous answer, as in a closed loop with one client per session.

Everything random is drawn when the workload is built, each from its own named stream of the
scenario seed: session starts (``arrivals``, drawn on the workload's arrival clock by
:mod:`cbsim.workload.arrivals` and handed here), turns per session, user message and answer lengths
per turn, the system prompt templates' lengths and each session's template (Zipf popularity).
The sessions are numbered in start order; turn t of session s is request ``first[s] + t`` in the
draw, and gets its id when it is sent.

The content of a turn's prompt is a list of segments for the prefix cache: the template
(content id ``-1 - template``), then for each earlier turn u its user message (``2 · g``) and
its answer (``2 · g + 1``), g being that turn's index in the draw, then its own message; the
request's answer follows as one more segment beyond the prompt, cached when the request finishes
so that the next turn finds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cbsim.common.rng import stream
from cbsim.schema.workload import Length, Sessions
from cbsim.workload.lengths import sample_lengths

__all__ = ["SessionWorkload", "Turn", "draw_sessions"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn to send: its lengths and its prompt's content segments (ids and sizes), the
    answer's segment last."""

    session: int
    turn: int
    prompt_tokens: int
    output_tokens: int
    content: list[int]
    sizes: list[int]


@dataclass
class SessionWorkload:
    """The drawn sessions (see the module docstring)."""

    starts: np.ndarray  # start time of each session, ascending
    turns: np.ndarray  # turns of each session
    first: np.ndarray  # draw index of each session's first turn
    user_tokens: np.ndarray  # per turn in the draw
    answer_tokens: np.ndarray
    template: np.ndarray  # each session's system prompt template (-1: none)
    template_tokens: np.ndarray
    think_time_s: float
    think_time_random: bool

    def __len__(self) -> int:
        """Turns drawn: the most requests the sessions can send."""
        return int(self.turns.sum())

    def turn(self, session: int, turn: int) -> Turn:
        """Turn ``turn`` of ``session``: the conversation so far as its prompt."""
        first = int(self.first[session])
        content: list[int] = []
        sizes: list[int] = []
        template = int(self.template[session])
        if template >= 0:
            content.append(-1 - template)
            sizes.append(int(self.template_tokens[template]))
        for u in range(turn):
            g = first + u
            content += [2 * g, 2 * g + 1]
            sizes += [int(self.user_tokens[g]), int(self.answer_tokens[g])]
        g = first + turn
        content.append(2 * g)
        sizes.append(int(self.user_tokens[g]))
        prompt = sum(sizes)
        answer = int(self.answer_tokens[g])
        content.append(2 * g + 1)
        sizes.append(answer)
        return Turn(session, turn, prompt, answer, content, sizes)

    def prompt_lengths(self) -> np.ndarray:
        """The prompt length of every turn drawn, in draw order."""
        out = np.empty(len(self), dtype=np.int64)
        for session, (first, turns) in enumerate(zip(self.first, self.turns, strict=True)):
            template = int(self.template[session])
            base = int(self.template_tokens[template]) if template >= 0 else 0
            rows = slice(int(first), int(first) + int(turns))
            history = np.cumsum(self.user_tokens[rows] + self.answer_tokens[rows])
            out[rows] = base + history - self.answer_tokens[rows]
        return out

    def think(self, rng: np.random.Generator) -> float:
        """A think time between an answer and the next turn."""
        if self.think_time_random and self.think_time_s > 0.0:
            return float(rng.exponential(self.think_time_s))
        return self.think_time_s


def zipf_choice(count: int, exponent: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of ranks 0..count-1 with probability proportional to 1 / (rank + 1)**exponent."""
    weights = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** exponent
    return rng.choice(count, size=n, p=weights / weights.sum())


def draw_sessions(
    config: Sessions, starts: np.ndarray, seed: int, source: str | None = None
) -> SessionWorkload:
    """Draw sessions starting at ``starts`` (their turns, messages, answers and system prompt
    templates, each from its own stream of ``seed``)."""
    n = len(starts)

    def lengths(spec: Length, count: int, name: str) -> np.ndarray:
        field = f"workload.sessions.{name}"
        rng = stream(seed, f"sessions.{name}")
        return sample_lengths(spec, count, rng, field=field, source=source)

    turns = lengths(config.turns, n, "turns")
    total = int(turns.sum())
    first = (np.cumsum(turns) - turns).astype(np.int64)  # each session's first turn (none: empty)
    template = np.full(n, -1, dtype=np.int64)
    template_tokens = np.zeros(0, dtype=np.int64)
    system = config.system_prompt
    if system is not None:
        template_tokens = lengths(system.tokens, system.templates, "system_prompt.tokens")
        template = zipf_choice(system.templates, system.zipf, n, stream(seed, "sessions.template"))
    return SessionWorkload(
        starts=starts,
        turns=turns,
        first=first,
        user_tokens=lengths(config.user_tokens, total, "user_tokens"),
        answer_tokens=lengths(config.answer_tokens, total, "answer_tokens"),
        template=template,
        template_tokens=template_tokens,
        think_time_s=config.think_time_s,
        think_time_random=config.think_time == "exponential",
    )
