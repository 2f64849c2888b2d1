"""Disaggregated prefill and decode (``cluster.disaggregation``): prefill instances compute the
prompts, the KV crosses a link (:mod:`cbsim.memory.kv_transfer`), decode instances produce the tokens."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.memory.kv_transfer import NVLINK_LATENCY_S, RDMA_LATENCY_S, node_of_instances
from cbsim.run.loading import load_scenario
from tests.conftest import small_scenario, summaries_equal


def disaggregated(
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    kv_transfer: dict[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    data = small_scenario(**overrides)
    del data["cluster"]["replicas"]
    data["cluster"]["disaggregation"] = {
        "prefill": prefill or {"replicas": 1},
        "decode": decode or {"replicas": 1},
        "kv_transfer": kv_transfer or {},
    }
    return data


def one_request(prompt: int = 3000, output: int = 20, **kwargs: Any) -> dict[str, Any]:
    data = disaggregated(**kwargs)
    data["workload"] = {
        "num_requests": 1,
        "arrival": {"kind": "poisson", "rate": 1.0},
        "prompt_tokens": {"kind": "fixed", "value": prompt},
        "output_tokens": {"kind": "fixed", "value": output},
    }
    return data


L8 = get_model("llama-3-8b")


@pytest.mark.parametrize(
    ("link", "bandwidth", "latency"),
    [("nvlink", None, None), ("rdma", None, None), ("rdma", 12.5, 0.002), ("nvlink", 100.0, 0.0)],
)
def test_transfer_time_is_kv_bytes_over_bandwidth_plus_latency(
    link: str, bandwidth: float | None, latency: float | None
) -> None:
    settings_: dict[str, Any] = {"link": link}
    if bandwidth is not None:
        settings_ |= {"bandwidth_gb_s": bandwidth, "latency_s": latency}
    result = cbsim.simulate(one_request(3000, kv_transfer=settings_))
    row = result.requests.iloc[0]
    kv_bytes = 3000 * kv_bytes_per_token_per_gpu(L8, 1, "bf16")
    gpu = get_gpu("h100-sxm")
    if bandwidth is None:
        per_gpu = gpu.nvlink_bandwidth if link == "nvlink" else gpu.network_bandwidth
        expected = kv_bytes / per_gpu + (NVLINK_LATENCY_S if link == "nvlink" else RDMA_LATENCY_S)
    else:
        expected = kv_bytes / (bandwidth * 1e9) + latency
    assert row["kv_transfer_s"] == expected
    assert row["kv_wait_s"] == 0.0


def test_ttft_is_prefill_then_transfer_then_the_decode_instances_first_step() -> None:
    data = one_request(3000, 20, kv_transfer={"link": "rdma", "bandwidth_gb_s": 1.0})
    result = cbsim.simulate(data)
    row = result.requests.iloc[0]
    its = result.iterations
    prefill = its[its["replica"] == 0]
    decode = its[its["replica"] == 1]
    assert len(prefill) == 1 and prefill["prefill_tokens"].iloc[0] == 3000
    # the decode instance computes the prompt's last token (sampling the first output) and
    # decodes the other 19
    assert len(decode) == 20 and decode["emitted_tokens"].sum() == 20
    prefill_end = prefill["start_s"].iloc[0] + prefill["duration_s"].iloc[0]
    assert decode["start_s"].iloc[0] == pytest.approx(prefill_end + row["kv_transfer_s"])
    first_end = decode["start_s"].iloc[0] + decode["duration_s"].iloc[0]
    assert row["server_first_token_s"] == pytest.approx(first_end)
    assert row["replica"] == 1 and row["prefill_replica"] == 0
    # at 1 GB/s the transfer dominates the first token
    assert row["kv_transfer_s"] > 0.3 and row["server_ttft_s"] > row["kv_transfer_s"]


def test_every_request_and_token_is_served_once() -> None:
    data = disaggregated(
        prefill={"replicas": 2}, decode={"replicas": 2}, workload__num_requests=120
    )
    data["workload"]["arrival"]["rate"] = 30.0
    result = cbsim.simulate(data)
    req, its = result.requests, result.iterations
    assert (req["status"] == "finished").all()
    assert set(req["prefill_replica"]) <= {0, 1} and set(req["replica"]) <= {2, 3}
    prefill, decode = its[its["replica"] < 2], its[its["replica"] >= 2]
    assert prefill["prefill_tokens"].sum() == req["prompt_tokens"].sum()
    assert prefill["emitted_tokens"].sum() == 0  # the prefill's token is the decode's to give
    assert decode["emitted_tokens"].sum() == req["output_tokens"].sum()
    assert (its["kv_blocks_used"] <= its["kv_blocks_total"]).all()
    assert (req["first_token_s"] >= req["arrival_s"]).all()


def test_a_decode_instance_without_room_holds_the_prefill_instances_blocks() -> None:
    """A decode pool too small for the load: prefilled requests wait for its blocks (kv_wait_s),
    and their prompts' blocks stay taken on the prefill instance meanwhile."""
    data = disaggregated(
        decode={"replicas": 1, "gpu_memory_utilization": 0.3},
        workload__num_requests=60,
    )
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 4000}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 400}
    data["workload"]["arrival"]["rate"] = 50.0
    result = cbsim.simulate(data)
    req, its = result.requests, result.iterations
    assert (req["status"] == "finished").all()
    assert req["kv_wait_s"].max() > 1.0
    decode = its[its["replica"] == 1]
    assert (decode["kv_blocks_used"] <= decode["kv_blocks_total"]).all()
    prefill = its[its["replica"] == 0]
    # kv_blocks_used is taken as the prefill iteration starts: later batches see held blocks
    assert prefill["kv_blocks_used"].max() > 4 * 4000 / 16


