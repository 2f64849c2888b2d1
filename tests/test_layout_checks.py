"""Layouts a pool's GPUs cannot run are refused at validation, naming the scenario file and the
key that set them: tensor parallelism that does not share the attention heads, a precision its
GPU lacks (in a pool too), an MTP module of a local-attention model; and the speculative heads
of local-attention models run rather than fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import cbsim
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from tests.conftest import small_scenario


def _written(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _refusal(tmp_path: Path, data: dict[str, Any]) -> CbsimError:
    path = _written(tmp_path, data)
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(path)
    assert info.value.source == path, str(info.value)
    return info.value


def _pooled(kind: str, pool: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    """A cluster whose second pool (a mixed fleet's, or the decode pool) is ``pool``."""
    data = small_scenario({f"cluster.{k}": v for k, v in cluster.items()})
    del data["cluster"]["replicas"]
    if kind == "pools":
        data["cluster"]["pools"] = [{"replicas": 1}, pool]
    else:
        data["cluster"]["disaggregation"] = {"prefill": {}, "decode": pool}
    return data


SECOND_POOL = {"pools": "cluster.pools[1]", "disaggregation": "cluster.disaggregation.decode"}


@pytest.mark.parametrize(
    ("model", "tp", "fits"),
    [
        ("llama-3-8b", 64, False),  # 32 heads
        ("qwen2.5-7b", 8, False),  # 28 heads
        ("llama-3-8b", 16, True),  # 8 KV heads, each on two GPUs
        ("llama-3-70b", 8, True),
        ("deepseek-v3", 64, True),  # latent attention: one KV, replicated
    ],
)
def test_tp_must_share_the_attention_heads(model: str, tp: int, fits: bool) -> None:
    assert get_model(model).splits_attention(tp) is fits


def test_tp_beyond_the_heads_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    err = _refusal(tmp_path, small_scenario(cluster__tp=64))
    assert err.field == "cluster.tp"
    assert "32 attention heads" in err.message and "32" in err.message.rsplit("use tp", 1)[1]


@pytest.mark.parametrize("kind", ["pools", "disaggregation"])
def test_a_pools_tp_is_checked_where_it_is_set(tmp_path: Path, kind: str) -> None:
    err = _refusal(tmp_path, _pooled(kind, {"tp": 64}))
    assert err.field == f"{SECOND_POOL[kind]}.tp"
    inherited = _refusal(tmp_path, _pooled(kind, {"gpu": "h200"}, model="qwen2.5-7b", tp=8))
    assert inherited.field == "cluster.tp"


@pytest.mark.parametrize("kind", ["pools", "disaggregation"])
def test_fp4_on_a_pools_gpu_without_fp4_names_the_pools_key(tmp_path: Path, kind: str) -> None:
    # the pool's GPU under the cluster's precision: its gpu key
    err = _refusal(tmp_path, _pooled(kind, {"gpu": "h200"}, gpu="b200", dtype="fp4"))
    assert err.field == f"{SECOND_POOL[kind]}.gpu"
    assert "h200 has no FP4" in err.message
    # the pool's own precision: its dtype key
    err = _refusal(tmp_path, _pooled(kind, {"dtype": "fp4"}, gpu="h200"))
    assert err.field == f"{SECOND_POOL[kind]}.dtype"


def test_fp4_is_checked_on_the_pools_gpus_not_the_clusters_unused_one() -> None:
    data = _pooled("pools", {"gpu": "b200"}, dtype="fp4")  # the cluster's gpu: h100-sxm
    data["cluster"]["pools"][0]["gpu"] = "b200"
    assert cbsim.load_scenario(data).cluster.pooled


def test_an_mtp_module_of_a_local_attention_model_is_refused_at_validation(
    tmp_path: Path,
) -> None:
    data = small_scenario(cluster__model="gpt-oss-120b", cluster__tp=4)
    data["speculative"] = {"enabled": True, "proposer": {"kind": "mtp"}}
    err = _refusal(tmp_path, data)
    assert err.field == "speculative.proposer.kind"
    assert "local- and full-attention" in err.message


def test_an_eagle_head_of_a_local_attention_model_runs() -> None:
    """Its head is a full-attention layer (it failed: 36 local-attention layers of 1)."""
    data = small_scenario(cluster__model="llama-4-scout", cluster__tp=8, workload__num_requests=4)
    data["speculative"] = {"enabled": True, "proposer": {"kind": "eagle"}}
    result = cbsim.simulate(data)
    assert (result.requests["status"] == "finished").all()
    assert result.requests["spec_steps"].sum() > 0


def test_cbsim_cost_refuses_a_tp_that_cannot_share_the_heads() -> None:
    from click.testing import CliRunner

    from cbsim.cli.commands import cli

    args = ["cost", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--decode", "2", "--context"]
    refused = CliRunner().invoke(cli, [*args, "100", "--tp", "8"])
    assert refused.exit_code == 2
    assert "--tp" in refused.stderr and "28 attention heads" in refused.stderr
    assert CliRunner().invoke(cli, [*args, "100", "--tp", "4", "--json"]).exit_code == 0
