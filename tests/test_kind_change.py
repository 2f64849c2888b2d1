"""--set of a block's kind starts the block afresh: the file's keys the new kind does not read
are left out, the user's own keys are kept (and refused if the new kind does not read them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.errors import CbsimError
from cbsim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
CHAT = SCENARIOS / "chat-llama3-8b-h100.yaml"  # poisson arrivals, lognormal lengths, vllm


def test_arrivals_become_a_closed_loop() -> None:
    scenario = load_scenario(
        CHAT, ["workload.arrival.kind=closed_loop", "workload.arrival.concurrency=4"]
    )
    assert scenario.workload.arrival.kind == "closed_loop"
    assert scenario.workload.arrival.concurrency == 4  # type: ignore[union-attr]


def test_the_order_of_the_overrides_does_not_matter() -> None:
    first = load_scenario(
        CHAT, ["workload.arrival.concurrency=4", "workload.arrival.kind=closed_loop"]
    )
    assert first.workload.arrival.concurrency == 4  # type: ignore[union-attr]


def test_lengths_become_uniform() -> None:
    scenario = load_scenario(
        CHAT,
        {
            "workload.prompt_tokens.kind": "uniform",
            "workload.prompt_tokens.low": 10,
            "workload.prompt_tokens.high": 100,
        },
    )
    assert scenario.workload.prompt_tokens.kind == "uniform"


def test_a_key_the_user_sets_that_the_new_kind_does_not_read_is_still_an_error() -> None:
    with pytest.raises(CbsimError, match="rate"):
        load_scenario(
            CHAT,
            {
                "workload.arrival.kind": "closed_loop",
                "workload.arrival.concurrency": 4,
                "workload.arrival.rate": 3,
            },
        )


def test_a_scheduler_keeps_the_keys_its_new_kind_reads() -> None:
    base = load_scenario(CHAT, {"scheduler.max_batch_size": 64})
    assert base.scheduler.kind != "static"
    static = load_scenario(CHAT, {"scheduler.max_batch_size": 64, "scheduler.kind": "static"})
    assert static.scheduler.kind == "static" and static.scheduler.max_batch_size == 64


def test_the_same_kind_changes_nothing() -> None:
    with pytest.raises(CbsimError, match="concurrency"):
        load_scenario(CHAT, {"workload.arrival.kind": "poisson", "workload.arrival.concurrency": 4})


ARRIVALS = {
    "poisson": {"rate": 2.0},
    "gamma": {"rate": 2.0, "cv": 2.0},
    "closed_loop": {"concurrency": 3},
}
LENGTHS = {
    "fixed": {"value": 100},
    "uniform": {"low": 10, "high": 200},
    "lognormal": {"mean": 300, "sigma": 0.5},
}


@settings(max_examples=20, deadline=None)
@given(
    arrival=st.sampled_from(sorted(ARRIVALS)),
    prompt=st.sampled_from(sorted(LENGTHS)),
    output=st.sampled_from(sorted(LENGTHS)),
    kind_first=st.booleans(),
)
def test_any_kind_with_its_own_keys_loads_and_holds_only_them(
    arrival: str, prompt: str, output: str, kind_first: bool
) -> None:
    overrides: dict[str, object] = {}
    for block, kind, keys in (
        ("workload.arrival", arrival, ARRIVALS[arrival]),
        ("workload.prompt_tokens", prompt, LENGTHS[prompt]),
        ("workload.output_tokens", output, LENGTHS[output]),
    ):
        pairs = [(f"{block}.{key}", value) for key, value in keys.items()]
        kind_pair = (f"{block}.kind", kind)
        for dotted, value in [kind_pair, *pairs] if kind_first else [*pairs, kind_pair]:
            overrides[dotted] = value
    scenario = load_scenario(CHAT, overrides)
    workload = scenario.workload
    for section, kind, keys in (
        (workload.arrival, arrival, ARRIVALS[arrival]),
        (workload.prompt_tokens, prompt, LENGTHS[prompt]),
        (workload.output_tokens, output, LENGTHS[output]),
    ):
        assert section.kind == kind
        if kind != "poisson" and kind != "lognormal":  # a kind the file's block did not have
            assert section.model_fields_set <= {"kind", *keys}
        for key, value in keys.items():
            assert getattr(section, key) == value