def test_layerwise_transfer_overlaps_the_prefill() -> None:
    slow = {"link": "rdma", "bandwidth_gb_s": 2.0, "latency_s": 0.0}
    whole = cbsim.simulate(one_request(6000, kv_transfer=slow)).requests.iloc[0]
    layered = cbsim.simulate(one_request(6000, kv_transfer=slow | {"layerwise": True}))
    row = layered.requests.iloc[0]
    prefill_s = row["server_first_token_s"] - row["server_arrival_s"] - row["kv_transfer_s"]
    assert prefill_s > 0
    assert row["kv_transfer_s"] < whole["kv_transfer_s"]
    copy_s = whole["kv_transfer_s"]
    its = layered.iterations
    prefill_iteration = its[its["replica"] == 0]["duration_s"].iloc[0]
    assert row["kv_transfer_s"] == pytest.approx(
        max(copy_s / L8.num_layers, copy_s - prefill_iteration)
    )


def test_prefill_heavy_traffic_tpot_p99_falls_and_ttft_rises() -> None:
    """Equal GPUs (two): long prompts stall an aggregated replica's decodes; split pools do not."""
    data = disaggregated(workload__num_requests=150)
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 3000, "high": 8000}
    data["workload"]["output_tokens"] = {"kind": "uniform", "low": 100, "high": 300}
    data["workload"]["arrival"]["rate"] = 4.0
    split = cbsim.simulate(data).summary
    together = copy.deepcopy(data)
    del together["cluster"]["disaggregation"]
    together["cluster"] |= {"replicas": 2, "router": "least_loaded"}
    aggregated = cbsim.simulate(together).summary
    assert split["tpot_p99_s"] < 0.8 * aggregated["tpot_p99_s"]
    assert split["itl_p99_s"] < 0.2 * aggregated["itl_p99_s"]
    assert split["ttft_p50_s"] > aggregated["ttft_p50_s"]


def test_speculative_decoding_runs_in_the_decode_pool_only() -> None:
    data = disaggregated(workload__num_requests=30)
    data["speculative"] = {
        "enabled": True,
        "proposer": {"kind": "draft_model", "model": "llama-3.2-1b"},
        "policy": {"kind": "fixed", "k": 3},
    }
    result = cbsim.simulate(data)
    its = result.iterations
    assert its[its["replica"] == 0]["drafted_tokens"].sum() == 0
    assert its[its["replica"] == 1]["drafted_tokens"].sum() > 0
    assert (result.requests["status"] == "finished").all()
    assert result.requests["output_tokens"].sum() == its["emitted_tokens"].sum()


