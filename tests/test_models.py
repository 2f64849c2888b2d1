from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from cbsim.catalog.models import MODEL_NAMES, ModelShape, get_model, model_from_hf_config
from cbsim.common.errors import CbsimError

CATALOG = (
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.2-1b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-32b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gpt-oss-120b",
    "llama-4-scout",
)

# Published parameter counts (model cards / safetensors metadata).
PUBLISHED_PARAMS = {
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 6.9e10,
    "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.6e9,
    "llama-3.2-1b": 1.24e9,
    "mistral-7b": 7.24e9,
    "qwen2.5-7b": 7.6e9,
    "qwen2.5-72b": 72.7e9,
    "qwen3-32b": 32.8e9,
}

LLAMA_3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}


def test_catalog_names_of_the_contract_stay() -> None:
    """The names the contract lists (and the goldens use) stay; the catalog may grow."""
    assert set(CATALOG) <= set(MODEL_NAMES)


@pytest.mark.parametrize("name", CATALOG)
def test_every_model_loads(name: str) -> None:
    model = get_model(name)
    assert model.name == name
    assert model.num_heads % model.num_kv_heads == 0
    assert model.param_count() > 1e9


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED_PARAMS.items()))
def test_param_count_matches_published(name: str, published: float) -> None:
    assert get_model(name).param_count() == pytest.approx(published, rel=0.01)


def test_same_shape_different_context() -> None:
    assert get_model("llama-3-8b").param_count() == get_model("llama-3.1-8b").param_count()
    assert get_model("llama-3-8b").max_position_embeddings == 8192
    assert get_model("llama-3.1-8b").max_position_embeddings == 131072


def test_kv_bytes_per_token() -> None:
    assert get_model("llama-3-8b").kv_bytes_per_token(2) == 131072
    assert get_model("llama-2-7b").kv_bytes_per_token(2) == 524288
    assert get_model("llama-3-8b").kv_bytes_per_token(1) == 65536


def test_weight_bytes() -> None:
    model = get_model("llama-3-8b")
    assert model.weight_bytes(2) == 2 * model.param_count()
    assert model.weight_bytes(1) == pytest.approx(8.03e9, rel=0.01)


def test_tied_embeddings_and_qkv_bias_change_param_count() -> None:
    tied = get_model("llama-3.2-1b")
    assert tied.tie_word_embeddings
    untied = dataclasses.replace(tied, tie_word_embeddings=False)
    assert untied.param_count() - tied.param_count() == tied.embedding_param_count()
    qwen = get_model("qwen2.5-7b")
    assert qwen.qkv_bias
    no_bias = dataclasses.replace(qwen, qkv_bias=False)
    assert qwen.param_count() - no_bias.param_count() == 28 * (3584 + 2 * 512)


def _fields(model: ModelShape) -> dict[str, object]:
    return {name: getattr(model, name) for name in ModelShape.__dataclass_fields__}


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(CbsimError) as info:
        get_model("gpt-5")
    message = str(info.value)
    assert "'gpt-5'" in message
    for name in CATALOG:
        assert name in message


def test_config_json_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_3_8B_CONFIG))
    from_file = get_model(str(path))
    from_dir = get_model(str(tmp_path))
    expected = get_model("llama-3-8b")
    for model in (from_file, from_dir):
        assert model.name == tmp_path.name
        assert _fields(model) | {"name": ""} == _fields(expected) | {"name": ""}


def test_config_defaults_and_qwen_bias() -> None:
    config = {k: v for k, v in LLAMA_3_8B_CONFIG.items() if k != "num_key_value_heads"}
    model = model_from_hf_config(config, "mha")
    assert model.num_kv_heads == model.num_heads == 32
    assert model.head_dim == 128
    qwen = model_from_hf_config({**LLAMA_3_8B_CONFIG, "model_type": "qwen2"}, "q")
    assert qwen.qkv_bias


def test_config_missing_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    config = {k: v for k, v in LLAMA_3_8B_CONFIG.items() if k != "hidden_size"}
    path.write_text(json.dumps(config))
    with pytest.raises(CbsimError) as info:
        get_model(str(path))
    assert str(path) in str(info.value)
    assert "hidden_size" in str(info.value)


