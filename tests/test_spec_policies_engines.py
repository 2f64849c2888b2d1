"""Engine k policies (SGLang's adaptive hysteresis, vLLM/TensorRT-LLM batch tables), published
per-position acceptance, TensorRT-LLM's k = 0 drafter state, the draft vocabulary check, ITL per
chunk and the --compare-no-spec report section (issue 28).

Every new policy and option is checked the way the existing ones are: fast-forward equals
stepping bit for bit (hypothesis-generated configurations), accepted ≤ drafted, and the same seed
gives the same run.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.catalog.acceptance_profiles import acceptance_profile
from cbsim.catalog.engine_presets import preset_table
from cbsim.common.errors import CbsimError
from cbsim.engine.speculative.acceptance import (
    conditional_from_unconditional,
    mean_acceptance_length,
)
from cbsim.engine.speculative.adaptive_hysteresis import AdaptiveHysteresisK, next_tier
from cbsim.engine.speculative.policies import BatchView
from tests.conftest import small_scenario, summaries_equal

PUBLISHED = [0.73, 0.52, 0.35]  # vLLM CI, EAGLE-3 on Llama-3.1-8B, k = 3, MT-Bench
ADAPTIVE = {"kind": "adaptive_hysteresis"}


def spec_scenario(
    policy: dict[str, Any],
    acceptance: dict[str, Any] | None = None,
    *,
    extra: dict[str, Any] | None = None,
    **dotted: Any,
) -> dict[str, Any]:
    speculative: dict[str, Any] = {
        "enabled": True,
        "proposer": {"kind": "eagle"},
        "acceptance": acceptance or {"kind": "iid", "alpha": 0.75},
        "policy": policy,
        **(extra or {}),
    }
    data = {
        "seed": 7,
        "workload.num_requests": 50,
        "workload.arrival": {"kind": "poisson", "rate": 30.0},
        "workload.output_tokens": {"kind": "uniform", "low": 20, "high": 200},
        "speculative": speculative,
    }
    data.update(dotted)
    return small_scenario(data)


def run(data: dict[str, Any], **top: Any) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario({**data, **top}))


def assert_identical(data: dict[str, Any]) -> cbsim.Results:
    stepped = run(data, fast_forward=False)
    forward = run(data, fast_forward=True)
    for name in ("requests", "iterations", "timeseries"):
        pd.testing.assert_frame_equal(
            getattr(stepped, name), getattr(forward, name), check_exact=True, obj=name
        )
    assert summaries_equal(stepped.summary, forward.summary)
    return forward


def assert_conserved(results: cbsim.Results) -> None:
    r = results.requests
    assert (r["accepted_tokens"] <= r["drafted_tokens"]).all()
    assert (r["accepted_tokens"] >= 0).all()


# --------------------------------------------------------------------------- acceptance as published


def test_unconditional_rates_convert_to_conditional() -> None:
    conditional = conditional_from_unconditional(PUBLISHED)
    assert conditional == pytest.approx([0.73, 0.52 / 0.73, 0.35 / 0.52])
    assert mean_acceptance_length(PUBLISHED, 3, unconditional=True) == pytest.approx(2.60)
    # the conditional reading of the same numbers is a different, weaker drafter
    assert mean_acceptance_length(PUBLISHED, 3, unconditional=False) == pytest.approx(
        2.2425, abs=1e-4
    )
    with pytest.raises(ValueError, match="non-increasing"):
        conditional_from_unconditional([0.5, 0.6])
    assert conditional_from_unconditional([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


@pytest.mark.parametrize("name", ["eagle3-llama-3.1-8b-mtbench", "eagle3-qwen3-8b-mtbench"])
def test_published_profiles_match_their_mean_acceptance_length(name: str) -> None:
    profile = acceptance_profile(name)
    closed = mean_acceptance_length(profile.rates, profile.k, unconditional=True)
    assert closed == pytest.approx(profile.mean_acceptance_length, abs=0.01)
    assert profile.source.startswith("https://github.com/vllm-project/vllm")


def test_simulated_eagle3_k3_mean_acceptance_length_is_one_plus_sum() -> None:
    """The must-show figure: 1 + Σ 0.73/0.52/0.35 = 2.60 in a simulated EAGLE-3 k = 3 run."""
    data = spec_scenario(
        {"kind": "fixed", "k": 3},
        {"kind": "positional", "rates": PUBLISHED, "form": "unconditional"},
        **{
            "workload.num_requests": 60,
            "workload.output_tokens": {"kind": "uniform", "low": 1500, "high": 2000},
        },
    )
    results = run(data)
    r = results.requests
    steps = int(r["spec_steps"].sum())
    measured = 1.0 + r["accepted_tokens"].sum() / steps
    # one accepted-count has s.d. ≈ 1.22 (E[a²] = Σ (2i − 1) u_i), so the mean's is 1.22/√steps;
    # the last few steps of each request draft fewer than 3 (a bias below 0.01)
    tolerance = 4 * 1.22 / math.sqrt(steps) + 0.01
    assert abs(measured - 2.60) < tolerance, (measured, steps)
    assert results.summary["mean_acceptance_length"] == pytest.approx(measured, rel=0.02)
    assert_conserved(results)


def test_unconditional_profile_from_yaml_and_per_request_variation() -> None:
    by_profile = cbsim.load_scenario(
        spec_scenario(ADAPTIVE, {"kind": "positional", "profile": "eagle3-llama-3.1-8b-mtbench"})
    )
    acceptance = by_profile.speculative.acceptance
    assert acceptance.form == "unconditional"  # type: ignore[union-attr]
    assert list(acceptance.rates) == [0.7296, 0.5208, 0.3545]  # type: ignore[union-attr]
    varied = {
        "kind": "positional",
        "rates": PUBLISHED,
        "form": "unconditional",
        "concentration": 20,
    }
    results = assert_identical(spec_scenario({"kind": "fixed", "k": 3}, varied))
    rates = results.requests["accepted_tokens"] / results.requests["drafted_tokens"]
    assert rates.std() > 0.02  # requests differ
    assert_conserved(results)
    with pytest.raises(CbsimError, match="non-increasing"):
        cbsim.load_scenario(
            spec_scenario(
                ADAPTIVE, {"kind": "positional", "rates": [0.3, 0.5], "form": "unconditional"}
            )
        )


# --------------------------------------------------------------------------- SGLang adaptive policy


def test_next_tier_moves_one_tier_with_hysteresis() -> None:
    steps = [1, 3, 7]
    assert next_tier(1, 2.5, steps, 0.0, 0.25) == 2  # round(2.5) + 1 = 4 > 3: up
    assert next_tier(1, 2.4, steps, 0.0, 0.25) == 1
    assert next_tier(1, 2.6, steps, 0.2, 0.25) == 1  # up hysteresis holds it
    assert next_tier(1, 0.2, steps, 0.0, 0.25) == 0  # 1.2 < 1.5 − 0.25: down
    assert next_tier(1, 0.3, steps, 0.0, 0.25) == 1
    assert next_tier(2, 9.0, steps, 0.0, 0.25) == 2  # top tier stays
    assert next_tier(0, 0.0, steps, 0.0, 0.25) == 0


def _view(batch_size: int, replica: int = 0) -> BatchView:
    n = min(batch_size, 4)
    return BatchView(
        batch_size=batch_size,
        proposals=[7] * n,
        alphas=np.full(n, 0.5),
        remaining=np.full(n, 100, dtype=np.int64),
        step_time=lambda ks: 1.0,
        replica=replica,
    )


def test_adaptive_policy_tracks_tiers_per_replica_and_batch_range() -> None:
    config = SimpleNamespace(
        kind="adaptive_hysteresis", candidate_steps=[7, 1, 3], initial=None, ema_weight=0.5,
        up_hysteresis=0.0, down_hysteresis=0.25, batch_ranges=[(1, 8), (9, 32)],
    )  # fmt: skip
    policy = AdaptiveHysteresisK(config)
    assert policy.candidates == [1, 3, 7] and policy.k_max == 7
    assert policy.choose(_view(4)) == [3] * 4  # the middle candidate
    for _ in range(6):  # every draft accepted: climbs to 7 in the small-batch range
        k = policy.choose(_view(4))[0]
        policy.observe_batch(0, [k] * 4, [k] * 4)
    assert policy.choose(_view(4))[0] == 7
    assert policy.choose(_view(20))[0] == 3  # another range keeps its own tier
    assert policy.choose(_view(500))[0] == 3  # outside every range: a range of its own
    assert policy.choose(_view(4, replica=1))[0] == 3  # another replica too
    for _ in range(12):  # nothing accepted: back down to 1
        k = policy.choose(_view(4))[0]
        policy.observe_batch(0, [k] * 4, [0] * 4)
    assert policy.choose(_view(4))[0] == 1
    policy.observe_batch(0, [0, 0], [0, 0])  # no speculating request: no update
    assert policy.replica_tiers(0).steps[0] == 18


def test_adaptive_policy_from_yaml_runs_compiled_and_forwards_as_it_steps() -> None:
    results = assert_identical(
        spec_scenario(
            {"kind": "adaptive_hysteresis", "candidate_steps": [1, 2, 4], "ema_weight": 0.3},
            {"kind": "iid", "alpha": 0.9},
            **{"cluster.replicas": 2, "cluster.router": "least_loaded"},
        )
    )
    assert "fast_forward_note" not in results.run_info  # the compiled kernel ran it
    k_seen = set(results.iterations["k_max"].unique())
    assert {2, 4} & k_seen  # it moved off its initial tier
    assert_conserved(results)


def test_adaptive_policy_rejects_bad_settings() -> None:
    for bad in (
        {"kind": "adaptive_hysteresis", "candidate_steps": [1, 3], "initial": 5},
        {"kind": "adaptive_hysteresis", "batch_ranges": [[1, 8], [8, 20]]},
        {"kind": "adaptive_hysteresis", "ema_weight": 0.0},
    ):
        with pytest.raises(CbsimError):
            cbsim.load_scenario(spec_scenario(bad))


# --------------------------------------------------------------------------- engine batch tables


@pytest.mark.parametrize(
    ("preset", "rows"),
    [
        ("trtllm-draft-len-schedule-example", [(1, 4, 4), (5, 8, 2), (9, 32, 1), (33, 100_000, 0)]),
        ("vllm-dsd-example", [(1, 63, 3), (64, 255, 2), (256, 100_000, 0)]),
    ],
)
def test_batch_table_presets_from_yaml(preset: str, rows: list[tuple[int, int, int]]) -> None:
    assert preset_table(preset) == rows
    scenario = cbsim.load_scenario(spec_scenario({"kind": "batch_table", "preset": preset}))
    assert [tuple(r) for r in scenario.speculative.policy.table] == rows  # type: ignore[union-attr]
    again = cbsim.load_scenario(scenario.to_dict())  # round-trips with preset and table
    assert again.speculative.policy == scenario.speculative.policy
    assert_conserved(assert_identical(spec_scenario({"kind": "batch_table", "preset": preset})))


def test_unknown_preset_is_refused() -> None:
    with pytest.raises(CbsimError, match="trtllm-draft-len-schedule-example"):
        cbsim.load_scenario(spec_scenario({"kind": "batch_table", "preset": "nope"}))


# --------------------------------------------------------------------------- TensorRT-LLM k = 0


def test_stale_drafter_after_k0_collapses_acceptance() -> None:
    table = {"kind": "batch_table", "table": [[1, 3, 3], [4, 100000, 0]]}
    kept = run(spec_scenario(table))
    stale_data = spec_scenario(
        table, extra={"drafter_state_at_k0": "stale", "stale_acceptance_scale": 0.1}
    )
    stale = assert_identical(stale_data)
    for results in (kept, stale):
        assert_conserved(results)
    rate = {
        name: r.requests["accepted_tokens"].sum() / r.requests["drafted_tokens"].sum()
        for name, r in (("kept", kept), ("stale", stale))
    }
    assert rate["stale"] < 0.8 * rate["kept"], rate
    # requests that never met a k = 0 step keep their acceptance: the option is off by default
    assert run(spec_scenario(table)).summary == kept.summary


# --------------------------------------------------------------------------- fuzz: every new policy


@st.composite
def engine_configs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["adaptive", "preset", "stale"]))
    steps = sorted(draw(st.sets(st.integers(1, 6), min_size=1, max_size=3)))
    if kind == "adaptive":
        policy: dict[str, Any] = {
            "kind": "adaptive_hysteresis",
            "candidate_steps": steps,
            "ema_weight": draw(st.sampled_from([0.1, 0.3, 1.0])),
            "up_hysteresis": draw(st.sampled_from([0.0, 0.3])),
            "batch_ranges": draw(st.sampled_from([[[1, 4], [5, 100000]], [[1, 100000]]])),
        }
    else:
        policy = {"kind": "batch_table", "preset": draw(st.sampled_from(
            ["trtllm-draft-len-schedule-example", "vllm-dsd-example", "trtllm-max-concurrency-8"]
        ))}  # fmt: skip
    acceptance = draw(
        st.sampled_from(
            [
                {"kind": "iid", "alpha": 0.8},
                {"kind": "positional", "rates": PUBLISHED, "form": "unconditional"},
                {"kind": "per_request", "mean": 0.6, "concentration": 8},
            ]
        )
    )
    extra = {"drafter_state_at_k0": "stale"} if kind == "stale" else {}
    return spec_scenario(
        policy,
        acceptance,
        extra=extra,
        seed=draw(st.integers(0, 1000)),
        **{
            "workload.num_requests": 25,
            "workload.arrival": {"kind": "poisson", "rate": draw(st.sampled_from([5.0, 60.0]))},
            "scheduler.kind": draw(st.sampled_from(["vllm", "sarathi"])),
        },
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_configs())
def test_fuzz_new_policies_forward_as_they_step_and_conserve(data: dict[str, Any]) -> None:
    results = assert_identical(data)
    assert_conserved(results)
    again = run(data, fast_forward=True)  # determinism: the same seed, the same run
    pd.testing.assert_frame_equal(results.requests, again.requests, check_exact=True)


# --------------------------------------------------------------------------- vocabulary


def test_draft_model_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from cbsim.cli.commands import cli

    data = spec_scenario({"kind": "fixed", "k": 3})
    data["speculative"]["proposer"] = {"kind": "draft_model", "model": "llama-2-7b"}
    with pytest.raises(CbsimError, match="vocabulary of 32,000 tokens"):
        run(data)
    path = tmp_path / "bad-draft.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "tokenizer" in result.output and "llama-2-7b" in result.output
    data["speculative"]["proposer"]["model"] = "llama-3.2-1b"  # same vocabulary: runs
    assert run(data).summary["completed"] == 50


# --------------------------------------------------------------------------- ITL per chunk


def test_itl_per_chunk_beside_itl_per_token() -> None:
    plain = run(small_scenario())
    for p in ("p50", "p90", "p99", "mean"):
        assert plain.summary[f"itl_chunk_{p}_s"] == plain.summary[f"itl_{p}_s"]
    spec = run(spec_scenario({"kind": "fixed", "k": 4}, {"kind": "iid", "alpha": 0.9}))
    s = spec.summary
    assert s["itl_p50_s"] == 0.0  # accepted drafts arrive together: zero gaps per token
    assert s["itl_chunk_p50_s"] > 0.0
    assert s["itl_chunk_mean_s"] > s["itl_mean_s"]
    # every finished request streams one chunk per decode step after its first token, so the
    # chunk gaps sum to its decode time (no request is paused in this light load)
    r = spec.requests[spec.requests["status"] == "finished"]
    expected = (r["finish_s"] - r["first_token_s"]).sum() / r["decode_steps"].sum()
    assert s["itl_chunk_mean_s"] == pytest.approx(expected, rel=1e-9)


# --------------------------------------------------------------------------- report


@pytest.mark.slow  # .ci/run's second stage runs it
def test_compare_no_spec_table_in_the_html_report(tmp_path: Path) -> None:
    from cbsim.studies.report.run import run_report

    results = run(spec_scenario({"kind": "fixed", "k": 3}))
    assert "Speculation vs no speculation" not in [s.title for s in run_report(results).sections]
    cbsim.compare_no_spec(results)
    report = run_report(results)
    section = next(s for s in report.sections if s.title == "Speculation vs no speculation")
    table = section.blocks[0]
    labels = [row[0] for row in table.rows]  # type: ignore[attr-defined]
    assert "TPOT mean (ms)" in labels and "ITL per chunk p50 (ms)" in labels
    assert labels[-1].startswith("decode time saved")
    assert "finish − first token" in table.caption  # type: ignore[attr-defined]
    from cbsim.studies.report.html_page import render_html

    html = render_html(report)
    assert "Speculation vs no speculation" in html and "decode time saved" in html
    written = results.write(tmp_path / "run")
    from cbsim.studies.report.run import _run_report_from_dir

    from_disk = _run_report_from_dir(written, None)
    assert "Speculation vs no speculation" in [s.title for s in from_disk.sections]


# --------------------------------------------------------------------------- which policy at which load


def test_spec_advise_compares_policies_per_load(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from cbsim.cli.commands import cli
    from cbsim.engine.speculative.advise import POLICIES, AdviseSetup, advise

    setup = AdviseSetup("llama-3-8b", "h100-sxm", requests=30, input_len=64, output_len=64)
    chosen = {k: POLICIES[k] for k in ("fixed k=3", "TRT-LLM schedule", "SGLang adaptive")}
    frame = advise(setup, [2.0, 200.0], chosen)
    assert len(frame) == 2 * 4
    assert (frame.groupby("rate")["best"].sum() >= 1).all()  # ties are all marked
    base = frame[frame["policy"] == "no speculation"]
    assert (base["speedup_tpot"] == 1.0).all()
    light, heavy = (frame[frame["rate"] == r].set_index("policy") for r in (2.0, 200.0))
    assert light.loc["fixed k=3", "speedup_tpot"] > heavy.loc["fixed k=3", "speedup_tpot"]
    out = tmp_path / "advise.csv"
    result = CliRunner().invoke(
        cli,
        ["spec-advise", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--rates", "2",
         "--requests", "10", "--input-len", "32", "--output-len", "16", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "rate 2 req/s" in result.output and "  => " in result.output and out.is_file()


def _advice(speedups: dict[str, float]) -> pd.DataFrame:
    from cbsim.engine.speculative.advise import _mark_best

    rows = [
        {"rate": 5.0, "policy": name, "mean_batch_size": 8.0, "tpot_mean_s": 0.01 / speedup,
         "output_tokens_per_s": 1000.0, "speedup_tpot": speedup}
        for name, speedup in {"no speculation": 1.0, **speedups}.items()
    ]  # fmt: skip
    return _mark_best(pd.DataFrame(rows))


def test_spec_advise_calls_no_small_lead_best() -> None:
    """A 0.2% lead is within one seed's noise (MEANINGFUL_GAIN): no policy is called best; a
    lead of 2% or more is."""
    from cbsim.engine.speculative.advise import MEANINGFUL_GAIN, rate_verdict, table_lines

    assert MEANINGFUL_GAIN == 0.02
    close = _advice({"fixed k=3": 1.400, "goodput": 1.4028, "fixed k=1": 1.2})  # 0.2% ahead
    lines = table_lines(close)
    assert not any("<- best" in line for line in lines)
    assert sum("~ tied" in line for line in lines) == 2
    verdict = rate_verdict(close)
    assert verdict.startswith("no policy is meaningfully better: fixed k=3, goodput")
    assert "16.7% or more ahead of fixed k=1" in verdict
    clear = _advice({"fixed k=3": 1.40, "goodput": 1.45})  # 3.6% ahead
    assert next(line for line in table_lines(clear) if "<- best" in line).startswith("  goodput")
    assert rate_verdict(clear) == "best: goodput (1.450x, 3.6% ahead)"
    flat = _advice({"fixed k=3": 1.01, "goodput": 1.005})  # speculation barely pays
    assert rate_verdict(flat).startswith("no policy is meaningfully better than no speculation")
    # the frame keeps ``best`` (the highest speed-up) for the CSV, beside the new columns
    assert close.loc[close["best"], "policy"].tolist() == ["goodput"]
    assert not close["meaningful_best"].any() and clear["meaningful_best"].sum() == 1