def test_pools_take_their_own_gpu_layout_and_scheduler() -> None:
    data = disaggregated(
        prefill={
            "replicas": 1,
            "gpu": "h200",
            "scheduler": {"kind": "sarathi", "chunk_size": 1024},
        },
        decode={"replicas": 2, "gpu": "a100-80gb", "tp": 2},
        workload__num_requests=30,
    )
    result = cbsim.simulate(data)
    its = result.iterations
    totals = its.groupby("replica")["kv_blocks_total"].first()
    assert totals[1] == totals[2] != totals[0]
    assert its[its["replica"] == 0]["prefill_tokens"].max() <= 1024
    # H200 to A100 nodes: RDMA at the slower NIC (A100's), one stream (tp 1 sends to tp 2),
    # the bytes the decode instance's two GPUs keep
    per_token = kv_bytes_per_token_per_gpu(L8, 2, "bf16") * 2
    bandwidth = min(get_gpu("h200").network_bandwidth, get_gpu("a100-80gb").network_bandwidth)
    req = result.requests
    expected = req["prompt_tokens"] * per_token / bandwidth + RDMA_LATENCY_S
    np.testing.assert_allclose(req["kv_transfer_s"], expected, rtol=1e-12)


def test_deterministic() -> None:
    data = disaggregated(prefill={"replicas": 2}, decode={"replicas": 1}, workload__num_requests=50)
    a, b = cbsim.simulate(data), cbsim.simulate(data)
    assert a.requests.equals(b.requests) and a.iterations.equals(b.iterations)


def test_instances_share_a_node_only_where_packing_puts_them_together() -> None:
    # 2 prefill tp 4 then 2 decode tp 4 on 8-GPU nodes: P0 P1 | D0 D1
    assert node_of_instances([4, 4, 4, 4], ["h100"] * 4, [8] * 4) == [0, 0, 1, 1]
    # 1 prefill tp 2 and 1 decode tp 4 fit in one node
    assert node_of_instances([2, 4], ["h100"] * 2, [8] * 2) == [0, 0]
    # another GPU kind starts a node; a 16-GPU instance takes two
    assert node_of_instances([2, 2], ["h100", "h200"], [8, 8]) == [0, 1]
    assert node_of_instances([16, 8, 1], ["h100"] * 3, [8] * 3) == [0, 2, 3]


def test_auto_link_is_nvlink_within_a_node_and_rdma_across() -> None:
    near = one_request(2000, prefill={"replicas": 1, "tp": 4}, decode={"replicas": 1, "tp": 4})
    far = one_request(2000, prefill={"replicas": 1, "tp": 8}, decode={"replicas": 1, "tp": 8})
    per_token = kv_bytes_per_token_per_gpu(L8, 4, "bf16") * 4
    h100 = get_gpu("h100-sxm")
    got = cbsim.simulate(near).requests["kv_transfer_s"].iloc[0]
    assert got == 2000 * per_token / (4 * h100.nvlink_bandwidth) + NVLINK_LATENCY_S
    per_token = kv_bytes_per_token_per_gpu(L8, 8, "bf16") * 8
    got = cbsim.simulate(far).requests["kv_transfer_s"].iloc[0]
    assert got == 2000 * per_token / (8 * h100.network_bandwidth) + RDMA_LATENCY_S


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["cluster"].update(replicas=2), "cluster"),  # a cross-key check
        (
            lambda d: d["cluster"]["disaggregation"]["decode"].update(scheduler={"kind": "static"}),
            "cluster.disaggregation.decode.scheduler.kind",
        ),
        (
            lambda d: d["cluster"]["disaggregation"]["prefill"].update(tpp=2),
            "cluster.disaggregation.prefill.tpp",
        ),
        (
            lambda d: d["cluster"]["disaggregation"]["decode"].update(tp=3),
            "cluster.disaggregation.decode.tp",
        ),
        (
            lambda d: d["cluster"]["disaggregation"]["prefill"].update(scheduler={"kind": "x"}),
            "cluster.disaggregation.prefill.scheduler.kind",
        ),
        (
            lambda d: d["cluster"]["disaggregation"]["kv_transfer"].update(link="pcie"),
            "cluster.disaggregation.kv_transfer.link",
        ),
    ],
)
def test_bad_pools_are_refused_with_their_field(change: Any, field: str) -> None:
    data = disaggregated()
    change(data)
    with pytest.raises(CbsimError) as info:
        load_scenario(data)
    assert info.value.field == field, str(info.value)