def test_config_invalid_json_names_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(CbsimError, match="invalid JSON") as info:
        get_model(str(path))
    assert str(path) in str(info.value)


def test_config_missing_file_names_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(CbsimError) as info:
        get_model(str(path))
    assert str(path) in str(info.value)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(CbsimError, match=r"config\.json"):
        get_model(str(empty_dir))


def test_config_bad_value_names_key() -> None:
    with pytest.raises(CbsimError, match="num_hidden_layers"):
        model_from_hf_config({**LLAMA_3_8B_CONFIG, "num_hidden_layers": "32"}, "x")
    with pytest.raises(CbsimError, match="num_kv_heads"):
        model_from_hf_config({**LLAMA_3_8B_CONFIG, "num_key_value_heads": 5}, "x")


def test_qwen3_config_reads_its_per_head_qk_norm() -> None:
    config = {
        "model_type": "qwen3",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_attention_heads": 64,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    }
    shape = model_from_hf_config(config, "qwen3")
    assert shape.qk_norm and not shape.qkv_bias
    assert shape.param_count() == get_model("qwen3-32b").param_count()
    plain = model_from_hf_config({**config, "model_type": "llama"}, "plain")
    assert shape.param_count() - plain.param_count() == 64 * 2 * 128


# --------------------------------------------------------------------------- refused configs


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe"}, "architectures"),
        ({"architectures": ["DbrxForCausalLM"]}, "architectures"),
        ({"model_type": "granitemoe", "architectures": None}, "model_type"),
        ({"model_type": "olmoe", "architectures": None}, "model_type"),
    ],
)
def test_other_mixture_of_experts_architectures_are_refused_as_such(
    changes: dict[str, Any], key: str
) -> None:
    config = {k: v for k, v in {**LLAMA_3_8B_CONFIG, **changes}.items() if v is not None}
    with pytest.raises(
        CbsimError, match="mixture-of-experts architecture is not supported"
    ) as info:
        model_from_hf_config(config, "moe")
    assert info.value.field == key


@pytest.mark.parametrize("key", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_experts_in_a_dense_config_are_refused(key: str) -> None:
    with pytest.raises(CbsimError, match="experts in a dense architecture") as info:
        model_from_hf_config({**LLAMA_3_8B_CONFIG, key: 8}, "moe")
    assert info.value.field == key


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "architectures"),
        ({"architectures": "LlamaForCausalLM"}, "architectures"),
        ({"model_type": "falcon"}, "model_type"),
        ({"num_hidden_layers": 10**30}, "num_hidden_layers"),
        ({"vocab_size": 2**40}, "vocab_size"),
        ({"max_position_embeddings": 10**12}, "max_position_embeddings"),
    ],
)
def test_unknown_architectures_and_absurd_dimensions_are_refused(
    changes: dict[str, Any], key: str
) -> None:
    with pytest.raises(CbsimError) as info:
        model_from_hf_config({**LLAMA_3_8B_CONFIG, **changes}, "x")
    assert info.value.field == key


def test_a_config_without_architecture_reads_as_the_llama_family() -> None:
    config = {
        k: v for k, v in LLAMA_3_8B_CONFIG.items() if k not in ("architectures", "model_type")
    }
    assert model_from_hf_config(config, "plain").num_layers == 32


def test_a_scenario_names_the_key_inside_the_config(tmp_path: Path) -> None:
    from cbsim.run.loading import load_scenario
    from tests.conftest import small_scenario

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "num_attention_heads": -4}))
    with pytest.raises(CbsimError) as info:
        load_scenario(small_scenario({"cluster.model": str(path)}))
    assert info.value.field == "cluster.model"
    assert f"{path}: num_attention_heads: must be a positive integer" in info.value.message


def test_catalog_names_compare_without_case_and_suggest_close_ones() -> None:
    assert get_model("Llama-3-8B") is get_model("llama-3-8b")
    with pytest.raises(CbsimError, match="did you mean 'llama-3-8b'"):
        get_model("llama3-8b")
