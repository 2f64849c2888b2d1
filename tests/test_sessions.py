"""Multi-turn sessions: the conversation as each turn's prompt, turns sent one after another,
and the prefix-cache hit rate their shape implies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.workload.build import build_workload
from cbsim.workload.sessions import SessionWorkload

USER, ANSWER, TURNS, BLOCK = 200, 300, 4, 16


def _scenario(caching: bool = True, **sessions: Any) -> dict[str, Any]:
    config = {
        "count": 60,
        "turns": {"kind": "fixed", "value": TURNS},
        "user_tokens": {"kind": "fixed", "value": USER},
        "answer_tokens": {"kind": "fixed", "value": ANSWER},
        "think_time_s": 2.0,
        **sessions,
    }
    return {
        "name": "sessions",
        "seed": 5,
        "workload": {"arrival": {"kind": "poisson", "rate": 1.0}, "sessions": config},
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "prefix_caching": caching},
    }


def test_each_turn_resends_the_conversation() -> None:
    scenario = cbsim.load_scenario(
        _scenario(system_prompt={"templates": 2, "tokens": {"kind": "fixed", "value": 50}})
    )
    sessions = build_workload(scenario)
    assert isinstance(sessions, SessionWorkload)
    turn = sessions.turn(3, 2)
    assert turn.prompt_tokens == 50 + 2 * (USER + ANSWER) + USER
    assert turn.output_tokens == ANSWER
    assert turn.sizes == [50, USER, ANSWER, USER, ANSWER, USER, ANSWER]
    assert len(sessions) == 60 * TURNS
    assert sessions.prompt_lengths()[sessions.first[3] + 2] == turn.prompt_tokens


def test_a_sessions_turns_follow_its_answers() -> None:
    results = cbsim.simulate(cbsim.load_scenario(_scenario()))
    req = results.requests
    assert len(req) == 60 * TURNS and (req["status"] == "finished").all()
    for _, turns in req.groupby("client"):
        sent = turns["arrival_s"].to_numpy()
        done = turns["finish_s"].to_numpy()
        assert np.allclose(sent[1:], done[:-1] + 2.0)  # think time after the answer arrived
        expected = [t * (USER + ANSWER) + USER for t in range(TURNS)]
        assert turns["prompt_tokens"].tolist() == expected


@pytest.mark.parametrize("answer", [ANSWER, 312])
def test_hit_rate_is_what_the_session_shape_implies(answer: int) -> None:
    """Turn t reuses every earlier message and answer, in whole blocks, except the answer's last
    token (never in the cache: the KV holds all but the last sampled token). With 200 + 312
    tokens a turn ends on a block boundary, so each answer is cached a block short until the next
    turn's prefill completes it."""
    data = _scenario(answer_tokens={"kind": "fixed", "value": answer})
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert results.run_info["prefix_evicted_blocks"] == 0
    cached = sum(BLOCK * ((t * (USER + answer) - 1) // BLOCK) for t in range(1, TURNS))
    prompts = sum(t * (USER + answer) + USER for t in range(TURNS))
    assert results.summary["prefix_hit_rate"] == pytest.approx(cached / prompts, rel=1e-12)
    off = cbsim.simulate(cbsim.load_scenario(_scenario(caching=False)))
    assert off.summary["prefix_hit_rate"] == 0.0
    assert results.summary["ttft_p50_s"] < off.summary["ttft_p50_s"]


def test_a_shared_system_prompt_raises_the_hit_rate() -> None:
    system = {"templates": 3, "tokens": {"kind": "fixed", "value": 2000}, "zipf": 1.2}
    shared = cbsim.simulate(cbsim.load_scenario(_scenario(system_prompt=system)))
    req = shared.requests
    first_turns = req.groupby("client").head(1)
    assert (first_turns["cached_tokens"] > 0).mean() > 0.9  # all but each template's first user
    assert shared.summary["prefix_hit_rate"] > 0.85


def test_sessions_refuse_request_level_keys() -> None:
    data = _scenario()
    data["workload"]["num_requests"] = 10
    with pytest.raises(CbsimError, match="leave out num_requests"):
        cbsim.load_scenario(data)
    data = _scenario()
    del data["workload"]["arrival"]
    with pytest.raises(CbsimError, match=r"sessions start by workload\.arrival"):
        cbsim.load_scenario(data)


@pytest.mark.parametrize("router", ["prefix_aware", "session_affinity"])
def test_fast_forward_equals_stepping_with_sessions(router: str) -> None:
    """A cache too small for the conversations: evictions and preemptions, two replicas."""
    runs = []
    for fast in (True, False):
        data = _scenario(count=150, think_time="exponential")
        data["workload"]["arrival"]["rate"] = 4.0
        data["cluster"].update(replicas=2, router=router, gpu_memory_utilization=0.241)
        data["fast_forward"] = fast
        runs.append(cbsim.simulate(cbsim.load_scenario(data)))
    assert runs[0].run_info["prefix_evicted_blocks"] > 0 and runs[0].summary["preemptions"] > 0
    assert runs[0].requests.equals(runs[1].requests)
    assert runs[0].iterations.equals(runs[1].iterations)
