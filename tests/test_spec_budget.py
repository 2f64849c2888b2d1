"""Speculation under a token budget (issue 38): a step's verify tokens count in the budget.

vLLM V1 schedules a running request's ``num_tokens_with_spec - num_computed_tokens`` tokens,
capped by the token budget, and trims its drafts to what was scheduled; TensorRT-LLM counts a
generation request as ``1 + numDraftTokens`` against ``max_num_tokens``. Under ``sarathi`` and
``orca`` every step's prefill chunks, plain decodes and verify tokens (k + 1 per speculating
request) stay within ``max_batched_tokens``, stepped or fast-forwarded alike; the drafts are cut in
batch order to the room the scheduled tokens leave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import cbsim
from tests.test_fuzz_valid_scenarios import frames_differ

BUDGET = 40


def _spec_scenario(kind: str, policy: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Thirty requests at 5 per second on Llama-3-8B with an EAGLE head, a budget of
    :data:`BUDGET` tokens and room for 64 requests: k × batch far over the budget."""
    return {
        "seed": 5,
        "workload": {
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate": 5.0},
            "prompt_tokens": {"kind": "uniform", "low": 4, "high": 60},
            "output_tokens": {"kind": "uniform", "low": 40, "high": 200},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": kind, "max_batched_tokens": BUDGET, "max_batch_size": 64},
        "speculative": {
            "enabled": True,
            "proposer": {"kind": "eagle"},
            "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
            "policy": policy,
        },
        **extra,
    }


def scheduled_tokens(iterations: pd.DataFrame) -> pd.Series:
    """Each step's scheduled tokens as the engines count them: prefill chunks, plain decodes and
    verify tokens (k + 1 per speculating request)."""
    return iterations["prefill_tokens"] + iterations["decode_tokens"] + iterations["verify_tokens"]


POLICIES = {
    "fixed": {"kind": "fixed", "k": 6},
    "goodput": {"kind": "goodput", "k_max": 8},
    "vllm-dsd": {"kind": "batch_table", "preset": "vllm-dsd-example"},
}


@pytest.mark.parametrize("kind", ["sarathi", "orca"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_verify_tokens_stay_within_the_step_budget(kind: str, policy: str) -> None:
    """Verify tokens took a step up to 148 tokens over a budget of 64 (sarathi) before drafts
    counted; a prompt alone on an idle replica is the one exception (orca without chunked
    prefill admits it whole)."""
    data = _spec_scenario(kind, POLICIES[policy])
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    it = stepped.iterations
    lone_prompt = (it["batch_size"] == 1) & (it["verify_tokens"] == 0) & (it["decode_tokens"] == 0)
    over = (scheduled_tokens(it) > BUDGET) & ~lone_prompt
    assert not over.any(), it[over].head()
    assert it["drafted_tokens"].sum() > 0  # it still speculates
    forwarded = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": True}))
    assert frames_differ(stepped, forwarded) is None
    assert forwarded.run_info["fast_forward"]


def test_drafts_are_cut_in_batch_order() -> None:
    """The first requests of the batch keep their drafts; the budget's last tokens go to the
    next one's, and the rest verify none (each still decodes its one token)."""
    data = _spec_scenario("sarathi", POLICIES["fixed"])
    data["workload"].update(num_requests=8, arrival={"kind": "poisson", "rate": 1e4})
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 100}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 2}
    data["scheduler"]["max_batched_tokens"] = 20  # 8 decodes + 12 drafts: 6 + 6, then none
    it = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False})).iterations
    decoding = it[it["prefill_tokens"] == 0]
    assert len(decoding) > 50
    assert (decoding["drafted_tokens"] <= 20 - decoding["batch_size"]).all()
    first = decoding.iloc[0]
    assert (first["batch_size"], first["drafted_tokens"], first["k_max"], first["k_min"]) == (
        8, 12, 6, 0,
    )  # fmt: skip
    assert first["decode_tokens"] == 6 and first["verify_tokens"] == 14


def test_draft_room() -> None:
    from cbsim.engine.speculative.draft_reservation import UNBUDGETED, draft_room

    assert draft_room(64, 20) == 44
    assert draft_room(64, 80) == 0  # a lone prompt over the budget leaves no room
    assert draft_room(None, 10**6) == UNBUDGETED


# --------------------------------------------------------------------------- memory left by a head

