"""Published per-position acceptance of drafter/target pairs, as engines report it.

Pure data (no cbsim imports), read by the scenario schema: ``speculative.acceptance: {kind:
positional, profile: NAME}`` sets ``rates`` to the profile's and ``form: unconditional``.

Every profile is vLLM's EAGLE-3 acceptance-length regression baseline
(``tests/v1/spec_decode/test_acceptance_length.py``,
https://github.com/vllm-project/vllm/blob/main/tests/v1/spec_decode/test_acceptance_length.py):
MT-Bench, 80 prompts, 256 output tokens, temperature 0, ``num_speculative_tokens = 3``. vLLM
computes ``acceptance_lengths_per_pos[i] = accepted_at_pos[i] / num_drafts`` from its
``spec_decode_num_accepted_tokens_per_pos`` counter, i.e. the **unconditional** fraction of verify
steps in which position i was accepted, and the mean acceptance length 1 + accepted / drafts =
1 + Σ rates.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class AcceptanceProfile(NamedTuple):
    """A drafter/target pair's unconditional per-position rates at ``k``, its published mean
    acceptance length, and where both are published."""

    target: str
    drafter: str
    k: int
    rates: tuple[float, ...]
    mean_acceptance_length: float
    source: str


_VLLM_CI: Final = (
    "https://github.com/vllm-project/vllm/blob/main/tests/v1/spec_decode/test_acceptance_length.py"
)

ACCEPTANCE_PROFILES: Final[dict[str, AcceptanceProfile]] = {
    "eagle3-llama-3.1-8b-mtbench": AcceptanceProfile(
        "meta-llama/Llama-3.1-8B-Instruct",
        "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
        3,
        (0.7296, 0.5208, 0.3545),
        2.60,
        _VLLM_CI,
    ),
    "eagle3-qwen3-8b-mtbench": AcceptanceProfile(
        "Qwen/Qwen3-8B",
        "RedHatAI/Qwen3-8B-speculator.eagle3",
        3,
        (0.6541, 0.3993, 0.2020),
        2.26,
        _VLLM_CI,
    ),
    "eagle3-gpt-oss-20b-mtbench": AcceptanceProfile(
        "openai/gpt-oss-20b",
        "RedHatAI/gpt-oss-20b-speculator.eagle3",
        3,
        (0.7165, 0.5120, 0.3337),
        2.56,
        _VLLM_CI,
    ),
    "eagle3-qwen3-vl-30b-a3b-mtbench": AcceptanceProfile(
        "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8",
        "nm-testing/Speculator-Qwen3-30B-MOE-VL-Eagle3",
        3,
        (0.2900, 0.0620, 0.0115),
        1.35,
        _VLLM_CI,
    ),
}


def profile_names() -> list[str]:
    """Names of the published acceptance profiles."""
    return sorted(ACCEPTANCE_PROFILES)


def acceptance_profile(name: str) -> AcceptanceProfile:
    """Profile ``name`` (KeyError naming the known ones when there is none)."""
    if name not in ACCEPTANCE_PROFILES:
        raise KeyError(f"unknown acceptance profile {name!r}; known: {', '.join(profile_names())}")
    return ACCEPTANCE_PROFILES[name]


__all__ = ["ACCEPTANCE_PROFILES", "AcceptanceProfile", "acceptance_profile", "profile_names"]