@settings(max_examples=25, deadline=None)
@given(
    prefill=st.integers(1, 3),
    decode=st.integers(1, 3),
    rate=st.floats(1.0, 60.0),
    kind=st.sampled_from(["prefill_first", "sarathi", "orca"]),
    bandwidth=st.sampled_from([None, 0.5, 50.0]),
    seed=st.integers(0, 50),
)
def test_conservation_and_capacity_hold_for_any_pools(
    prefill: int, decode: int, rate: float, kind: str, bandwidth: float | None, seed: int
) -> None:
    transfer = {} if bandwidth is None else {"bandwidth_gb_s": bandwidth}
    data = disaggregated(
        prefill={"replicas": prefill},
        decode={"replicas": decode, "scheduler": {"kind": kind}},
        kv_transfer=transfer,
        workload__num_requests=40,
        seed=seed,
    )
    data["workload"]["arrival"]["rate"] = rate
    result = cbsim.simulate(data)
    req, its = result.requests, result.iterations
    assert (req["status"] == "finished").all()
    assert its["emitted_tokens"].sum() == req["output_tokens"].sum()
    assert (its["kv_blocks_used"] <= its["kv_blocks_total"]).all()
    first = req["server_first_token_s"].to_numpy()
    done = req["server_finish_s"].to_numpy()
    assert np.all(first >= req["server_arrival_s"].to_numpy() + req["kv_transfer_s"].to_numpy())
    assert np.all(done >= first)


def test_a_mixed_fleet_runs_each_group_on_its_own_gpu() -> None:
    """``cluster.pools``: aggregated replica groups of their own settings (every replica does
    both phases), each with its own KV capacity and cost."""
    data = small_scenario(workload__num_requests=80)
    del data["cluster"]["replicas"]
    data["cluster"] |= {
        "router": "least_loaded",
        "pools": [{"gpu": "h100-sxm", "replicas": 1}, {"gpu": "l40s", "replicas": 2}],
    }
    data["workload"]["arrival"]["rate"] = 20.0
    result = cbsim.simulate(data)
    req, its = result.requests, result.iterations
    assert (req["status"] == "finished").all()
    assert set(req["replica"]) == {0, 1, 2}
    assert (req["prefill_replica"] == -1).all() and (req["kv_transfer_s"] == 0).all()
    totals = its.groupby("replica")["kv_blocks_total"].first()
    assert totals[1] == totals[2] != totals[0]
    assert its["emitted_tokens"].sum() == req["output_tokens"].sum()
    # the L40S are slower: the same batch takes longer there
    one = its[its["batch_size"] == 1]
    per_replica = one.groupby("replica")["duration_s"].min()
    assert per_replica[1] > per_replica[0]


def test_a_mixed_fleet_routes_by_load_weighted_with_speed() -> None:
    """A replica twice as slow counts each of its tokens twice: least_loaded sends the faster
    pool more of the traffic."""
    data = small_scenario(workload__num_requests=200)
    del data["cluster"]["replicas"]
    data["cluster"] |= {
        "router": "least_loaded",
        "pools": [{"gpu": "l40s", "replicas": 1}, {"gpu": "h200", "replicas": 1}],
    }
    data["workload"]["arrival"]["rate"] = 40.0
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 2000}
    result = cbsim.simulate(data)
    share = (result.requests["replica"] == 1).mean()
    assert share > 0.6  # the H200 replica takes most
    from cbsim.engine.loop import Simulation

    simulation = Simulation(load_scenario(data))
    l40s, h200 = simulation.replicas
    assert h200.load_scale == 1.0 and l40s.load_scale > 2.0


