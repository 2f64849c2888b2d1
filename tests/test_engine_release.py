"""Engine releases: ``engine@version`` picks the version ranges of a profile that cover it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import (
    EngineProfile,
    at_release,
    canonical_engine,
    load_engine_profile,
    read_engine_profile,
)
from cbsim.cost.engine_version import deep_merge, engine_family, parse_release, split_engine


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.8.5", (0, 8, 5, 0)),
        ("v0.8.5.post1", (0, 8, 5, 0)),
        ("0.11", (0, 11, 0, 0)),
        ("1.0.0rc4", (1, 0, 0, 0)),
        ("0.6.4.post1", (0, 6, 4, 0)),
        ("0.10.1.1", (0, 10, 1, 1)),
    ],
)
def test_releases_parse_as_engines_print_them(text: str, release: tuple[int, ...]) -> None:
    assert parse_release(text) == release


@pytest.mark.parametrize("text", ["", "latest", "0.x", "0.8.5.6.7", "@"])
def test_a_release_that_is_not_a_number_is_refused(text: str) -> None:
    with pytest.raises(CbsimError, match="not a release number"):
        parse_release(text)


def test_names_split_at_the_last_at_sign() -> None:
    assert split_engine("vllm@0.8.5") == ("vllm", "0.8.5")
    assert split_engine("vllm") == ("vllm", None)
    assert engine_family("sglang@0.4.6") == "sglang"
    assert canonical_engine("vLLM@0.8.5") == "vllm@0.8.5"


def test_deep_merge_keeps_what_changes_leave_alone() -> None:
    base = {"a": 1, "b": {"c": 2, "d": 3}}
    assert deep_merge(base, {"b": {"c": 9}}) == {"a": 1, "b": {"c": 9, "d": 3}}
    assert base == {"a": 1, "b": {"c": 2, "d": 3}}


def _profile(tmp_path: Path) -> Path:
    data = {
        "schema_version": 2,
        "engine": "toy",
        "overhead": {"serial_s": 0.002, "overlap": True},
        "versions": [
            {
                "since": "0.8",
                "until": "0.11",
                "note": "sync",
                "changes": {"overhead": {"serial_s": 0.0}},
            },
            {"since": "0.8", "until": "0.9", "changes": {"frontend": {"request_s": 0.01}}},
            {"since": "0.4", "until": "0.8", "profile": "vllm-v0"},
        ],
    }
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(data))
    return path


def test_every_range_covering_a_release_applies(tmp_path: Path) -> None:
    profile = read_engine_profile(_profile(tmp_path))
    old = at_release(profile, "0.8.5")
    assert old.overhead.serial_s == 0.0 and old.overhead.overlap
    assert old.frontend.request_s == 0.01
    assert old.version.startswith("0.8.5")
    middle = at_release(profile, "0.10.2")
    assert middle.overhead.serial_s == 0.0 and middle.frontend.request_s == 0.0
    newest = at_release(profile, "0.12")
    assert newest.overhead == profile.overhead and not newest.versions


def test_a_range_may_name_another_profile(tmp_path: Path) -> None:
    profile = read_engine_profile(_profile(tmp_path))
    v0 = at_release(profile, "0.6.3")
    assert v0.engine == "vllm-v0"
    assert v0.overhead == load_engine_profile("vllm-v0").overhead


def test_a_release_older_than_every_range_is_refused(tmp_path: Path) -> None:
    profile = read_engine_profile(_profile(tmp_path))
    with pytest.raises(CbsimError, match=r"models releases 0\.4 and later"):
        at_release(profile, "0.3")


def test_an_engine_without_ranges_refuses_a_release() -> None:
    with pytest.raises(CbsimError, match="no release ranges"):
        at_release(EngineProfile(engine="x"), "1.0")
    with pytest.raises(CbsimError, match="bare roofline"):
        load_engine_profile("none@1.0")


def test_a_range_with_an_invalid_release_is_refused() -> None:
    with pytest.raises(ValueError, match="release number"):
        EngineProfile.model_validate({"engine": "x", "versions": [{"since": "new"}]})


def test_a_scenario_runs_a_named_release() -> None:
    import cbsim
    from tests.conftest import small_scenario

    def on_a100(engine: str) -> cbsim.Scenario:
        data = small_scenario({"cluster.gpu": "a100-80gb", "cluster.engine": engine})
        data["scheduler"] = {}  # the release's defaults
        return cbsim.load_scenario(data)

    scenario = on_a100("vLLM@0.8.5")
    assert scenario.cluster.engine == "vllm@0.8.5"
    assert scenario.scheduler.max_batched_tokens == 8192  # 0.8.5 gave the A100 the large budget
    assert on_a100("vllm").scheduler.max_batched_tokens == 2048
    results = cbsim.simulate(scenario)
    assert results.summary["kv_cache_tokens"] > 0
    assert results.run_info["memory"][0]["engine_line"].startswith("GPU KV cache size:")


def test_a_release_too_old_is_a_scenario_error() -> None:
    import cbsim
    from tests.conftest import small_scenario

    with pytest.raises(CbsimError, match=r"releases 0\.4 and later") as caught:
        cbsim.load_scenario(small_scenario({"cluster.engine": "vllm@0.2"}))
    assert caught.value.field == "cluster.engine"


def test_a_plan_launches_a_release_as_its_engine() -> None:
    from cbsim.studies.plan.launch import launch_commands
    from cbsim.studies.plan.layouts import Instance, Layout

    commands = launch_commands("vllm@0.8.5", "llama-3.1-8b", Layout(Instance(gpu="h100-sxm", tp=1)))
    assert commands["commands"][0]["argv"][:2] == ["vllm", "serve"]
