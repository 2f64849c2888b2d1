"""The request table: finished requests as columns, and the requests DataFrame built from them is
the one the request objects themselves gave (the construction before the table, kept here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import cbsim
from cbsim.cost.engine_profile import (
    Frontend,
    StepOverhead,
    load_engine_profile,
    write_engine_profile,
)
from cbsim.engine.loop import Simulation
from cbsim.engine.recorder import requests_frame
from cbsim.run.loading import apply_engine_defaults
from cbsim.workload import request_table
from cbsim.workload.request import Request, Status
from cbsim.workload.request_table import FLUSH_EVERY, MIN_CAPACITY, RequestTable
from tests.conftest import small_scenario


def legacy_requests_frame(
    requests: Sequence[Request], delivered: np.ndarray | None = None
) -> pd.DataFrame:
    """The requests DataFrame as built from request objects before the table existed."""

    def col(name: str, dtype: Any) -> np.ndarray:
        return np.fromiter((getattr(r, name) for r in requests), dtype=dtype, count=len(requests))

    sent = col("sent_s", np.float64)
    arrival = col("arrival_s", np.float64)
    first = col("first_token_s", np.float64)
    finish = col("finish_s", np.float64)
    client_first, client_finish = first, finish
    if delivered is not None and len(requests):
        first_row = col("first_row", np.int64)
        last_row = col("last_row", np.int64)
        client_first = np.where(first_row >= 0, delivered[np.maximum(first_row, 0)], np.nan)
        done = ~np.isnan(finish)
        client_finish = np.where(done, delivered[np.maximum(last_row, 0)], np.nan)
    outputs = col("output_tokens", np.int64)
    spec_steps = col("spec_steps", np.int64)
    drafted = col("drafted_tokens", np.int64)
    decode_steps = col("decode_steps", np.int64)
    rejected_steps = np.fromiter(
        (getattr(r.spec, "rejections", 0) for r in requests), dtype=np.int64, count=len(requests)
    )
    ema = np.fromiter(
        (getattr(r.spec, "ema_acceptance", np.nan) for r in requests),
        dtype=np.float64,
        count=len(requests),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (client_finish - client_first) / (outputs - 1), np.nan)
        server_tpot = np.where(outputs > 1, (finish - first) / (outputs - 1), np.nan)
        mean_k = np.where(decode_steps > 0, drafted / np.maximum(decode_steps, 1), 0.0)
    status = pd.Categorical(
        [Status(r.status).name.lower() for r in requests],
        categories=[s.name.lower() for s in Status],
    )
    return pd.DataFrame(
        {
            "request_id": col("request_id", np.int64),
            "replica": col("replica", np.int64),
            "client": col("client", np.int64),
            "arrival_s": sent,
            "first_token_s": client_first,
            "finish_s": client_finish,
            "prompt_tokens": col("prompt_tokens", np.int64),
            "cached_tokens": col("cached_tokens", np.int64),
            "cached_tokens_cpu": col("cached_tokens_cpu", np.int64),
            "kv_load_s": col("kv_load_s", np.float64),
            "prefill_replica": col("prefill_replica", np.int64),
            "kv_wait_s": col("kv_wait_s", np.float64),
            "kv_transfer_s": col("kv_transfer_s", np.float64),
            "kv_arrived_s": col("kv_arrived_s", np.float64),
            "output_tokens": outputs,
            "ttft_s": client_first - sent,
            "tpot_s": tpot,
            "e2e_s": client_finish - sent,
            "queue_s": col("first_scheduled_s", np.float64) - arrival,
            "preemptions": col("preemptions", np.int64),
            "spec_steps": spec_steps,
            "drafted_tokens": drafted,
            "accepted_tokens": col("accepted_tokens", np.int64),
            "mean_k": mean_k,
            "decode_steps": decode_steps,
            "rejected_steps": rejected_steps,
            "ema_acceptance": ema,
            "status": status,
            "generated_tokens": col("generated", np.int64),
            # text also without rows (a plain empty list gave float64: fixed with the table)
            "rejected_reason": pd.Series(
                [r.rejected_reason for r in requests], dtype=request_table.REASON_DTYPE
            ),
            "server_arrival_s": arrival,
            "server_first_token_s": first,
            "server_finish_s": finish,
            "server_ttft_s": first - arrival,
            "server_tpot_s": server_tpot,
            "server_e2e_s": finish - arrival,
        }
    )


def assert_identical(new: pd.DataFrame, old: pd.DataFrame) -> None:
    """Same columns, dtypes and values, bit for bit (NaN where NaN)."""
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    assert list(new.columns) == list(old.columns)
    assert list(new.dtypes) == list(old.dtypes)
    for name in new.columns:
        a, b = new[name].to_numpy(), old[name].to_numpy()
        if a.dtype.kind in "fi":
            assert a.tobytes() == b.tobytes(), name


def run_capturing(
    data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[Simulation, list[Request]]:
    """Run a scenario, keeping every request object the engine hands to its table."""
    captured: list[Request] = []
    store = RequestTable.store

    def capture(self: RequestTable, req: Request, row: int | None = None) -> None:
        captured.append(req)
        store(self, req, row)

    with monkeypatch.context() as patch:
        patch.setattr(RequestTable, "store", capture)
        simulation = Simulation(apply_engine_defaults(cbsim.load_scenario(data)))
        simulation.run()
    captured.sort(key=lambda r: r.request_id)
    return simulation, captured


def check_against_legacy(
    data: dict[str, Any], monkeypatch: pytest.MonkeyPatch, streams: bool = False
) -> pd.DataFrame:
    simulation, requests = run_capturing(data, monkeypatch)
    frame = simulation.recorder.requests
    assert [r.request_id for r in requests] == list(range(len(requests)))
    assert simulation.requests == {}  # nothing left in flight as an object
    delivered = simulation.recorder.iterations["delivered_s"].to_numpy() if streams else None
    assert_identical(frame, legacy_requests_frame(requests, delivered))
    assert_identical(requests_frame(requests, delivered), frame)
    return frame


def with_frontend(data: dict[str, Any], tmp_path: Path, **terms: float) -> dict[str, Any]:
    profile = load_engine_profile("none").model_copy(
        update={"frontend": Frontend(**terms), "overhead": StepOverhead()}
    )
    path = tmp_path / "engine.json"
    write_engine_profile(profile, path)
    data["cluster"]["engine"] = str(path)
    return data


# --------------------------------------------------------------------------- the table


def request(request_id: int, **fields: Any) -> Request:
    req = Request(request_id, 0.5 * request_id, 100 + request_id, 10)
    for name, value in fields.items():
        setattr(req, name, value)
    return req


def test_columns_grow_by_doubling_and_rows_land_by_id() -> None:
    table = RequestTable()
    assert table.capacity == 0
    table.store(request(3, finish_s=7.0))
    table.flush()
    assert table.capacity == MIN_CAPACITY
    assert table.rows == 4
    for i in (0, 1, 2):
        table.store(request(i))
    table.store(request(MIN_CAPACITY + 5))  # past the end: double (at least)
    table.flush()
    assert table.capacity == max(2 * MIN_CAPACITY, MIN_CAPACITY + 6)
    assert table.rows == MIN_CAPACITY + 6
    assert table.column("prompt_tokens")[:4].tolist() == [100, 101, 102, 103]
    assert table.column("finish_s")[3] == 7.0
    with pytest.raises(ValueError, match="never stored"):
        table.frame()  # rows 4 .. MIN_CAPACITY + 4 are missing


def test_known_size_is_allocated_once() -> None:
    table = RequestTable(10)
    for i in reversed(range(10)):
        table.store(request(i, status=Status.FINISHED))
    assert table.capacity == 10
    frame = table.frame()
    assert frame["request_id"].tolist() == list(range(10))
    assert (frame["status"] == "finished").all()


def test_requests_are_copied_in_batches_and_released() -> None:
    table = RequestTable()
    for i in range(FLUSH_EVERY - 1):
        table.store(request(i))
    assert table.rows == 0  # still pending
    table.store(request(FLUSH_EVERY - 1))
    assert table.rows == table.stored == FLUSH_EVERY
    assert table._pending == []


def test_an_empty_table_gives_the_empty_frame() -> None:
    assert_identical(RequestTable().frame(), legacy_requests_frame([]))
    assert_identical(requests_frame([]), legacy_requests_frame([]))


def test_frame_columns_own_their_memory() -> None:
    """Client and server times agree without a front end but are separate columns."""
    table = RequestTable.from_requests([request(0, first_token_s=1.0, finish_s=2.0)])
    frame = table.frame()
    first = frame["first_token_s"].to_numpy()
    assert not np.shares_memory(first, frame["server_first_token_s"].to_numpy())


# --------------------------------------------------------------------------- runs


def test_open_loop_frame_is_the_legacy_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = check_against_legacy(small_scenario({"workload.num_requests": 300}), monkeypatch)
    assert (frame["status"] == "finished").all()


def test_rejected_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    data = small_scenario(
        {
            "workload.num_requests": 60,
            "workload.prompt_tokens": {"kind": "uniform", "low": 4000, "high": 12000},
        }
    )
    frame = check_against_legacy(data, monkeypatch)
    rejected = frame[frame["status"] == "rejected"]
    assert 0 < len(rejected) < len(frame)
    assert (rejected["rejected_reason"] == "context_length").all()
    assert (frame.loc[frame["status"] == "finished", "rejected_reason"] == "").all()
    assert rejected["first_token_s"].isna().all()


def test_requests_in_flight_at_the_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    data = small_scenario({"workload.num_requests": 200, "horizon_s": 5.0})
    frame = check_against_legacy(data, monkeypatch)
    statuses = set(frame["status"])
    assert "finished" in statuses
    assert statuses & {"waiting", "running"}
    assert len(frame) < 200  # requests not yet sent have no row


def test_closed_loop_frame_grows_and_is_the_legacy_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(request_table, "MIN_CAPACITY", 16)
    monkeypatch.setattr(request_table, "FLUSH_EVERY", 7)
    data = small_scenario(
        {
            "workload.arrival": {"kind": "closed_loop", "concurrency": 6, "think_time_s": 0.01},
            "workload.duration_s": 20.0,
        }
    )
    del data["workload"]["num_requests"]  # no count known: the table grows
    simulation, requests = run_capturing(data, monkeypatch)
    assert simulation.table.capacity == 16 * 2 ** math.ceil(math.log2(len(requests) / 16))
    frame = check_against_legacy(data, monkeypatch)
    assert len(frame) == len(requests) > 100
    assert set(frame["client"]) == set(range(6))


def test_closed_loop_prompt_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    data = small_scenario(
        {"workload.arrival": {"kind": "closed_loop", "concurrency": 4}, "workload.num_requests": 50}
    )
    simulation, requests = run_capturing(data, monkeypatch)
    assert simulation.prompt_lengths().tolist() == [r.prompt_tokens for r in requests]


def test_streaming_front_end_frame_is_the_legacy_frame(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = with_frontend(
        small_scenario({"workload.num_requests": 100}),
        tmp_path,
        request_s=0.002,
        output_token_s=2e-4,
    )
    frame = check_against_legacy(data, monkeypatch, streams=True)
    assert (frame["first_token_s"] > frame["server_first_token_s"]).all()


def test_speculative_frame_is_the_legacy_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    data = small_scenario(
        {
            "workload.num_requests": 60,
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "draft_model", "model": "llama-3.2-1b"},
                "acceptance": {"kind": "per_request", "mean": 0.7},
            },
        }
    )
    frame = check_against_legacy(data, monkeypatch)
    assert frame["drafted_tokens"].sum() > 0
    assert frame["ema_acceptance"].notna().any()
    assert frame["rejected_steps"].sum() > 0
