"""Every scheduler honours the keys it is given (issue 24, item 3).

``max_batched_tokens`` is the per-step token budget of every kind, sarathi included (vLLM's
``--max-num-batched-tokens``; ``chunk_size`` is Sarathi-Serve's name for it); a key the scheduler
does not read is an error naming it; a written result reads back; TensorRT-LLM's default chunks a
prompt that does not fit beside the running decodes, so long prompts still batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.cli.commands import cli, describe
from cbsim.common.errors import CbsimError
from cbsim.engine.scheduler import make_scheduler
from cbsim.engine.scheduler.warnings import scheduler_warnings
from cbsim.memory.kvcache import KVCache
from cbsim.run.loading import Scheduler, load_scenario
from cbsim.run.results import Results
from cbsim.schema.pools import pool_plans
from cbsim.workload.request import Request
from tests.conftest import drive, small_scenario

KEYS_OF = {
    "static": {"max_batch_size", "max_batched_tokens", "block_size", "async_scheduling"},
    "orca": {
        "max_batch_size", "max_batched_tokens", "block_size", "chunked_prefill", "async_scheduling"
    },
    "prefill_first": {
        "max_batch_size",
        "max_batched_tokens",
        "block_size",
        "watermark",
        "async_scheduling",
    },
    "sarathi": {
        "max_batch_size", "max_batched_tokens", "block_size", "chunk_size", "watermark",
        "async_scheduling",
    },
}  # fmt: skip
VALUES = {
    "max_batch_size": 64,
    "max_batched_tokens": 1024,
    "block_size": 32,
    "chunk_size": 1024,
    "watermark": 0.02,
    "chunked_prefill": True,
    "async_scheduling": True,
}


def scenario(scheduler: dict[str, Any] | None, **dotted: Any) -> dict[str, Any]:
    data = small_scenario({k.replace("__", "."): v for k, v in dotted.items()})
    if scheduler is None:
        del data["scheduler"]
    else:
        data["scheduler"] = scheduler
    return data


def long_prompts(budget_key: str, budget: int) -> dict[str, Any]:
    return scenario(
        {"kind": "sarathi", budget_key: budget},
        workload__num_requests=24,
        workload__arrival={"kind": "poisson", "rate": 20.0},
        workload__prompt_tokens={"kind": "fixed", "value": 6000},
        workload__output_tokens={"kind": "fixed", "value": 32},
    )


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


# --------------------------------------------------------------------------- sarathi's budget


def test_max_batched_tokens_is_the_sarathi_budget() -> None:
    small = cbsim.simulate(load_scenario(long_prompts("max_batched_tokens", 2048)))
    large = cbsim.simulate(load_scenario(long_prompts("max_batched_tokens", 8192)))
    assert small.scenario.scheduler.max_batched_tokens == 2048
    for results, budget in ((small, 2048), (large, 8192)):
        it = results.iterations
        assert (it["prefill_tokens"] + it["decode_tokens"] <= budget).all()
    assert small.iterations["prefill_tokens"].max() == 2048
    assert large.iterations["prefill_tokens"].max() > 2048
    assert small.summary["ttft_p50_s"] != large.summary["ttft_p50_s"]
    # chunk_size is the same budget by Sarathi-Serve's name: the same run
    by_chunk = cbsim.simulate(load_scenario(long_prompts("chunk_size", 2048)))
    assert by_chunk.summary["ttft_p50_s"] == small.summary["ttft_p50_s"]
    assert (
        by_chunk.iterations["prefill_tokens"].tolist()
        == small.iterations["prefill_tokens"].tolist()
    )


def test_both_budget_keys_hold_the_one_budget() -> None:
    for key in ("max_batched_tokens", "chunk_size"):
        config = Scheduler(kind="sarathi", **{key: 300})
        assert (config.max_batched_tokens, config.chunk_size) == (300, 300)
    same = Scheduler(kind="sarathi", max_batched_tokens=300, chunk_size=300)
    assert same.max_batched_tokens == 300
    plain = Scheduler(kind="sarathi")
    assert (plain.max_batched_tokens, plain.chunk_size) == (512, 512)


def test_a_users_max_batched_tokens_beats_the_engines_sarathi_default() -> None:
    # vLLM's default scheduler is sarathi with its budget from the engine profile (8192 on an
    # H100): the user's max_batched_tokens, with or without a kind, is the budget
    for sched in ({"max_batched_tokens": 2048}, {"kind": "sarathi", "max_batched_tokens": 2048}):
        resolved = load_scenario(scenario(sched, cluster__engine="vllm")).scheduler
        assert resolved.kind == "sarathi"
        assert (resolved.max_batched_tokens, resolved.chunk_size) == (2048, 2048)
    resolved = load_scenario(scenario({"chunk_size": 1024}, cluster__engine="vllm")).scheduler
    assert (resolved.max_batched_tokens, resolved.chunk_size) == (1024, 1024)


def test_engine_budgets_go_to_the_kinds_of_their_family() -> None:
    def resolved(sched: dict[str, Any] | None, engine: str, gpu: str = "h100-sxm") -> Scheduler:
        return load_scenario(scenario(sched, cluster__engine=engine, cluster__gpu=gpu)).scheduler

    assert resolved(None, "vllm").max_batched_tokens == 8192
    assert resolved(None, "vllm", "a100-80gb").max_batched_tokens == 2048
    assert resolved(None, "vllm", "a100-80gb").chunk_size == 2048
    # vLLM's chunked budget is no whole-prompt budget, and SGLang's no sarathi one (as before)
    assert resolved({"kind": "prefill_first"}, "vllm", "a100-80gb").max_batched_tokens == 8192
    assert resolved({"kind": "sarathi"}, "sglang").max_batched_tokens == 512
    assert resolved({"kind": "orca"}, "sglang", "l40s").max_batched_tokens == 4096
    # an older profile names the sarathi budget chunk_size beside a whole-prompt budget
    older = {"kind": "sarathi", "chunk_size": 2048, "max_batched_tokens": 4096}
    assert Scheduler.engine_budget("sarathi", older) == 2048
    assert Scheduler.engine_budget("prefill_first", older) == 4096


# --------------------------------------------------------------------------- keys a kind reads


def test_budgets_that_differ_are_the_budget_and_the_long_prefill_cap(tmp_path: Path) -> None:
    """Both keys exist in vLLM (--max-num-batched-tokens, --long-prefill-token-threshold): set
    differently they are kept apart, under the user's kind and the engine's alike, and a written
    scenario reads back with both."""
    for sched in (
        {"kind": "sarathi", "max_batched_tokens": 2048, "chunk_size": 512},
        {"max_batched_tokens": 2048, "chunk_size": 512},  # sarathi as the vllm engine's default
    ):
        resolved = load_scenario(scenario(sched, cluster__engine="vllm")).scheduler
        assert (resolved.kind, resolved.max_batched_tokens, resolved.chunk_size) == (
            "sarathi",
            2048,
            512,
        )
        written = resolved.model_dump()
        assert (written["max_batched_tokens"], written["chunk_size"]) == (2048, 512)
    path = tmp_path / "both.yaml"
    path.write_text(
        "workload: {num_requests: 4, arrival: {kind: poisson, rate: 1},\n"
        "  prompt_tokens: {kind: fixed, value: 64}, output_tokens: {kind: fixed, value: 4}}\n"
        "cluster: {model: llama-3-8b, gpu: h100-sxm}\n"
        "scheduler: {kind: sarathi, max_batched_tokens: 2048, chunk_size: 512}\n"
    )
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", sorted(KEYS_OF))
def test_a_key_the_scheduler_does_not_read_is_an_error_naming_it(kind: str) -> None:
    unused = sorted(set(VALUES) - KEYS_OF[kind])
    assert unused
    for key in unused:
        with pytest.raises(CbsimError) as err:
            load_scenario(scenario({"kind": kind, key: VALUES[key]}))
        assert err.value.field == f"scheduler.{key}"
        assert f"not used by the {kind} scheduler" in err.value.message
    # every key it reads is fine (under sarathi, one budget)
    keys = {k: VALUES[k] for k in KEYS_OF[kind]}
    assert load_scenario(scenario({"kind": kind, **keys})).scheduler.kind == kind


def test_the_unused_key_error_is_a_scenario_error_with_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "unused.yaml"
    path.write_text(
        "workload: {num_requests: 4, arrival: {kind: poisson, rate: 1},\n"
        "  prompt_tokens: {kind: fixed, value: 64}, output_tokens: {kind: fixed, value: 4}}\n"
        "cluster: {model: llama-3-8b, gpu: h100-sxm}\n"
        "scheduler: {kind: prefill_first, chunk_size: 512}\n"
    )
    result = invoke("validate", path)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        f"error: {path}: scheduler.chunk_size: not used by the prefill_first scheduler"
    )


def test_the_kind_an_engine_picks_counts_too() -> None:
    # no kind given: SGLang's default is the prefill_first scheduler, which has no chunk_size
    with pytest.raises(CbsimError) as err:
        load_scenario(scenario({"chunk_size": 1024}, cluster__engine="sglang"))
    assert err.value.field == "scheduler.chunk_size"
    assert "not used by the prefill_first scheduler (engine sglang's default" in err.value.message
    with pytest.raises(CbsimError, match=r"orca scheduler \(engine tensorrt-llm's default"):
        load_scenario(scenario({"watermark": 0.05}, cluster__engine="tensorrt-llm"))
    with pytest.raises(CbsimError, match=r"sarathi scheduler \(engine vllm's default"):
        load_scenario(scenario({"chunked_prefill": True}, cluster__engine="vllm"))


def test_engine_defaults_never_count_as_the_users_keys() -> None:
    # TensorRT-LLM's chunked_prefill default is orca's: another kind simply does not take it
    resolved = load_scenario(scenario({"kind": "prefill_first"}, cluster__engine="tensorrt-llm"))
    assert resolved.scheduler.kind == "prefill_first"
    assert "chunked_prefill" not in resolved.to_dict()["scheduler"]
    trt = load_scenario(scenario(None, cluster__engine="tensorrt-llm")).scheduler
    assert (trt.kind, trt.chunked_prefill, trt.model_fields_set) == ("orca", True, set())
    assert (
        load_scenario(scenario({"kind": "orca"}, cluster__engine="vllm")).scheduler.chunked_prefill
        is False
    )


def test_switching_the_kind_with_set_and_unsetting_a_key_with_null() -> None:
    path = Path(__file__).parents[1] / "scenarios" / "high-load-sarathi.yaml"  # chunk_size: 512
    # a new kind starts the block afresh: the file's chunk_size, which prefill_first does not read, is
    # left out (cbsim/schema/kind_change.py); a chunk_size the user sets is still an error
    dropped = load_scenario(path, ["scheduler.kind=vllm"])  # the old name too
    assert dropped.scheduler.kind == "prefill_first"
    assert "chunk_size" not in dropped.scheduler.model_fields_set
    with pytest.raises(CbsimError) as err:
        load_scenario(path, ["scheduler.kind=prefill_first", "scheduler.chunk_size=256"])
    assert (err.value.source, err.value.field) == (str(path), "scheduler.chunk_size")
    switched = load_scenario(path, ["scheduler.kind=prefill_first", "scheduler.chunk_size=null"])
    assert switched.scheduler.kind == "prefill_first"
    assert "chunk_size" not in switched.scheduler.model_fields_set
    # a sarathi file's chunk_size beside a budget set in an override: the budget and the most
    # of one prompt a step takes (vLLM's --long-prefill-token-threshold), as the run line says
    both = load_scenario(path, ["scheduler.max_batched_tokens=1024"])
    assert (both.scheduler.max_batched_tokens, both.scheduler.chunk_size) == (1024, 512)
    assert "token budget 1024, at most 512 of one prompt a step" in describe(both)


def disaggregated(decode_scheduler: dict[str, Any]) -> dict[str, Any]:
    data = scenario({"kind": "sarathi", "chunk_size": 256})
    del data["cluster"]["replicas"]
    data["cluster"]["disaggregation"] = {
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1, "scheduler": decode_scheduler},
    }
    return data


def test_a_pool_that_picks_its_kind_keeps_only_the_keys_that_kind_reads() -> None:
    prefill, decode = pool_plans(load_scenario(disaggregated({"kind": "prefill_first"})))
    assert prefill.scenario.scheduler.chunk_size == 256  # the scenario's own sarathi budget
    assert decode.scenario.scheduler.kind == "prefill_first"
    assert "chunk_size" not in decode.scenario.scheduler.model_fields_set
    # the pool's own budget replaces the scenario's, under either name
    _, decode = pool_plans(load_scenario(disaggregated({"max_batched_tokens": 1024})))
    assert (decode.scenario.scheduler.kind, decode.scenario.scheduler.max_batched_tokens) == (
        "sarathi",
        1024,
    )
    with pytest.raises(CbsimError) as err:
        load_scenario(disaggregated({"kind": "prefill_first", "chunk_size": 64}))
    assert err.value.field == "cluster.disaggregation.decode.scheduler.chunk_size"
    assert "not used by the prefill_first scheduler" in err.value.message


# --------------------------------------------------------------------------- written results


@pytest.mark.parametrize(
    ("engine", "sched"),
    [
        ("vllm", None),
        ("vllm", {"kind": "vllm", "max_batched_tokens": 4096}),
        ("vllm", {"chunk_size": 256}),
        ("sglang", {"kind": "sarathi", "max_batched_tokens": 1024}),
        ("tensorrt-llm", None),
        ("tensorrt-llm", {"chunked_prefill": False}),
        ("none", {"kind": "static", "max_batch_size": 8}),
    ],
)
def test_a_written_result_reads_back(
    tmp_path: Path, engine: str, sched: dict[str, Any] | None
) -> None:
    data = scenario(sched, cluster__engine=engine, workload__num_requests=8)
    results = cbsim.simulate(load_scenario(data))
    folder = results.write(tmp_path / "out")
    again = Results.read(folder)
    assert again.scenario.to_dict() == results.scenario.to_dict()
    written = again.scenario.scheduler
    assert set(written.model_fields_set) - {"kind"} <= KEYS_OF[written.kind]
    rerun = cbsim.simulate(again.scenario)
    assert rerun.summary["ttft_p50_s"] == results.summary["ttft_p50_s"]


@pytest.mark.parametrize(
    ("kind", "extra", "budget"),
    [
        ("vllm", {"chunk_size": 512, "watermark": 0.01}, 8192),
        ("sarathi", {"chunk_size": 2048, "max_batched_tokens": 8192}, 2048),
        ("orca", {"chunk_size": 512, "watermark": 0.01}, 8192),
    ],
)
def test_a_result_an_older_cbsim_wrote_still_reads(
    tmp_path: Path, kind: str, extra: dict[str, Any], budget: int
) -> None:
    """Older cbsim wrote every scheduler key, read or not, and ran sarathi on chunk_size alone:
    such a folder reads back with the budget that run used."""
    import yaml

    folder = cbsim.simulate(
        load_scenario(scenario({"kind": kind}, workload__num_requests=4))
    ).write(tmp_path / "out")
    written = yaml.safe_load((folder / "scenario.yaml").read_text())
    written["scheduler"].update(extra)
    written["scheduler"].setdefault("max_batched_tokens", 8192)
    written["scheduler"].pop("async_scheduling", None)  # older than that key
    (folder / "scenario.yaml").write_text(yaml.safe_dump(written))
    again = Results.read(folder)
    assert again.scenario.scheduler.kind == Scheduler.canonical_kind(kind)
    assert again.scenario.scheduler.max_batched_tokens == budget


# --------------------------------------------------------------------------- TensorRT-LLM


def trtllm_long_prompts(**dotted: Any) -> dict[str, Any]:
    return {
        "name": "trtllm-8k",
        "seed": 1,
        "workload": {
            "num_requests": 32,
            "arrival": {"kind": "closed_loop", "concurrency": 8},
            "prompt_tokens": {"kind": "fixed", "value": 8192},
            "output_tokens": {"kind": "fixed", "value": 256},
        },
        "cluster": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "tensorrt-llm"},
        **dotted,
    }


def test_trtllm_default_batches_prompts_as_long_as_its_budget() -> None:
    # an 8192-token prompt fills TensorRT-LLM's 8192-token budget: without chunked context it
    # could never join running decodes, so 8 clients ran at batch 1
    results = cbsim.simulate(load_scenario(trtllm_long_prompts()))
    it = results.iterations
    assert results.scenario.scheduler.chunked_prefill
    assert it["batch_size"].max() == 8
    assert (it["prefill_tokens"] + it["decode_tokens"] <= 8192).all()
    assert not any("no room" in w for w in results.summary["warnings"])
    unchunked = cbsim.simulate(
        load_scenario(trtllm_long_prompts(), ["scheduler.chunked_prefill=false"])
    )
    assert unchunked.iterations["batch_size"].max() == 1
    assert results.summary["output_tokens_per_s"] > 2 * unchunked.summary["output_tokens_per_s"]


def test_chunked_orca_runs_the_same_with_and_without_fast_forward() -> None:
    runs = [
        cbsim.simulate(load_scenario(trtllm_long_prompts(fast_forward=ff))) for ff in (True, False)
    ]
    assert runs[0].summary["e2e_p99_s"] == runs[1].summary["e2e_p99_s"]
    assert runs[0].summary["iterations"] == runs[1].summary["iterations"]


def make_orca(budget: int, block_size: int = 16) -> Any:
    config = Scheduler(
        kind="orca", max_batched_tokens=budget, block_size=block_size, chunked_prefill=True
    )
    return make_scheduler(config, KVCache(10_000, block_size))


def test_orca_chunks_a_prompt_in_whole_blocks_beside_the_decodes() -> None:
    sched = make_orca(100)
    for req in (Request(0, 0.0, 40, 50), Request(1, 0.0, 40, 50), Request(2, 0.0, 300, 5)):
        sched.enqueue(req)
    first = sched.next_batch(0.0)
    # two whole prompts, then the third cut to the whole blocks of the 20 tokens left
    assert first.new_tokens == [40, 40, 16]
    sched.complete(first, 1.0, lambda r: None)
    second = sched.next_batch(1.0)
    assert second.new_tokens == [1, 1, 96]  # 98 left after two decodes: six blocks
    run = drive(sched, start=2.0)
    for batch in run.batches:
        assert batch.prefill_tokens + batch.decode_tokens <= 100
    # reserved whole at admission: never preempted
    assert sched.preemptions == 0


def test_orca_alone_with_a_budget_below_one_block_still_moves() -> None:
    sched = make_orca(10, block_size=16)
    sched.enqueue(Request(0, 0.0, 45, 3))
    run = drive(sched)
    assert [b.prefill_tokens for b in run.batches[:5]] == [10, 10, 10, 10, 5]
    assert len(run.finished) == 1


def test_warnings_know_a_chunked_orca() -> None:
    prompts = [8192] * 4
    chunked = Scheduler(
        kind="orca", max_batched_tokens=8192, max_batch_size=256, chunked_prefill=True
    )
    assert scheduler_warnings(chunked, np.array(prompts)) == []
    whole = Scheduler(kind="orca", max_batched_tokens=8192, max_batch_size=256)
    assert any("no room" in w for w in scheduler_warnings(whole, np.array(prompts)))


# --------------------------------------------------------------------------- properties


shapes = st.lists(
    st.tuples(st.integers(0, 20), st.integers(1, 500), st.integers(1, 60)), min_size=1, max_size=25
)


@settings(max_examples=60, deadline=None)
@given(
    shapes=shapes,
    budget=st.integers(8, 1200),
    max_batch_size=st.integers(1, 32),
    block_size=st.sampled_from([1, 8, 16, 32]),
    chunk_key=st.booleans(),
)
def test_sarathi_never_exceeds_its_budget(
    shapes: list[tuple[int, int, int]],
    budget: int,
    max_batch_size: int,
    block_size: int,
    chunk_key: bool,
) -> None:
    key = "chunk_size" if chunk_key else "max_batched_tokens"
    config = Scheduler(
        kind="sarathi", max_batch_size=max_batch_size, block_size=block_size, **{key: budget}
    )
    sched = make_scheduler(config, KVCache(2_000, block_size))
    pending = sorted(
        (Request(i, float(t), p, o) for i, (t, p, o) in enumerate(shapes)),
        key=lambda r: r.arrival_s,
    )
    now = 0.0
    finished: list[Request] = []
    for _ in range(20_000):
        while pending and pending[0].arrival_s <= now:
            sched.enqueue(pending.pop(0))
        if not sched.has_work and not pending:
            break
        batch = sched.next_batch(now)
        assert batch.prefill_tokens + batch.decode_tokens <= budget
        assert sum(batch.new_tokens) == batch.prefill_tokens + batch.decode_tokens
        now += 1.0
        if batch.requests:
            sched.complete(batch, now, finished.append)
    assert len(finished) == len(shapes)


@settings(max_examples=25, deadline=None)
@given(
    budget=st.integers(64, 4096),
    chunk_key=st.booleans(),
    rate=st.floats(1.0, 60.0),
    prompt=st.integers(16, 3000),
    fast_forward=st.booleans(),
)
def test_sarathi_runs_never_exceed_their_budget(
    budget: int, chunk_key: bool, rate: float, prompt: int, fast_forward: bool
) -> None:
    key = "chunk_size" if chunk_key else "max_batched_tokens"
    data = scenario(
        {"kind": "sarathi", key: budget, "max_batch_size": 32},
        workload__num_requests=30,
        workload__arrival={"kind": "poisson", "rate": rate},
        workload__prompt_tokens={"kind": "uniform", "low": 1, "high": prompt},
        fast_forward=fast_forward,
    )
    it = cbsim.simulate(load_scenario(data)).iterations
    assert (it["prefill_tokens"] + it["decode_tokens"] <= budget).all()