SCENARIO = "scenarios/spec-eagle-goodput.yaml"


def test_validate_refuses_a_head_that_leaves_no_kv_cache() -> None:
    """At ``gpu_memory_utilization`` 0.228 the EAGLE head's weights leave no KV block: validate
    passed it (its fit check left the head out) and the run rejected every request; both now
    refuse it with one message that names the proposer."""
    from click.testing import CliRunner

    from cbsim.cli.commands import cli

    args = [SCENARIO, "--set", "cluster.gpu_memory_utilization=0.228"]
    runner = CliRunner()
    checked = runner.invoke(cli, ["validate", *args])
    ran = runner.invoke(cli, ["run", *args, "--set", "workload.num_requests=3"])
    assert checked.exit_code == ran.exit_code == 2, checked.output
    assert "eagle proposer's weights and KV included" in checked.output
    assert checked.output.splitlines()[-1] == ran.output.splitlines()[-1]


def test_validate_warns_of_requests_beyond_the_kv_cache() -> None:
    """A cache of 384 tokens beside the head: validate names the requests the run rejects."""
    from cbsim.run.preflight import preflight

    overrides = ["cluster.gpu_memory_utilization=0.233", "workload.num_requests=60"]
    scenario = cbsim.load_scenario(SCENARIO, overrides)
    warned = [w for w in preflight(scenario).warnings if "whole KV cache" in w]
    assert warned and warned[0].startswith("39 of 60 requests are larger")
    assert cbsim.simulate(scenario).summary["rejected"] == 39


# --------------------------------------------------------------------------- inert settings


def test_spec_advise_warns_of_an_mtp_proposer_as_run_does() -> None:
    """``spec-advise --proposer mtp`` on a model without MTP layers said nothing where ``cbsim
    run`` warns; it now gives the run's warning."""
    from cbsim.engine.speculative.advise import AdviseSetup, advise_warnings, scenario
    from cbsim.schema.setting_warnings import ignored_settings

    setup = AdviseSetup("llama-3-8b", "h100-sxm", proposer="mtp")
    run = ignored_settings(
        cbsim.load_scenario(scenario(setup, 1.0, {"kind": "fixed", "k": 3})), False
    )
    assert [w for w in run if "ships no multi-token-prediction" in w]
    assert advise_warnings(setup) == run
    assert advise_warnings(AdviseSetup("llama-3-8b", "h100-sxm")) == []


def test_a_stale_drafter_with_speculation_off_is_warned(tmp_path: Path) -> None:
    """``speculative.enabled: false`` beside a stale drafter and a proposer ran silently; now
    validate and the run warn (by value: the written scenario, which gives every key, warns
    alike, and a plain run's does not), and ``--compare-no-spec``'s baseline does not."""
    from cbsim.run.preflight import preflight

    data = _spec_scenario("sarathi", POLICIES["fixed"])
    data["workload"]["num_requests"] = 4
    off = {**data, "speculative": {**data["speculative"], "enabled": False}}
    off["speculative"]["drafter_state_at_k0"] = "stale"
    scenario = cbsim.load_scenario(off)
    warned = [w for w in preflight(scenario).warnings if "speculative.enabled is false" in w]
    assert warned == [
        "speculative.proposer, speculative.acceptance, speculative.policy, "
        "speculative.drafter_state_at_k0 are ignored: speculative.enabled is false, so nothing "
        "drafts (set speculative.enabled: true to speculate, or remove them)"
    ]
    results = cbsim.simulate(scenario)
    assert warned[0] in results.summary["warnings"]
    written = results.write(tmp_path / "off")
    again = cbsim.simulate(cbsim.load_scenario(written / "scenario.yaml", written=True))
    assert again.summary["warnings"] == results.summary["warnings"]
    plain = cbsim.simulate(cbsim.load_scenario({**data, "speculative": {"enabled": False}}))
    assert "speculative" not in plain.summary["warnings"]
    plain_written = plain.write(tmp_path / "plain")
    reread = cbsim.load_scenario(plain_written / "scenario.yaml", written=True)
    assert not [w for w in preflight(reread).warnings if "speculative" in w]
    speculating = cbsim.simulate(cbsim.load_scenario(data))
    cbsim.compare_no_spec(speculating)
    assert speculating.no_spec_summary is not None
    assert "speculative" not in speculating.no_spec_summary["warnings"]
