"""Key and metric typos get a suggestion (issue 27, defect 8: ``--slo ttft_p99=2`` listed 60
names, ``seed`` among them; an unknown key said only "check the spelling")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.studies.capacity.checks import _metric_value

BASE: dict[str, Any] = {
    "workload": {"num_requests": 3, "arrival": {"kind": "poisson", "rate": 2}},
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
}


@pytest.mark.parametrize(
    ("path", "typo", "meant"),
    [
        (("workload",), "num_request", "num_requests"),
        (("workload", "arrival"), "rat", "rate"),
        (("cluster",), "replica", "replicas"),
        ((), "sloo", "slo"),
    ],
)
def test_an_unknown_key_suggests_the_close_known_key(
    path: tuple[str, ...], typo: str, meant: str
) -> None:
    data = copy.deepcopy(BASE)
    section: dict[str, Any] = data
    for part in path:
        section = section[part]
    section[typo] = 1
    with pytest.raises(CbsimError) as caught:
        cbsim.load_scenario(data)
    assert f"did you mean {meant!r}" in str(caught.value)
    assert "known here:" in str(caught.value)


def test_an_unknown_slo_metric_suggests_the_metric_and_lists_no_counts() -> None:
    summary = {"seed": 1, "requests": 10, "ttft_p99_s": 0.2, "tpot_p99_s": 0.01, "name": "x"}
    with pytest.raises(CbsimError) as caught:
        _metric_value(summary, "ttft_p99")
    message = str(caught.value)
    assert "did you mean 'ttft_p99_s'" in message
    assert "'seed'" not in message and "seed," not in message and "requests" not in message
