"""Tests for cbsim.run.loading: loading, validation errors with dotted field paths, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cbsim.catalog.hardware import GPU_NAMES
from cbsim.catalog.models import MODEL_NAMES
from cbsim.common.errors import CbsimError
from cbsim.run.loading import Scenario, load_scenario
from tests.conftest import small_scenario


def error_of(data: dict, overrides=None) -> CbsimError:
    with pytest.raises(CbsimError) as info:
        load_scenario(data, overrides)
    return info.value


# --------------------------------------------------------------------------- loading


def test_load_from_dict():
    scenario = load_scenario(small_scenario())
    assert isinstance(scenario, Scenario)
    assert scenario.workload.num_requests == 40
    assert scenario.workload.arrival.rate == 4.0
    assert scenario.cluster.model == "llama-3-8b"
    assert scenario.scheduler.kind == "prefill_first"
    assert scenario.seed == 3


def test_load_does_not_mutate_input():
    data = small_scenario()
    before = yaml.safe_dump(data)
    load_scenario(data, {"scheduler.kind": "orca"}, seed=11)
    assert yaml.safe_dump(data) == before


def test_load_from_yaml_file(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(scheduler__kind="sarathi")))
    from_file = load_scenario(path)
    from_str = load_scenario(str(path))
    assert from_file == from_str == load_scenario(small_scenario(scheduler__kind="sarathi"))
    assert from_file.scheduler.kind == "sarathi"


def test_yaml_error_names_the_file_and_field(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(small_scenario(scheduler__max_batch_sise=8)))
    with pytest.raises(CbsimError) as info:
        load_scenario(path)
    assert info.value.source == str(path)
    assert info.value.field == "scheduler.max_batch_sise"
    assert str(path) in str(info.value) and "scheduler.max_batch_sise" in str(info.value)


def test_missing_file_and_invalid_yaml(tmp_path: Path):
    with pytest.raises(CbsimError, match="not found"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text("workload: {num_requests: 3\n")
    with pytest.raises(CbsimError, match="invalid YAML") as info:
        load_scenario(bad)
    assert info.value.source == str(bad)
    top_list = tmp_path / "list.yaml"
    top_list.write_text("- 1\n- 2\n")
    with pytest.raises(CbsimError, match="mapping"):
        load_scenario(top_list)


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    "dotted",
    [
        "scheduler.max_batch_sise",
        "workload.arrival.rat",
        "cluster.gpus",
        "slo.ttft",
        "workload.prompt_tokens.valu",
        "speculative.policy.kk",
        "speculative.proposer.modle",
        "nmae",
    ],
)
def test_unknown_key_is_rejected_with_dotted_path(dotted: str):
    # the speculative sections are given with their kind so that only the typo is wrong
    speculative = {"policy": {"kind": "fixed"}, "proposer": {"kind": "draft_model"}}
    err = error_of(small_scenario({"speculative": speculative, dotted: 1}))
    assert err.field == dotted
    assert "unknown key" in err.message


def test_sections_with_a_default_kind_may_leave_it_out():
    scenario = load_scenario(
        small_scenario(workload__arrival={"rate": 3.0}, speculative={"policy": {"k": 3}})
    )
    assert scenario.workload.arrival.kind == "poisson"
    assert scenario.workload.arrival.rate == 3.0
    assert scenario.speculative.policy.kind == "fixed"
    assert scenario.speculative.policy.k == 3


def test_length_without_kind_names_the_section():
    err = error_of(small_scenario(workload__prompt_tokens={"value": 3}))
    assert err.field == "workload.prompt_tokens"
    assert "kind" in err.message


@pytest.mark.parametrize(
    ("trace", "field"),
    [
        ({"path": "azure-conv-2023", "time_scal": 0.5}, "workload.trace.time_scal"),
        ({"path": "azure-conv-2023", "time_scale": -1.0}, "workload.trace.time_scale"),
        ({"path": "azure-conv-2023", "time_scale": 2.0, "rate_scale": 2.0}, "workload.trace"),
    ],
)
def test_trace_section_errors_keep_the_trace_segment(trace: dict, field: str):
    # "trace" is also the tag of the arrival kind {kind: trace}; the error path must keep the
    # real field name workload.trace.
    data = {"workload": {"trace": trace}}
    assert error_of(data).field == field


def test_empirical_length_without_trace_names_the_trace_field():
    err = error_of(small_scenario(workload__prompt_tokens={"kind": "empirical"}))
    assert err.field == "workload.prompt_tokens.trace"
    assert "missing" in err.message


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize("rate", [0, 0.0, -1, -0.5])
def test_non_positive_rate(rate: float):
    err = error_of(small_scenario({"workload.arrival.rate": rate}))
    assert err.field == "workload.arrival.rate"
    assert "greater than 0" in err.message


def test_gamma_rate_and_cv_must_be_positive():
    bad_cv = {"kind": "gamma", "rate": 2.0, "cv": 0.0}
    assert error_of(small_scenario(workload__arrival=bad_cv)).field == "workload.arrival.cv"
    bad_rate = {"kind": "gamma", "rate": -2.0}
    assert error_of(small_scenario(workload__arrival=bad_rate)).field == "workload.arrival.rate"


@pytest.mark.parametrize("rate", [float("inf"), float("nan")])
def test_non_finite_rate_is_rejected(rate: float):
    err = error_of(small_scenario({"workload.arrival.rate": rate}))
    assert err.field == "workload.arrival.rate"


def test_uniform_low_above_high():
    err = error_of(small_scenario(workload__prompt_tokens={"kind": "uniform", "low": 9, "high": 3}))
    assert err.field == "workload.prompt_tokens"
    assert "low (9) must not exceed high (3)" in err.message


def test_lognormal_min_above_max():
    spec = {"kind": "lognormal", "mean": 100, "sigma": 0.5, "min": 50, "max": 10}
    err = error_of(small_scenario(workload__output_tokens=spec))
    assert err.field == "workload.output_tokens"
    assert "min (50) must not exceed max (10)" in err.message


@pytest.mark.parametrize("value", [0, -3])
def test_fixed_length_must_be_positive(value: int):
    err = error_of(small_scenario(workload__output_tokens={"kind": "fixed", "value": value}))
    assert err.field == "workload.output_tokens.value"


def test_unknown_length_kind():
    err = error_of(small_scenario(workload__prompt_tokens={"kind": "zipf", "value": 3}))
    assert err.field == "workload.prompt_tokens"
    assert "zipf" in err.message


def test_unknown_gpu_lists_known_names():
    err = error_of(small_scenario(cluster__gpu="h1000"))
    assert err.field == "cluster.gpu"
    assert "h1000" in err.message
    for name in GPU_NAMES:
        assert name in err.message


def test_unknown_model_lists_known_names():
    err = error_of(small_scenario(cluster__model="gpt-9"))
    assert err.field == "cluster.model"
    assert "gpt-9" in err.message
    for name in MODEL_NAMES:
        assert name in err.message


def test_unknown_scheduler_kind():
    err = error_of(small_scenario(scheduler__kind="fifo"))
    assert err.field == "scheduler.kind"
    for kind in ("static", "orca", "prefill_first", "sarathi"):
        assert kind in err.message


def test_unknown_router():
    err = error_of(small_scenario(cluster__router="fastest"))
    assert err.field == "cluster.router"


@pytest.mark.parametrize("tp", [3, 5, 6, 12])
def test_tp_not_a_power_of_two(tp: int):
    err = error_of(small_scenario(cluster__tp=tp))
    assert err.field == "cluster.tp"
    assert "power of two" in err.message


@pytest.mark.parametrize("tp", [0, -2])
def test_tp_not_positive(tp: int):
    assert error_of(small_scenario(cluster__tp=tp)).field == "cluster.tp"


def test_tp_beyond_64_is_refused_and_across_nodes_takes_whole_nodes():
    err = error_of(small_scenario(cluster__tp=128))
    assert err.field == "cluster.tp"
    assert "64" in err.message
    # 16 GPUs: two whole 8-GPU nodes, all-reduces partly over the NICs
    scenario = load_scenario(small_scenario(cluster__tp=16))
    assert scenario.cluster.gpus_per_replica == 16


def test_model_that_does_not_fit():
    err = error_of(small_scenario(cluster__model="llama-3-70b", cluster__gpu="l40s", cluster__tp=1))
    assert err.field == "cluster.tp"
    assert "does not fit" in err.message
    assert "llama-3-70b" in err.message and "l40s" in err.message


def test_model_that_fits_with_more_tp():
    ok = load_scenario(
        small_scenario(cluster__model="llama-3-70b", cluster__gpu="h100-sxm", cluster__tp=4)
    )
    assert ok.cluster.tp == 4


@pytest.mark.parametrize("util", [0.0, -0.1, 1.5])
def test_gpu_memory_utilization_bounds(util: float):
    err = error_of(small_scenario(cluster__gpu_memory_utilization=util))
    assert err.field == "cluster.gpu_memory_utilization"


@pytest.mark.parametrize("util", [1e-300, 0.05])
def test_a_share_of_memory_too_small_for_the_weights_is_blamed_on_it(util: float):
    err = error_of(small_scenario(cluster__gpu_memory_utilization=util))
    assert err.field == "cluster.gpu_memory_utilization"
    assert "raise it" in err.message and "fits there" in err.message


def test_a_model_too_big_at_any_share_is_still_blamed_on_tp():
    data = small_scenario(cluster__model="llama-3-70b", cluster__gpu="h100-sxm", cluster__tp=1)
    err = error_of({**data, "cluster": {**data["cluster"], "gpu_memory_utilization": 0.5}})
    assert err.field == "cluster.tp"


def test_workload_needs_a_count_or_a_duration():
    data = small_scenario()
    del data["workload"]["num_requests"]
    err = error_of(data)
    assert err.field == "workload"
    assert "num_requests" in err.message and "duration_s" in err.message
    data["workload"]["duration_s"] = 30.0
    assert load_scenario(data).workload.duration_s == 30.0


def test_workload_without_lengths_or_trace():
    data = small_scenario()
    del data["workload"]["output_tokens"]
    err = error_of(data)
    assert err.field in ("workload", "workload.output_tokens")
    assert "output_tokens" in err.message


def test_trace_arrival_without_trace():
    err = error_of(small_scenario(workload__arrival={"kind": "trace"}))
    assert err.field == "workload"


def test_missing_workload():
    err = error_of({"name": "x"})
    assert err.field == "workload"
    assert "missing" in err.message


@pytest.mark.parametrize("name", ["a/b", "..", ""])
def test_unsafe_name(name: str):
    assert error_of(small_scenario(name=name)).field == "name"


# --------------------------------------------------------------------------- overrides and seed


def test_overrides_as_mapping():
    scenario = load_scenario(
        small_scenario(),
        {"scheduler.kind": "sarathi", "scheduler.chunk_size": 256, "cluster.replicas": 3},
    )
    assert scenario.scheduler.kind == "sarathi"
    assert scenario.scheduler.chunk_size == 256
    assert scenario.cluster.replicas == 3


def test_overrides_as_strings_are_yaml_typed():
    scenario = load_scenario(
        small_scenario(),
        [
            "workload.arrival.rate=2.5",
            "workload.num_requests=7",
            "speculative.enabled=true",
            "slo.ttft_s=null",
            "scheduler.kind=orca",
            "horizon_s=1e3",
            "slo.e2e_s=12",
        ],
    )
    assert scenario.workload.arrival.rate == 2.5
    assert scenario.workload.num_requests == 7
    assert scenario.speculative.enabled is True
    assert scenario.slo.ttft_s is None
    assert scenario.scheduler.kind == "orca"
    assert scenario.horizon_s == 1000.0
    assert scenario.slo.e2e_s == 12


def test_override_creates_missing_sections_and_is_validated():
    data = small_scenario()
    del data["scheduler"]
    assert load_scenario(data, ["scheduler.block_size=32"]).scheduler.block_size == 32
    err = error_of(data, ["scheduler.blok_size=32"])
    assert err.field == "scheduler.blok_size"


def test_override_string_without_equals_is_an_error():
    with pytest.raises(CbsimError):
        load_scenario(small_scenario(), ["scheduler.kind"])


def test_override_through_a_scalar_is_an_error():
    with pytest.raises(CbsimError):
        load_scenario(small_scenario(), {"name.sub": 1})


def test_seed_argument_replaces_the_seed(tmp_path: Path):
    assert load_scenario(small_scenario(), seed=42).seed == 42
    assert load_scenario(small_scenario(seed=5)).seed == 5
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(seed=5)))
    assert load_scenario(path, seed=0).seed == 0


def test_negative_seed_rejected():
    assert error_of(small_scenario(seed=-1)).field == "seed"


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"scheduler.kind": "sarathi", "cluster.replicas": 2, "cluster.router": "random"},
        {"workload.trace": {"path": "azure-conv-2023", "rate_scale": 2.0}, "horizon_s": 50.0},
        {
            "workload.arrival": {"kind": "gamma", "rate": 3.0, "cv": 2.5},
            "workload.prompt_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.7, "max": 900},
            "cluster.max_model_len": 2048,
            "cluster.kv_dtype": "fp8",
        },
        {"slo.ttft_s": None, "slo.tpot_s": None, "slo.e2e_s": 5.0},
    ],
)
def test_to_dict_round_trips(overrides: dict, tmp_path: Path):
    scenario = load_scenario(small_scenario(overrides))
    again = load_scenario(scenario.to_dict())
    assert again == scenario
    assert again.to_dict() == scenario.to_dict()
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario.to_dict()))
    assert load_scenario(path) == scenario


# --------------------------------------------------------------------------- traces


def test_nonexistent_trace_path_names_the_field(tmp_path: Path):
    missing = tmp_path / "no-such-trace.csv"
    data = {"workload": {"trace": {"path": str(missing)}}}
    with pytest.raises(CbsimError) as info:
        load_scenario(data)
    assert info.value.field == "workload.trace.path"
    assert "no-such-trace.csv" in info.value.message


def test_nonexistent_trace_from_a_file_names_the_file(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"workload": {"trace": {"path": "no-such-trace"}}}))
    with pytest.raises(CbsimError) as info:
        load_scenario(path)
    assert info.value.source == str(path)
    assert info.value.field == "workload.trace.path"
    assert "azure-conv-2023" in info.value.message  # lists the shipped traces


def test_nonexistent_empirical_trace_names_the_field():
    spec = {"kind": "empirical", "trace": "no-such-trace"}
    err = error_of(small_scenario(workload__output_tokens=spec))
    assert err.field == "workload.output_tokens.trace"


def test_relative_trace_path_is_relative_to_the_scenario_file(tmp_path: Path, monkeypatch):
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "mine.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1.5,20,6\n")
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({"workload": {"trace": {"path": "mine.csv"}}}))
    monkeypatch.chdir(tmp_path)  # the trace is not in the working directory
    scenario = load_scenario(path)
    assert Path(scenario.workload.trace.path) == folder / "mine.csv"