def test_transfers_appear_in_the_iterations_timeseries_and_summary(tmp_path: Path) -> None:
    data = disaggregated(
        kv_transfer={"link": "rdma", "bandwidth_gb_s": 2.0}, workload__num_requests=60
    )
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 3000}
    data["workload"]["arrival"]["rate"] = 8.0
    result = cbsim.simulate(data)
    req, its, series = result.requests, result.iterations, result.timeseries
    # every request's KV crossed once: the timeseries counts each in the window it arrived
    assert series["kv_transfers"].sum() == len(req)
    assert np.nanmax(series["kv_transfer_s"]) == pytest.approx(req["kv_transfer_s"].max(), rel=0.2)
    assert (req["kv_arrived_s"] >= req["server_arrival_s"] + req["kv_transfer_s"]).all()
    # a prefill iteration sees the prompts it still holds, a decode one the KV crossing into it
    assert its["kv_transfers"].max() >= 1 and (its["kv_transfers"] >= 0).all()
    summary = result.summary
    assert summary["kv_transfer_p50_s"] == pytest.approx(req["kv_transfer_s"].median())
    assert summary["kv_wait_p99_s"] >= summary["kv_wait_p50_s"] >= 0.0
    # streamed, the same rows
    streamed = cbsim.simulate(data, stream_to=tmp_path / "its.parquet")
    assert streamed.load_iterations()["kv_transfers"].sum() == its["kv_transfers"].sum()


def test_aggregated_runs_keep_their_columns() -> None:
    result = cbsim.simulate(small_scenario())
    assert "kv_transfers" not in result.iterations
    assert "kv_transfers" not in result.timeseries
    assert not any(key.startswith("kv_transfer") for key in result.summary)
    assert (result.requests["prefill_replica"] == -1).all()
    assert result.requests["kv_arrived_s"].isna().all()


def closed_loop_split(
    seed: int, clients: int, prefill: int, decode: int, gpus: tuple[str, str], think: float
) -> dict[str, Any]:
    """A closed loop on prefill instances of one GPU kind and decode instances of another."""
    data = disaggregated(
        prefill={"replicas": prefill, "gpu": gpus[0]},
        decode={"replicas": decode, "gpu": gpus[1]},
        seed=seed,
    )
    data["cluster"].update(model="llama-3.2-1b", router="random")
    data["workload"] = {
        "num_requests": 12,
        "arrival": {"kind": "closed_loop", "concurrency": clients, "think_time_s": think},
        "prompt_tokens": {"kind": "uniform", "low": 50, "high": 2000},
        "output_tokens": {"kind": "uniform", "low": 1, "high": 300},
    }
    return data


@settings(max_examples=6, deadline=None)
# a decode run waited for in one event ended a float step after stepping's last iteration (no
# delay from the run's start reached its end), and the clients' next requests followed it
@example(seed=13, clients=3, prefill=2, decode=2, gpus=("l40s", "mi300x"), think=0.0)
@given(
    seed=st.integers(0, 10_000),
    clients=st.integers(1, 4),
    prefill=st.integers(1, 2),
    decode=st.integers(1, 2),
    gpus=st.sampled_from([("l40s", "mi300x"), ("mi300x", "l40s")]),
    think=st.sampled_from([0.0, 0.004]),
)
def test_fast_forward_is_stepping_in_a_disaggregated_closed_loop(
    seed: int, clients: int, prefill: int, decode: int, gpus: tuple[str, str], think: float
) -> None:
    data = closed_loop_split(seed, clients, prefill, decode, gpus, think)
    fast = cbsim.simulate(data)
    data["fast_forward"] = False
    slow = cbsim.simulate(data)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.iterations, slow.iterations)
    assert summaries_equal(fast.summary, slow.summary)
