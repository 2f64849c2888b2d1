"""--set of a block's kind starts the block afresh: the file's keys the new kind does not read
are left out, the user's own keys are kept (and refused if the new kind does not read them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario, read_yaml

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


ARRIVALS: dict[str, dict[str, object]] = {
    "poisson": {"rate": 2.0},
    "gamma": {"rate": 2.0, "cv": 2.0},
    "closed_loop": {"concurrency": 3},
    "offline": {},
    "stages": {"stages": [{"duration_s": 10.0, "rate": 5.0}, {"rate": 8.0, "duration_s": 5.0}]},
    "rate_curve": {"points": [[0.0, 1.0], [10.0, 5.0]]},
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
    typed=st.booleans(),
)
def test_any_kind_with_its_own_keys_loads_and_holds_only_them(
    arrival: str, prompt: str, output: str, kind_first: bool, typed: bool
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
    # typed: as on the command line, each value in YAML's flow style (JSON is YAML)
    given_as = [f"{k}={json.dumps(v)}" for k, v in overrides.items()] if typed else overrides
    scenario = load_scenario(CHAT, given_as)
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
            assert _plain(getattr(section, key)) == value


def _plain(value: object) -> object:
    """A section's value as a user types it: models as their set keys, tuples as lists."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return value


SPEC = SCENARIOS / "spec-eagle-goodput.yaml"  # eagle proposer, per_request acceptance, goodput
STAGED = SCENARIOS / "staged-load-llama3-8b-h100.yaml"  # stages arrival, no num_requests
SPECULATIVE = {
    "proposer": {"draft_model": {}, "ngram": {}, "mtp": {"layers": 1}},
    "acceptance": {"iid": {"alpha": 0.7}, "positional": {}, "token_level": {}},
    "policy": {
        "fixed": {"k": 3},
        "threshold": {},
        "ewma_lookahead": {},
        "heuristic": {},
        "batch_table": {},
        "adaptive_hysteresis": {},
    },
}


@pytest.mark.parametrize(
    ("block", "kind"), [(b, k) for b, kinds in SPECULATIVE.items() for k in kinds]
)
def test_a_speculative_block_changes_kind_and_drops_the_old_keys(block: str, kind: str) -> None:
    keys = SPECULATIVE[block][kind]
    overrides = [f"speculative.{block}.kind={kind}"]
    overrides += [f"speculative.{block}.{k}={json.dumps(v)}" for k, v in keys.items()]
    section = getattr(load_scenario(SPEC, overrides).speculative, block)
    assert section.kind == kind
    shared = set(read_yaml(SPEC)["speculative"][block]) & set(type(section).model_fields)
    assert section.model_fields_set <= {"kind", *keys, *shared}  # the file's keys it reads stay


def test_stages_from_the_command_line_replace_the_files_request_count() -> None:
    scenario = load_scenario(
        CHAT,
        ["workload.arrival.kind=stages", "workload.arrival.stages=[{duration_s: 10, rate: 5}]"],
    )
    assert scenario.workload.num_requests is None
    assert [(s.rate, s.duration_s) for s in scenario.workload.arrival.stages] == [(5, 10)]  # type: ignore[union-attr]


def test_a_request_count_the_user_gives_with_stages_is_still_an_error() -> None:
    with pytest.raises(CbsimError, match="leave out num_requests"):
        load_scenario(
            CHAT,
            [
                "workload.arrival.kind=stages",
                "workload.arrival.stages=[{duration_s: 10, rate: 5}]",
                "workload.num_requests=10",
            ],
        )


def test_stages_become_poisson_without_the_stages_keys() -> None:
    scenario = load_scenario(
        STAGED,
        ["workload.arrival.kind=poisson", "workload.arrival.rate=3", "workload.num_requests=50"],
    )
    assert scenario.workload.arrival.model_fields_set <= {"kind", "rate"}  # type: ignore[union-attr]


def test_an_unknown_key_beside_stages_lists_the_stages_keys() -> None:
    with pytest.raises(CbsimError, match=r"known here: kind, stages, process, gap_s\)"):
        load_scenario(STAGED, ["workload.arrival.rate=5"])
