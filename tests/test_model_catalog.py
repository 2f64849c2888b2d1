"""The model catalog by Hugging Face id: every entry's parameter count against the total its
card states, every id found (without case, without its organisation where unambiguous, FP8
checkpoints with their format, instruct checkpoints with their own context), the weights per
GPU against what vLLM printed when it loaded these checkpoints, and the id kept through a
scenario, a plan's launch command and ``cbsim catalog MODEL``."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from cbsim.catalog.model_catalog import CATALOG, MODEL_NAMES, CatalogModel
from cbsim.catalog.model_details import GIB, rope_cache_bytes, weight_bytes_per_gpu
from cbsim.catalog.models import checkpoint_dtype, find_model, get_model, hf_repository
from cbsim.cli.commands import cli
from cbsim.run.loading import load_scenario
from cbsim.studies.plan.launch import HF_REPOSITORIES, model_reference
from tests.conftest import small_scenario

_UNITS = {"T": 1e12, "B": 1e9, "M": 1e6}


def stated(card: str) -> tuple[float, float]:
    """A card's figure and half a unit of its last digit (``"1.7B"``: 1.7e9 and 0.05e9)."""
    text = card.replace(",", "")
    scale = _UNITS.get(text[-1], 1.0)
    digits = text.rstrip("TBM")
    decimals = len(digits.partition(".")[2])
    return float(digits) * scale, 0.5 * 10.0**-decimals * scale


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: e.name)
def test_parameter_count_matches_the_card(entry: CatalogModel) -> None:
    """Within 1% of the stated total, or within the rounding of a figure stated to fewer
    digits than that (Qwen3-1.7B's card says "1.7B": 1.72B is 1.2% above it)."""
    figure, rounding = stated(entry.card)
    count = entry.shape.param_count()
    assert abs(count - figure) <= max(0.01 * figure, rounding), (entry.name, count, entry.card)


def test_only_cards_stated_to_two_digits_need_their_rounding() -> None:
    loose = {e.name for e in CATALOG if abs(e.shape.param_count() / stated(e.card)[0] - 1) > 0.01}
    assert loose == {"qwen3-1.7b"}


def test_names_and_ids_are_unique_and_find_their_entry() -> None:
    seen: dict[str, str] = {}
    for entry in CATALOG:
        for key in (entry.name, *entry.aliases, *entry.repos, *entry.fp8_repos):
            assert seen.setdefault(key.casefold(), entry.name) == entry.name, key
            found = find_model(key.upper())
            assert found is not None and found.entry is entry, key
        assert entry.card and entry.card_source, entry.name
        assert entry.launch_repo is not None, entry.name
        assert set(entry.contexts) <= {*entry.repos, *entry.fp8_repos}, entry.name
    assert len(MODEL_NAMES) == len(CATALOG) >= 80


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("Qwen/Qwen3-14B", "qwen3-14b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek-r1-distill-qwen-7b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("LLAMA-3.1-70B", "llama-3.1-70b"),
        ("Llama-3.1-70B-Instruct", "llama-3.1-70b"),  # an id without its organisation
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b"),
        ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b"),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-3.1-24b"),
    ],
)
def test_hugging_face_ids_find_their_model(typed: str, name: str) -> None:
    assert get_model(typed).name == name


def test_fp8_ids_tell_their_weight_format() -> None:
    assert checkpoint_dtype("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic") == "fp8"
    assert checkpoint_dtype("Qwen/Qwen3-30B-A3B-FP8") == "fp8"
    assert checkpoint_dtype("meta-llama/Llama-3.1-8B-Instruct") == "bf16"
    assert checkpoint_dtype("deepseek-ai/DeepSeek-R1") == "fp8"
    assert checkpoint_dtype("openai/gpt-oss-20b") == "mxfp4"
    assert checkpoint_dtype("no/such-model") is None


def test_a_checkpoint_keeps_its_own_context() -> None:
    assert get_model("Qwen/Qwen2.5-7B").max_position_embeddings == 131072
    assert get_model("Qwen/Qwen2.5-7B-Instruct").max_position_embeddings == 32768
    assert get_model("qwen2.5-7b").max_position_embeddings == 131072  # the name as it was
    instruct = get_model("Qwen/Qwen3-30B-A3B-Instruct-2507")
    assert instruct.max_position_embeddings == 262144
    assert instruct.param_count() == get_model("qwen3-30b-a3b").param_count()


def test_launch_repositories_come_from_the_catalog() -> None:
    assert {e.name: e.launch_repo for e in CATALOG} == HF_REPOSITORIES
    assert HF_REPOSITORIES["llama-3-70b"] == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert model_reference("llama-4-scout") == "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    assert model_reference("meta-llama/llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    assert hf_repository("qwen3-8b") == "Qwen/Qwen3-8B"


def test_a_scenario_keeps_the_id_it_was_given() -> None:
    scenario = load_scenario(small_scenario({"cluster.model": "qwen/qwen2.5-7b-instruct"}))
    assert scenario.cluster.model == "Qwen/Qwen2.5-7B-Instruct"
    assert load_scenario(small_scenario({"cluster.model": "LLAMA-3-8B"})).cluster.model == (
        "llama-3-8b"
    )


