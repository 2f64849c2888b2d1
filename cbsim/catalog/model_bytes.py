"""The bytes a model takes on a GPU: its weights as its checkpoint stores them and each token's keys
and values.

Every storage precision has its bytes per element (block scales included: NVFP4, MXFP4, AWQ/GPTQ
int4); a checkpoint keeps some tensors in 16 bits whatever its format (the embedding and LM head of
FP8/NVFP4 checkpoints, all but the routed experts of an expert-only format, all but the decoder's
linear projections of an integer one). Tensor parallelism splits weights and KV heads across the
GPUs of a replica (KV heads replicated when there are fewer than TP ranks; MLA's latent kept
whole by every rank); pipeline parallelism gives each GPU its stage's layers. The paged KV cache
(:mod:`cbsim.memory.kvcache`) and the engines' memory plans (:mod:`cbsim.cost.engine_memory`) size
themselves from these figures; the cost model prices the bytes read.
"""

from __future__ import annotations

from cbsim.catalog.models import ModelShape
from cbsim.catalog.quantization import INT4_BYTES, INT8_BYTES, INTEGER_FORMATS

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    # NVFP4: 4-bit e2m1 values plus one fp8 (e4m3) scale per block of 16 (the per-tensor fp32
    # global scale is negligible): 0.5 + 1/16 bytes per element
    "fp4": 0.5 + 1.0 / 16.0,
    # MXFP4 (gpt-oss's expert weights): 4-bit e2m1 values plus one e8m0 scale per block of 32
    "mxfp4": 0.5 + 1.0 / 32.0,
    # integer checkpoints (:mod:`cbsim.catalog.quantization`): AWQ/GPTQ/w4a16 4-bit weights with a
    # 16-bit scale and a 4-bit zero point per 128; W8A8 8-bit weights
    "int4": INT4_BYTES,
    "int8": INT8_BYTES,
}
"""Bytes per element of each storage precision, block scales included."""

EXPERT_ONLY_DTYPES: frozenset[str] = frozenset({"mxfp4"})
"""Weight formats only a mixture of experts' routed experts are stored in (the rest in bf16)."""


def dense_weight_dtype(dtype: str) -> str:
    """The precision of the weights other than routed experts: bf16 under an expert-only format,
    else ``dtype`` itself."""
    return "bf16" if dtype in EXPERT_ONLY_DTYPES else dtype


def split_weight_bytes(expert_params: int, other_params: int, dtype: str) -> float:
    """Bytes of ``expert_params`` routed-expert and ``other_params`` other weights in ``dtype``."""
    return (
        expert_params * DTYPE_BYTES[dtype] + other_params * DTYPE_BYTES[dense_weight_dtype(dtype)]
    )


QUANTISED_BODY_DTYPES: frozenset[str] = frozenset({"fp8", "fp4"})
"""Weight formats whose checkpoints quantise the decoder layers but keep the token embedding and
the LM head in bf16 (FP8 and NVFP4 checkpoints as they ship, and vLLM's ``--quantization fp8``:
its embedding layers have no quantised method)."""


def end_param_count(model: ModelShape) -> int:
    """Parameters of the token embedding and the LM head (one matrix when tied)."""
    return model.embedding_param_count() * (1 if model.tie_word_embeddings else 2)


def model_weight_bytes(model: ModelShape, dtype: str) -> float:
    """Bytes of all of ``model``'s weights as its checkpoint stores them in ``dtype``: an
    expert-only format keeps everything but the routed experts in bf16; FP8 and NVFP4 keep the
    embedding and the LM head in bf16; an integer format (int4, int8) quantises the decoder
    layers' linear projections only, the rest in bf16 (:mod:`cbsim.catalog.quantization`)."""
    if dtype in INTEGER_FORMATS:
        linear = model.linear_param_count()
        rest = model.param_count() - linear
        return linear * DTYPE_BYTES[dtype] + rest * DTYPE_BYTES["bf16"]
    if dtype in EXPERT_ONLY_DTYPES:
        experts = model.num_moe_layers * model.num_experts * model.expert_param_count()
        return split_weight_bytes(experts, model.param_count() - experts, dtype)
    if dtype in QUANTISED_BODY_DTYPES:
        ends = end_param_count(model)
        return (model.param_count() - ends) * DTYPE_BYTES[dtype] + ends * DTYPE_BYTES["bf16"]
    return model.weight_bytes(DTYPE_BYTES[dtype])


def kv_heads_per_shard(model: ModelShape, tp: int) -> int:
    """KV heads stored per GPU: split across TP ranks, replicated when there are fewer than tp."""
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token_per_gpu(model: ModelShape, tp: int, kv_dtype: str, pp: int = 1) -> float:
    """Bytes one token's keys and values take on one GPU of a tensor-parallel group (MLA's
    latent is every head's, so each GPU keeps all of it), of the largest stage's layers with
    ``pp`` pipeline stages."""
    if model.is_mla:
        full = model.kv_bytes_per_token(DTYPE_BYTES[kv_dtype])
        return full if pp == 1 else full * stage_layers(model, pp) / model.num_layers
    per_head = 2 * model.head_dim * DTYPE_BYTES[kv_dtype]
    layers = model.num_layers if pp == 1 else stage_layers(model, pp)
    return layers * kv_heads_per_shard(model, tp) * per_head


def stage_layers(model: ModelShape, pp: int) -> int:
    """Layers of the largest of ``pp`` pipeline stages (layers split as evenly as they go)."""
    return -(-model.num_layers // pp)


def final_norm_dtype(dtype: str) -> str:
    """The precision of the final norm in a checkpoint of ``dtype`` (16 bits in an integer one,
    the body's otherwise)."""
    return "bf16" if dtype in INTEGER_FORMATS else dense_weight_dtype(dtype)


def end_dtype(dtype: str) -> str:
    """The precision of the embedding and the LM head in a checkpoint of ``dtype``."""
    return (
        "bf16" if dtype in EXPERT_ONLY_DTYPES | QUANTISED_BODY_DTYPES | INTEGER_FORMATS else dtype
    )


def weight_bytes_per_gpu(model: ModelShape, dtype: str, tp: int, dp: int = 1, pp: int = 1) -> float:
    """Bytes of weights each GPU of a replica holds: a 1/tp slice of everything, or, with ``dp``
    attention data-parallel ranks (a mixture of experts), each rank's 1/tp slice of all but the
    routed experts and a 1/(tp x dp) share of those (spread over every GPU of the replica); with
    ``pp`` pipeline stages, the largest stage's layers and the larger of the embedding (first
    stage) and the LM head (last stage)."""
    if pp > 1:
        ends_bytes = DTYPE_BYTES[end_dtype(dtype)]
        embedding = model.embedding_param_count() * ends_bytes
        norm = model.hidden_size * DTYPE_BYTES[final_norm_dtype(dtype)]
        layers = model_weight_bytes(model, dtype) - end_param_count(model) * ends_bytes - norm
        return (layers * stage_layers(model, pp) / model.num_layers + embedding) / tp
    if dp == 1:
        return model_weight_bytes(model, dtype) / tp
    experts = model.num_moe_layers * model.num_experts * model.expert_param_count()
    expert_bytes = split_weight_bytes(experts, 0, dtype)
    return expert_bytes / (tp * dp) + (model_weight_bytes(model, dtype) - expert_bytes) / tp
