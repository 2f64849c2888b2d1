"""Client timeouts and closed loops at their edges: what a timed-out request keeps, times that never
run backwards, and closed loops whose every request is rejected or given up.

Each test replays a defect the feature campaigns found (issue 38), in a scenario a few requests
long: llama-3-8b on an H100.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import cbsim
from cbsim.cli.commands import cli
from cbsim.workload.sources.closed_loop import give_up_after


def run(data: dict[str, Any]) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(data))


def tokens_conserved(results: cbsim.Results) -> bool:
    """The iterations emitted exactly the tokens the requests record as generated."""
    emitted = int(results.iterations["emitted_tokens"].sum())
    return emitted == int(results.requests["generated_tokens"].sum())


def closed_loop(
    concurrency: int, requests: int, timeout_s: float, **cluster: Any
) -> dict[str, Any]:
    return {
        "seed": 3,
        "workload": {
            "num_requests": requests,
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "prompt_tokens": {"kind": "uniform", "low": 10, "high": 200},
            "output_tokens": {"kind": "uniform", "low": 1, "high": 5},
            "client": {"timeout_s": timeout_s},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "engine": "vllm", **cluster},
    }


def test_a_request_given_up_as_its_prefill_ends_generated_nothing() -> None:
    """Disaggregated, a request whose timeout fell in its prefill kept the token its prefill
    instance sampled (``generated_tokens`` 1) though that iteration emits none (the decode
    instance computes the first token): the requests recorded more tokens than were emitted."""
    split = {"prefill": {}, "decode": {}}
    results = run(closed_loop(6, 12, 0.005, disaggregation=split))  # a prefill takes ~16 ms
    req = results.requests
    assert (req["status"] == "timed_out").all()
    assert (req["generated_tokens"] == 0).all()
    assert req["first_token_s"].isna().all()
    assert tokens_conserved(results)


def float_columns(results: cbsim.Results) -> dict[str, Any]:
    """Every float column of the three frames, named ``frame.column``."""
    frames = {"requests": results.requests, "iterations": results.iterations}
    frames["timeseries"] = results.timeseries
    return {
        f"{name}.{column}": frame[column]
        for name, frame in frames.items()
        for column in frame.columns
        if frame[column].dtype.kind == "f"
    }


def test_a_capped_open_loop_never_waits_a_negative_time() -> None:
    """A slot of a capped open loop freed long before its next request is ready sent it a
    relative delay later (``now + (ready - now)``), which rounded a float below the ready time:
    the request was queued before it arrived (``queue_s`` −6.9e−18)."""
    data = closed_loop(2, 10, 1.0)
    del data["workload"]["client"]
    data["seed"] = 86
    data["workload"]["arrival"] = {"kind": "poisson", "rate": 50.0, "max_concurrency": 2}
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 5, "high": 300}
    data["workload"]["output_tokens"]["high"] = 3
    results = run(data)
    negative = {k: float(v.min()) for k, v in float_columns(results).items() if (v < 0).any()}
    assert not negative


SPECULATIVE = {"enabled": True, "proposer": {"kind": "ngram"}, "policy": {"kind": "fixed", "k": 3}}


def test_a_closed_loop_rejecting_everything_at_once_reports_the_rejections(tmp_path: Path) -> None:
    """Speculative requests longer than the context, every one rejected as it is sent: the
    closed loop stopped the run with an error (exit 2, nothing written); an open loop reports
    them. It now stops sending, and the run reports what it sent, rejected with their reason,
    says why it stopped and exits 1 (every request rejected) with its results written."""
    data = closed_loop(2, 5000, 1.0)
    del data["workload"]["client"]
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 9000}  # > the 8,192 context
    data["speculative"] = SPECULATIVE
    path, out = tmp_path / "long.yaml", tmp_path / "out"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "-q"])
    assert result.exit_code == 1, result.output
    sent = give_up_after(2)
    assert f"every one of the {sent:,} requests was rejected" in result.stderr
    assert "the closed loop stopped sending at t = 0 s" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected_context_length"] == summary["requests"] == sent
    assert "the closed loop stopped sending" in summary["warnings"]


def test_a_closed_loop_whose_every_request_times_out_stops_sending() -> None:
    """Each request given up before its prompt is computed: the loop sent on to its 5,000
    requests (towards millions with ``duration_s``), serving none; now it stops once
    :func:`give_up_after` in a row timed out with none finishing, and says so."""
    data = closed_loop(1, 5000, 0.001)
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 2000}  # ~30 ms to prefill
    results = run(data)
    req = results.requests
    assert len(req) == give_up_after(1)
    assert (req["status"] == "timed_out").all()
    assert "1,100 requests in a row timed out" in results.summary["warnings"]
    assert tokens_conserved(results)


def test_a_finish_restarts_the_count_of_requests_given_up() -> None:
    """A loop that finishes now and then is not stopped, however many time out around it."""
    data = closed_loop(1, 2 * give_up_after(1), 0.03)
    data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 500, "high": 4000}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 1}  # in time up to ~1,300
    results = run(data)
    status = results.requests["status"].astype(str)
    assert len(status) == 2 * give_up_after(1)
    assert 0 < (status == "finished").sum() < len(status) / 2
    assert "stopped sending" not in results.summary["warnings"]