# vLLM's "Model loading took X GiB" on these checkpoints (the brief's published cases), and
# gpt-oss-20b on an A100 under vLLM 0.19 (myoceane.fr's A100 deployment notes).
VLLM_LOADS = [
    ("meta-llama/Llama-3.1-8B-Instruct", 1, "bf16", 14.99),
    ("Qwen/Qwen3-8B", 1, "bf16", 15.27),
    ("Qwen/Qwen3-14B", 1, "bf16", 27.52),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1, "bf16", 3.35),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", 2, "bf16", 13.99),
    ("Qwen/Qwen2.5-Coder-7B-Instruct", 2, "bf16", 7.12),
    ("meta-llama/Llama-3.2-1B-Instruct", 1, "bf16", 2.32),
    ("meta-llama/Llama-2-7b-hf", 1, "bf16", 12.55),
    ("LGAI-EXAONE/EXAONE-4.0-32B-FP8", 1, "fp8", 30.99),
    # quantized checkpoints (kv_startup_logs.csv): Qwen3-14B-AWQ on L40S under vLLM 0.28 (v1-25,
    # 'weights fell 27.52 -> 9.44 GiB'), Phi-4 AutoRound GPTQ 4-bit under V0 (v0-04), Qwen3-0.6B
    # AutoRound W4A16 under 0.19.1 (v1-38), RedHat's Qwen2.5-7B W8A8 under 0.19 (v0-38)
    ("Qwen/Qwen3-14B-AWQ", 1, "int4", 9.44),
    ("kaitchup/Phi-4-AutoRound-GPTQ-4bit", 1, "int4", 8.51),
    ("lvkaokao/Qwen3-0.6B-autoround-W4A16", 1, "int4", 0.52),
    ("RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8", 1, "int8", 8.14),
]


@pytest.mark.parametrize(("repo", "tp", "dtype", "gib"), VLLM_LOADS)
def test_weights_per_gpu_match_what_vllm_loaded(repo: str, tp: int, dtype: str, gib: float) -> None:
    match = find_model(repo)
    assert match is not None and match.checkpoint_dtype == dtype
    loaded = weight_bytes_per_gpu(match.shape, dtype, tp) + rope_cache_bytes(match.shape)
    assert loaded / GIB == pytest.approx(gib, rel=0.02)


def test_fewer_kv_heads_than_gpus_keep_whole_kv_projections() -> None:
    model = get_model("qwen2.5-1.5b")  # 2 KV heads
    two, four = (weight_bytes_per_gpu(model, "bf16", tp) for tp in (2, 4))
    kv_per_head = 2 * model.num_layers * (model.hidden_size + 1) * model.head_dim * 2
    assert four - two / 2 == pytest.approx(kv_per_head / 2)


def test_catalog_shows_a_model_by_id() -> None:
    result = CliRunner().invoke(
        cli, ["catalog", "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8", "--tp", "4"]
    )
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("llama-3.1-70b (RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8)")
    assert "parameters: 70.55B" in text and "checkpoint format: fp8" in text
    bf16, fp8 = (float(g) for g in re.findall(r"(?:bf16|fp8)\s+([\d.,]+) GiB", text)[:2])
    assert bf16 == pytest.approx(70.55e9 * 2 / 4 / GIB, rel=0.01) and fp8 < bf16 * 0.55
    both = CliRunner().invoke(cli, ["catalog", "gpus", "gemma-3-4b"])
    assert both.exit_code == 0 and "h100-sxm" in both.stdout and "vision encoder" in both.stdout


def test_catalog_refuses_an_unknown_model_with_suggestions() -> None:
    result = CliRunner().invoke(cli, ["catalog", "qwen3-8", "--tp", "2"])
    assert result.exit_code == 2
    assert "unknown model 'qwen3-8'" in result.stderr and "did you mean" in result.stderr


PHI_2_CONFIG = {
    "architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560,
    "intermediate_size": 10240, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "vocab_size": 51200, "max_position_embeddings": 2048,
    "tie_word_embeddings": False, "partial_rotary_factor": 0.4, "hidden_act": "gelu_new",
}  # fmt: skip
"""huggingface.co/microsoft/phi-2/blob/main/config.json (the keys read)."""


def test_phi_2_is_read_from_its_config_as_the_catalog_has_it() -> None:
    """PhiForCausalLM: biased q/k/v and dense, a plain fc1/fc2 MLP, LayerNorms, biased LM head
    (2.78B on the Hub); a start-up log of it (vLLM 0.19 on an H100) was not expressible."""
    from cbsim.catalog.hf_config import model_from_hf_config

    shape = model_from_hf_config(PHI_2_CONFIG, "phi-2")
    catalog = get_model("microsoft/phi-2")
    assert shape.param_count() == catalog.param_count()
    assert not shape.gated_mlp and shape.qkv_bias and shape.o_bias and shape.lm_head_bias
    assert abs(shape.param_count() / 2.78e9 - 1) < 0.002
