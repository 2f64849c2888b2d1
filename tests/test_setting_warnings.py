"""Settings that change nothing in a run get a warning naming them, before the run (``cbsim
validate``) and in its summary (:mod:`cbsim.schema.setting_warnings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import cbsim
from cbsim.catalog.models import get_model, model_from_hf_config
from cbsim.cli.commands import cli
from cbsim.run.preflight import preflight
from tests.conftest import small_scenario


def _warnings(data: dict[str, Any]) -> tuple[list[str], str]:
    """(what validate warns, the run summary's warnings)."""
    scenario = cbsim.load_scenario(data)
    return preflight(scenario).warnings, cbsim.simulate(scenario).summary["warnings"]


def _disaggregated(decode: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    data = small_scenario(workload__num_requests=4)
    del data["cluster"]["replicas"]
    data["cluster"].update(cluster)
    data["cluster"]["disaggregation"] = {"prefill": {}, "decode": decode}
    return data


def _trace(path: Path, ids: bool) -> str:
    frame = pd.DataFrame(
        {"arrival_s": np.arange(4) * 0.5, "prompt_tokens": 300, "output_tokens": 4}
    )
    if ids:
        frame["hash_ids"] = ["[1, 2]", "[1, 3]", "[1, 2]", "[4]"]
    frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize(
    ("decode", "key"),
    [
        ({"prefix_caching": True}, "decode.prefix_caching"),
        ({"kv_offload": {"cpu_gib": 8, "bandwidth_gib_s": 20}}, "decode.kv_offload"),
    ],
)
def test_prefix_caching_on_a_decode_pool_is_warned(decode: dict[str, Any], key: str) -> None:
    before, summary = _warnings(_disaggregated(decode))
    assert any(f"cluster.disaggregation.{key} is ignored" in w for w in before), before
    assert f"cluster.disaggregation.{key} is ignored" in summary


def test_prefix_caching_for_the_whole_cluster_is_not_warned() -> None:
    before, summary = _warnings(_disaggregated({"prefix_caching": True}, prefix_caching=True))
    assert not any("decode" in w for w in before) and "decode" not in summary


def test_prefix_block_tokens_on_a_trace_without_ids_is_warned(tmp_path: Path) -> None:
    data = small_scenario()
    data["workload"] = {
        "trace": {"path": _trace(tmp_path / "plain.csv", ids=False), "prefix_block_tokens": 64}
    }
    before, summary = _warnings(data)
    assert any("workload.trace.prefix_block_tokens (64) is ignored" in w for w in before)
    assert "prefix_block_tokens" in summary
    data["workload"]["trace"]["path"] = _trace(tmp_path / "ids.csv", ids=True)
    before, summary = _warnings(data)
    assert not any("prefix_block_tokens" in w for w in before) and not summary


def test_mtp_on_a_model_without_an_mtp_module_is_warned(tmp_path: Path) -> None:
    data = small_scenario(workload__num_requests=4)
    data["speculative"] = {"enabled": True, "proposer": {"kind": "mtp"}}
    before, summary = _warnings(data)
    assert any("speculative.proposer.kind: mtp" in w for w in before)
    assert "ships no multi-token-prediction module" in summary
    path = tmp_path / "mtp.yaml"
    path.write_text(yaml.safe_dump(data))
    checked = CliRunner().invoke(cli, ["validate", str(path)])
    assert checked.exit_code == 0
    assert "warning: speculative.proposer.kind: mtp" in checked.stderr


def test_deepseek_v3_ships_its_mtp_module() -> None:
    assert get_model("deepseek-v3").mtp_layers == 1
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 100,
        "num_nextn_predict_layers": 1,
    }
    assert model_from_hf_config(config, "tiny").mtp_layers == 1
