"""Model shapes: the transformer dimensions that decide what an LLM costs to serve.

The cost of a serving iteration depends on a model only through its shape: how many decoder
layers, how wide the hidden state and the MLP are, how many query and key/value heads attention
has (grouped-query attention shares each KV head among several query heads, shrinking the KV
cache), how large the vocabulary is (the LM head runs for every generated token) and whether the
output projection shares the input embedding's weights. From those follow the parameter count
(weights to read from memory each iteration), the KV-cache bytes per token (what bounds how many
requests fit) and the FLOPs per token.

A :class:`ModelShape` covers the Llama family of decoder-only transformers (pre-norm RMSNorm,
rotary positions, gated SwiGLU MLP, no linear biases), which also describes Mistral and Qwen2
(Qwen2 adds biases on the q/k/v projections), and the mixture-of-experts and latent-attention
models built on it:

* **Mixture of experts** (Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss, Llama 4): in an MoE layer
  the MLP is ``num_experts`` routed experts of width ``expert_intermediate_size``, a router
  choosing ``experts_per_token`` of them for each token, and optionally shared experts every
  token goes through; the other layers (DeepSeek's first three, every other one in Llama 4
  Maverick) keep a dense MLP of ``intermediate_size``. All experts' weights sit in memory; a
  token reads only its own experts' (:meth:`ModelShape.active_param_count`).
* **Multi-head latent attention** (DeepSeek-V2/V3, Kimi K2): queries through a low-rank
  ``q_lora_rank`` bottleneck, keys and values decompressed per head from one
  ``kv_lora_rank`` latent per token, which (with a ``qk_rope_head_dim`` rotary key shared by
  all heads) is all the KV cache holds.
* **Local attention** (gpt-oss, Llama 4): ``sliding_window_layers`` layers attend to the last
  ``sliding_window`` tokens only; gpt-oss adds per-head attention-sink logits and biases on
  every attention projection.

The catalog holds the exact values of the Hugging Face ``config.json`` of each checkpoint;
:func:`get_model` also accepts a path to any such ``config.json`` (or to the directory holding
it) of an architecture listed in :data:`ARCHITECTURES`. Anything else is refused, never read as
something it is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cbsim.documents import parse_json, read_text_file
from cbsim.errors import CbsimError, canonical_name, unknown_name
from cbsim.limits import (
    MODEL_EXPERTS,
    MODEL_HEADS,
    MODEL_LAYERS,
    MODEL_WIDTH,
    TOKENS,
    VOCABULARY,
    Limit,
)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Dimensions of a decoder-only transformer (Hugging Face ``config.json`` field names noted).

    Attributes:
        name: catalog name, or where the config came from.
        num_layers: decoder layers (``num_hidden_layers``).
        hidden_size: residual-stream width (``hidden_size``).
        num_heads: query heads (``num_attention_heads``).
        num_kv_heads: key/value heads (``num_key_value_heads``); fewer than ``num_heads`` is GQA.
        head_dim: width of one attention head (``head_dim``, default ``hidden_size // num_heads``).
        intermediate_size: MLP inner width (``intermediate_size``).
        vocab_size: vocabulary size, rows of the embedding and the LM head (``vocab_size``).
        tie_word_embeddings: the LM head reuses the embedding matrix (no separate weights).
        gated_mlp: SwiGLU MLP with gate, up and down projections (Llama, Mistral, Qwen); False
            is a plain two-matrix MLP.
        max_position_embeddings: longest context the model supports, prompt plus output.
        qkv_bias: the q, k and v projections carry a bias (Qwen2/2.5).
        qk_norm: an RMSNorm over each query and key head before rotary embedding (Qwen3), with
            ``head_dim`` weights each for q and k per layer.
        num_experts: routed experts of an MoE layer (``num_local_experts``, ``num_experts``,
            ``n_routed_experts``); 0 for a dense model.
        experts_per_token: experts the router picks per token (``num_experts_per_tok``).
        expert_intermediate_size: one expert's inner width (``moe_intermediate_size``, or
            ``intermediate_size`` where the config has no other).
        shared_expert_intermediate_size: inner width of the shared expert(s) every token also
            goes through (DeepSeek: ``n_shared_experts`` x ``moe_intermediate_size``; Llama 4:
            one of ``intermediate_size``); 0 for none.
        dense_layers: leading layers that keep a dense MLP (``first_k_dense_replace``).
        moe_layer_step: after those, every ``moe_layer_step``-th layer is an MoE layer and the
            others are dense (``interleave_moe_layer_step``, ``decoder_sparse_step``).
        expert_bias: the experts' projections carry biases (gpt-oss).
        router_bias: the router has a bias (gpt-oss) or a per-expert score correction
            (DeepSeek-V3's ``e_score_correction_bias``).
        q_lora_rank: MLA query bottleneck width (0: queries projected directly).
        kv_lora_rank: MLA latent width, the compressed KV one token keeps per layer (0: no MLA).
        qk_rope_head_dim: MLA rotary key width (one per token, shared by every head).
        qk_nope_head_dim: MLA per-head query/key width without rotary embedding.
        v_head_dim: MLA per-head value width.
        sliding_window: tokens a local-attention layer attends to (0: none).
        sliding_window_layers: how many layers use local attention.
        attention_sinks: a learned sink logit per head and layer (gpt-oss).
        o_bias: the attention output projection carries a bias (gpt-oss).
        mtp_layers: the multi-token-prediction layers it ships (``num_nextn_predict_layers``,
            DeepSeek-V3's 1; 0: none, an ``mtp`` proposer has no module to run).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    gated_mlp: bool = True
    max_position_embeddings: int = 4096
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0
    moe_layer_step: int = 1
    expert_bias: bool = False
    router_bias: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    sliding_window_layers: int = 0
    attention_sinks: bool = False
    o_bias: bool = False
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CbsimError(f"must be a positive integer, got {value!r}", field=field)
        if self.num_heads % self.num_kv_heads:
            raise CbsimError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})",
                field="num_kv_heads",
            )
        for field in (
            "num_experts",
            "experts_per_token",
            "expert_intermediate_size",
            "shared_expert_intermediate_size",
            "dense_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
            "sliding_window",
            "sliding_window_layers",
            "mtp_layers",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CbsimError(f"must be an integer >= 0, got {value!r}", field=field)
        self._check_moe()
        self._check_mla()
        if self.sliding_window_layers > self.num_layers:
            raise CbsimError(
                f"{self.sliding_window_layers} local-attention layers of {self.num_layers}",
                field="sliding_window_layers",
            )
        if bool(self.sliding_window) != bool(self.sliding_window_layers):
            raise CbsimError(
                "a sliding window needs layers that use it, and such layers a window",
                field="sliding_window",
            )

    def _check_moe(self) -> None:
        if not self.num_experts:
            if self.experts_per_token or self.expert_intermediate_size or self.dense_layers:
                raise CbsimError("expert settings without experts", field="num_experts")
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise CbsimError(
                f"must lie in 1..num_experts ({self.num_experts}), got {self.experts_per_token}",
                field="experts_per_token",
            )
        if self.expert_intermediate_size < 1:
            raise CbsimError(
                "an MoE model needs its experts' width", field="expert_intermediate_size"
            )
        if isinstance(self.moe_layer_step, bool) or self.moe_layer_step < 1:
            raise CbsimError(f"must be >= 1, got {self.moe_layer_step!r}", field="moe_layer_step")
        if self.num_moe_layers == 0:
            raise CbsimError("no layer is an MoE layer", field="dense_layers")

    def _check_mla(self) -> None:
        if not self.kv_lora_rank:
            if (
                self.q_lora_rank
                or self.qk_rope_head_dim
                or self.qk_nope_head_dim
                or self.v_head_dim
            ):
                raise CbsimError(
                    "latent-attention settings without kv_lora_rank", field="kv_lora_rank"
                )
            return
        for field in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(self, field) < 1:
                raise CbsimError("multi-head latent attention needs it", field=field)

    def dense(self, name: str, num_layers: int) -> ModelShape:
        """This model's width and attention with ``num_layers`` dense layers (no experts): the
        shape of a speculative head trained for it, as EAGLE's are. Its layers attend to the
        whole context: the heads trained for local-attention models (gpt-oss's and Llama 4's
        EAGLE-3 heads) are full-attention Llama layers."""
        return replace(
            self,
            name=name,
            num_layers=num_layers,
            sliding_window=0,
            sliding_window_layers=0,
            num_experts=0,
            experts_per_token=0,
            expert_intermediate_size=0,
            shared_expert_intermediate_size=0,
            dense_layers=0,
            moe_layer_step=1,
            expert_bias=False,
            router_bias=False,
        )

    def splits_attention(self, tp: int) -> bool:
        """Whether ``tp`` GPUs can share this model's attention as vLLM, SGLang and TensorRT-LLM
        shard it: whole query heads each (``num_heads % tp == 0``), and whole KV heads each or,
        with more GPUs than KV heads, each KV head replicated on ``tp / num_kv_heads`` of them
        (latent attention's one compressed KV is replicated whatever ``tp``)."""
        if self.num_heads % tp:
            return False
        kv = self.num_kv_heads
        return self.is_mla or (kv % tp == 0 if tp <= kv else tp % kv == 0)

    def attention_split_problem(self, tp: int) -> str | None:
        """Why ``tp`` GPUs cannot share this model's attention (None: they can), with the
        tensor-parallel sizes that can (see :meth:`splits_attention`)."""
        if self.splits_attention(tp):
            return None
        fits = [t for t in (2**i for i in range(11)) if t <= self.num_heads]
        fits = [t for t in fits if self.splits_attention(t)]
        kv = "" if self.is_mla else f" and {self.num_kv_heads} KV heads"
        choices = f"{', '.join(map(str, fits[:-1]))}{' or ' if len(fits) > 1 else ''}{fits[-1]}"
        return (
            f"tp {tp} cannot share {self.name}'s {self.num_heads} attention heads{kv} among its "
            "GPUs (vLLM, SGLang and TensorRT-LLM need num_attention_heads divisible by tp, and "
            f"KV heads split evenly or replicated evenly); use tp {choices}"
        )

    @property
    def is_moe(self) -> bool:
        """Some layers are mixtures of experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Attention is multi-head latent attention (a compressed KV cache)."""
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        if not self.num_experts:
            return 0
        return max(0, self.num_layers - self.dense_layers) // self.moe_layer_step

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP of ``intermediate_size``."""
        return self.num_layers - self.num_moe_layers

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (output of the q projection)."""
        if self.is_mla:
            return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or all value) heads together (output of the k or v projection)."""
        return self.num_kv_heads * self.head_dim

    @property
    def attention_out_dim(self) -> int:
        """Width of the attention output the o projection reads (all heads' values)."""
        if self.is_mla:
            return self.num_heads * self.v_head_dim
        return self.q_dim

    def attention_param_count(self) -> int:
        """Parameters of one layer's attention: the q, k, v (or MLA's down/up) and o
        projections with their biases, MLA's latent norms, gpt-oss's sink logits."""
        h = self.hidden_size
        if self.is_mla:
            heads = self.num_heads
            q_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * q_head
            else:
                q = h * heads * q_head
            kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_down + kv_up + self.attention_out_dim * h
        count = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        if self.qkv_bias:
            count += self.q_dim + 2 * self.kv_dim
        if self.o_bias:
            count += h
        if self.attention_sinks:
            count += self.num_heads
        return count

    def mlp_param_count(self) -> int:
        """Parameters of one dense layer's MLP: gate, up, down (gated) or up, down (plain)."""
        matrices = 3 if self.gated_mlp else 2
        return matrices * self.hidden_size * self.intermediate_size

    def expert_param_count(self) -> int:
        """Parameters of one routed expert (gated MLP of ``expert_intermediate_size``)."""
        h, inner = self.hidden_size, self.expert_intermediate_size
        matrices = 3 if self.gated_mlp else 2
        count = matrices * h * inner
        if self.expert_bias:
            count += (matrices - 1) * inner + h
        return count

    def router_param_count(self) -> int:
        """Parameters of one MoE layer's router (plus its bias or score correction)."""
        return self.num_experts * self.hidden_size + (self.num_experts if self.router_bias else 0)

    def shared_expert_param_count(self) -> int:
        """Parameters of one MoE layer's shared expert(s)."""
        matrices = 3 if self.gated_mlp else 2
        return matrices * self.hidden_size * self.shared_expert_intermediate_size

    def moe_param_count(self) -> int:
        """Parameters of one MoE layer's MLP: every routed expert, the router, shared experts."""
        return (
            self.num_experts * self.expert_param_count()
            + self.router_param_count()
            + self.shared_expert_param_count()
        )

    def _norm_param_count(self) -> int:
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return 2 * self.hidden_size + qk_norm

    def layer_param_count(self) -> int:
        """Parameters of one dense decoder layer: attention, MLP, its two RMSNorm weights and the
        per-head q/k norms where the model has them."""
        return self.attention_param_count() + self.mlp_param_count() + self._norm_param_count()

    def moe_layer_param_count(self) -> int:
        """Parameters of one MoE decoder layer (every expert counted)."""
        return self.attention_param_count() + self.moe_param_count() + self._norm_param_count()

    def embedding_param_count(self) -> int:
        """Parameters of the token embedding (also of the LM head, when it is not tied)."""
        return self.vocab_size * self.hidden_size

    def param_count(self) -> int:
        """Total parameters: embedding, layers, final norm and the LM head unless tied (of a
        multimodal checkpoint, the text model's)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_param_count()
        return (
            self.embedding_param_count()
            + self.num_dense_layers * self.layer_param_count()
            + self.num_moe_layers * self.moe_layer_param_count()
            + self.hidden_size
            + lm_head
        )

    def active_param_count(self) -> int:
        """Parameters one token reads: every layer's attention and norms, dense MLPs, in an MoE
        layer the router, its ``experts_per_token`` experts and the shared ones, the final norm
        and the LM head; not the embedding table (a token reads one row of it). Equal to
        :meth:`param_count` less the embedding for a dense model with an untied head."""
        attention = self.attention_param_count() + self._norm_param_count()
        moe = (
            self.experts_per_token * self.expert_param_count()
            + self.router_param_count()
            + self.shared_expert_param_count()
        )
        return (
            self.num_dense_layers * (attention + self.mlp_param_count())
            + self.num_moe_layers * (attention + moe)
            + self.hidden_size
            + self.embedding_param_count()  # the LM head, tied or not
        )

    def weight_bytes(self, bytes_per_param: float) -> float:
        """Bytes of all weights at ``bytes_per_param`` (2 for bf16/fp16, 1 for fp8)."""
        return self.param_count() * bytes_per_param

    def kv_elements_per_token(self) -> int:
        """KV-cache elements one token occupies across all layers: a key and a value per KV
        head, or MLA's latent and rotary key. Local-attention layers count in full (the rate for
        a context within their window)."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * self.num_layers * self.kv_dim

    def kv_bytes_per_token(self, bytes_per_elem: float) -> float:
        """KV-cache bytes one token occupies across all layers (see
        :meth:`kv_elements_per_token`)."""
        return self.kv_elements_per_token() * bytes_per_elem


def expert_parallel_problem(model: ModelShape, tp: int, ep: int, dp: int = 1) -> str | None:
    """Why ``model`` cannot spread its experts over ``ep`` GPUs of a replica of ``dp`` attention
    data-parallel ranks of ``tp`` GPUs each (None when it can): expert parallelism over all of a
    replica's GPUs (ep = tp x dp) or none (ep = 1, only without data parallelism)."""
    group = tp * dp
    if dp > 1 and not model.is_moe:
        return (
            f"attention data parallelism (dp) shares a mixture of experts' experts between "
            f"ranks; {model.name} has none (a dense model's data parallelism is cluster.replicas)"
        )
    if ep == 1 and dp == 1:
        return None
    if not model.is_moe:
        return f"{model.name} has no experts to spread (ep must be 1)"
    if ep != group:
        if dp > 1:
            return (
                f"with attention data parallelism the experts are spread over all tp x dp = "
                f"{group} GPUs of a replica (vLLM's --enable-expert-parallel with "
                f"--data-parallel-size), so ep must be {group}, got {ep}"
            )
        return (
            f"expert parallelism spreads the experts over the tensor-parallel group, so ep must "
            f"be 1 or tp ({tp}), got {ep} (or tp x dp with attention data parallelism, dp)"
        )
    if model.num_experts % ep:
        return f"{model.num_experts} experts do not divide over {ep} GPUs"
    return None


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    inter: int,
    vocab: int,
    *,
    max_pos: int,
    tied: bool = False,
    head_dim: int | None = None,
    qkv_bias: bool = False,
    qk_norm: bool = False,
) -> ModelShape:
    return ModelShape(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim if head_dim is not None else hidden // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=max_pos,
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
    )


# Values from each checkpoint's Hugging Face config.json (repository in the comment).
_CATALOG: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # meta-llama/Llama-2-{7b,13b,70b}-hf
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_pos=4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, max_pos=4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, max_pos=4096),
        # meta-llama/Meta-Llama-3-{8B,70B}
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=8192),
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=8192),
        # meta-llama/Llama-3.1-{8B,70B} (same shapes, 128k context)
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=131072),
        _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=131072),
        # meta-llama/Llama-3.2-1B
        _llama(
            "llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, max_pos=131072, tied=True, head_dim=64
        ),
        # mistralai/Mistral-7B-v0.1
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
        # Qwen/Qwen2.5-{7B,72B}
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, max_pos=131072, qkv_bias=True),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, max_pos=131072, qkv_bias=True),
        # Qwen/Qwen3-32B (explicit head_dim 128 > hidden/heads; per-head q/k RMSNorm)
        _llama(
            "qwen3-32b", 64, 5120, 64, 8, 25600, 151936, max_pos=40960, head_dim=128, qk_norm=True
        ),
        # mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token, every layer
        replace(
            _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
            num_experts=8,
            experts_per_token=2,
            expert_intermediate_size=14336,
        ),
        # Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: 128 experts, 8 per token, no shared one
        replace(
            _llama(
                "qwen3-30b-a3b",
                48,
                2048,
                32,
                4,
                6144,
                151936,
                max_pos=40960,
                head_dim=128,
                qk_norm=True,
            ),
            num_experts=128,
            experts_per_token=8,
            expert_intermediate_size=768,
        ),
        replace(
            _llama(
                "qwen3-235b-a22b",
                94,
                4096,
                64,
                4,
                12288,
                151936,
                max_pos=40960,
                head_dim=128,
                qk_norm=True,
            ),
            num_experts=128,
            experts_per_token=8,
            expert_intermediate_size=1536,
        ),
        # deepseek-ai/DeepSeek-V3: MLA, 3 dense layers then 58 MoE layers of 256 routed experts
        # (8 per token) and one shared; the multi-token-prediction module is not counted
        replace(
            _llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, max_pos=163840, head_dim=192),
            num_experts=256,
            experts_per_token=8,
            expert_intermediate_size=2048,
            shared_expert_intermediate_size=2048,
            dense_layers=3,
            router_bias=True,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            mtp_layers=1,
        ),
        # openai/gpt-oss-120b: 128 experts (4 per token) with biases, alternating 128-token
        # sliding-window and full attention, attention sinks and biases
        replace(
            _llama(
                "gpt-oss-120b",
                36,
                2880,
                64,
                8,
                2880,
                201088,
                max_pos=131072,
                head_dim=64,
                qkv_bias=True,
            ),
            num_experts=128,
            experts_per_token=4,
            expert_intermediate_size=2880,
            expert_bias=True,
            router_bias=True,
            sliding_window=128,
            sliding_window_layers=18,
            attention_sinks=True,
            o_bias=True,
        ),
        # meta-llama/Llama-4-Scout-17B-16E (text model): 16 experts, 1 per token, one shared
        # expert, every layer; 3 of 4 layers attend within 8,192-token chunks
        replace(
            _llama("llama-4-scout", 48, 5120, 40, 8, 16384, 202048, max_pos=10485760, head_dim=128),
            num_experts=16,
            experts_per_token=1,
            expert_intermediate_size=8192,
            shared_expert_intermediate_size=8192,
            sliding_window=8192,
            sliding_window_layers=36,
        ),
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(_CATALOG)

_REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

# The range of each dimension read from a config.json (see cbsim.limits for the reasons).
_KEY_LIMITS: dict[str, Limit] = {
    "num_hidden_layers": MODEL_LAYERS,
    "hidden_size": MODEL_WIDTH,
    "num_attention_heads": MODEL_HEADS,
    "num_key_value_heads": MODEL_HEADS,
    "intermediate_size": MODEL_WIDTH,
    "head_dim": MODEL_WIDTH,
    "vocab_size": VOCABULARY,
    "max_position_embeddings": TOKENS,
    "num_local_experts": MODEL_EXPERTS,
    "num_experts": MODEL_EXPERTS,
    "n_routed_experts": MODEL_EXPERTS,
    "num_experts_per_tok": MODEL_EXPERTS,
    "n_shared_experts": MODEL_EXPERTS,
    "first_k_dense_replace": MODEL_LAYERS,
    "moe_layer_freq": MODEL_LAYERS,
    "interleave_moe_layer_step": MODEL_LAYERS,
    "decoder_sparse_step": MODEL_LAYERS,
    "no_rope_layer_interval": MODEL_LAYERS,
    "sliding_window": TOKENS,
    "attention_chunk_size": TOKENS,
    "num_nextn_predict_layers": MODEL_LAYERS,
}

# model_type values whose architecture puts a bias on q/k/v even without attention_bias.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})
# model_type values whose attention normalises each query and key head (RMSNorm) before rotary.
_QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})

# The dense decoder-only architectures a ModelShape describes exactly (Llama family: Mistral and
# Qwen2/Qwen3 differ only by the q/k/v bias and the q/k norm read above).
DENSE_ARCHITECTURES = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)
DENSE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
# Mixture-of-experts and latent-attention architectures read exactly, by model_type.
MOE_MODEL_TYPES = frozenset(
    {"mixtral", "qwen3_moe", "deepseek_v3", "kimi_k2", "gpt_oss", "llama4", "llama4_text"}
)
MOE_ARCHITECTURES = frozenset(
    {
        "MixtralForCausalLM",
        "Qwen3MoeForCausalLM",
        "DeepseekV3ForCausalLM",
        "GptOssForCausalLM",
        "Llama4ForCausalLM",
        "Llama4ForConditionalGeneration",
    }
)
ARCHITECTURES = DENSE_ARCHITECTURES | MOE_ARCHITECTURES
"""Every Hugging Face architecture :func:`model_from_hf_config` reads."""
MODEL_TYPES = DENSE_MODEL_TYPES | MOE_MODEL_TYPES
# Keys whose presence (with more than one expert) marks a mixture-of-experts config.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_MOE_MARKERS = ("moe", "mixtral", "deepseek", "dbrx", "jamba", "arctic", "grok", "olmoe", "phimoe")
MOE_UNSUPPORTED = (
    "this mixture-of-experts architecture is not supported (cbsim reads "
    f"{', '.join(sorted(MOE_ARCHITECTURES))})"
)


def _int_key(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if value is None:
        raise CbsimError("missing required key", field=key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CbsimError(f"must be a positive integer, got {_shown(value)}", field=key)
    limit = _KEY_LIMITS.get(key)
    problem = limit.violation(value) if limit is not None else None
    if problem is not None:
        raise CbsimError(problem, field=key)
    return value


def _shown(value: Any) -> str:
    """A config value as quoted in an error message (long values cut)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_moe_name(name: str) -> bool:
    return any(marker in name.casefold() for marker in _MOE_MARKERS)


def check_architecture(config: Mapping[str, Any]) -> None:
    """Refuse a config that is not one of the architectures :class:`ModelShape` describes: an
    unknown mixture-of-experts architecture with a message saying so, experts in a dense
    architecture's config, any other unknown ``architectures`` or ``model_type`` with the known
    ones. A config naming neither is read as a Llama-family model."""
    architectures = config.get("architectures")
    if architectures is not None:
        if not isinstance(architectures, list) or not all(
            isinstance(a, str) for a in architectures
        ):
            raise CbsimError(
                f"must be a list of architecture names, got {_shown(architectures)}",
                field="architectures",
            )
        for name in architectures:
            if name not in ARCHITECTURES:
                reason = MOE_UNSUPPORTED if _is_moe_name(name) else "unsupported architecture"
                raise CbsimError(
                    f"{name!r}: {reason}; known: {', '.join(sorted(ARCHITECTURES))}",
                    field="architectures",
                )
    model_type = config.get("model_type")
    if model_type is not None and model_type not in MODEL_TYPES:
        reason = (
            MOE_UNSUPPORTED
            if isinstance(model_type, str) and _is_moe_name(model_type)
            else "unsupported model type"
        )
        raise CbsimError(
            f"{_shown(model_type)}: {reason}; known: {', '.join(sorted(MODEL_TYPES))}",
            field="model_type",
        )
    if _family(config) in MOE_MODEL_TYPES:
        return
    for key in _EXPERT_KEYS:
        experts = config.get(key)
        if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1:
            raise CbsimError(
                f"{experts} experts in a dense architecture's config: give the model_type of a "
                f"mixture-of-experts architecture ({', '.join(sorted(MOE_MODEL_TYPES))})",
                field=key,
            )


def model_from_hf_config(config: Mapping[str, Any], name: str) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` mapping.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``. ``num_key_value_heads`` defaults to the number of
    attention heads, ``head_dim`` to ``hidden_size // num_attention_heads``,
    ``tie_word_embeddings`` to False and ``max_position_embeddings`` to 4096. A multimodal config
    whose text model sits under ``text_config`` is read from there. Only dense Llama-family
    architectures are accepted (see :func:`check_architecture`); every dimension must lie within
    its :mod:`cbsim.limits` range. Raises :class:`CbsimError` naming the offending key.
    """
    if not isinstance(config, Mapping):
        raise CbsimError(f"expected a JSON object, got {type(config).__name__}")
    text_config = config.get("text_config")
    if "num_hidden_layers" not in config and isinstance(text_config, Mapping):
        try:
            return model_from_hf_config(
                {"tie_word_embeddings": config.get("tie_word_embeddings"), **text_config}, name
            )
        except CbsimError as err:
            raise err.located(field="text_config") from None
    check_architecture(config)
    for key in _REQUIRED_KEYS:
        if key not in config:
            raise CbsimError("missing required key", field=key)
    layers, hidden, heads, inter, vocab = (_int_key(config, key) for key in _REQUIRED_KEYS)
    kv_heads = (
        heads
        if config.get("num_key_value_heads") is None
        else _int_key(config, "num_key_value_heads")
    )
    if config.get("head_dim") is None:
        if hidden % heads:
            raise CbsimError(
                f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) "
                "and head_dim is not given",
                field="head_dim",
            )
        head_dim = hidden // heads
    else:
        head_dim = _int_key(config, "head_dim")
    max_pos = (
        4096
        if config.get("max_position_embeddings") is None
        else _int_key(config, "max_position_embeddings")
    )
    tied = config.get("tie_word_embeddings")
    family = _family(config)
    attention_bias = bool(config.get("attention_bias", False))
    extra: dict[str, Any] = {}
    if family in MOE_MODEL_TYPES:
        extra = _expert_fields(config, family, layers)
        if family in ("deepseek_v3", "kimi_k2"):
            extra |= _latent_attention_fields(config)
            head_dim = extra["qk_nope_head_dim"] + extra["qk_rope_head_dim"]
        extra |= _local_attention_fields(config, family, layers)
        if family == "llama4":
            inter = _int_key(config, "intermediate_size_mlp")
        if family == "gpt_oss":
            extra["attention_sinks"] = True
    try:
        return ModelShape(
            name=name,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=vocab,
            tie_word_embeddings=bool(tied) if tied is not None else False,
            max_position_embeddings=max_pos,
            qkv_bias=attention_bias or config.get("model_type") in _QKV_BIAS_MODEL_TYPES,
            qk_norm=config.get("model_type") in _QK_NORM_MODEL_TYPES,
            o_bias=attention_bias,
            mtp_layers=_count_key(config, "num_nextn_predict_layers", 0),
            **extra,
        )
    except CbsimError as err:  # name the config's key, not the ModelShape attribute
        raise CbsimError(err.message, field=_CONFIG_KEYS.get(err.field or "", err.field)) from None


# Architecture -> the model_type whose fields it is read by (when the config has no model_type).
_ARCHITECTURE_FAMILY = {
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4",
    "Llama4ForConditionalGeneration": "llama4",
}


def _family(config: Mapping[str, Any]) -> str:
    """Which architecture's fields to read: the model type (Llama 4's text model as
    ``llama4``), else the first mixture-of-experts architecture named, else ``llama``."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in MODEL_TYPES:
        return "llama4" if model_type == "llama4_text" else model_type
    for name in config.get("architectures") or ():
        if name in _ARCHITECTURE_FAMILY:
            return _ARCHITECTURE_FAMILY[name]
    return "llama"


def _count_key(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """A count from the config (0 allowed), or ``default`` when absent or null."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise CbsimError("missing required key", field=key)
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CbsimError(f"must be an integer >= 0, got {_shown(value)}", field=key)
    limit = _KEY_LIMITS.get(key, MODEL_WIDTH)
    if value and limit.violation(value) is not None:
        raise CbsimError(str(limit.violation(value)), field=key)
    return value


def _expert_fields(config: Mapping[str, Any], family: str, layers: int) -> dict[str, Any]:
    """The mixture-of-experts fields of a config of ``family`` (a model type)."""
    experts_key = {
        "mixtral": "num_local_experts",
        "gpt_oss": "num_local_experts",
        "llama4": "num_local_experts",
        "qwen3_moe": "num_experts",
        "deepseek_v3": "n_routed_experts",
        "kimi_k2": "n_routed_experts",
    }[family]
    fields: dict[str, Any] = {
        "num_experts": _int_key(config, experts_key),
        "experts_per_token": _int_key(config, "num_experts_per_tok"),
    }
    if family in ("mixtral", "gpt_oss", "llama4"):
        fields["expert_intermediate_size"] = _int_key(config, "intermediate_size")
    else:
        fields["expert_intermediate_size"] = _int_key(config, "moe_intermediate_size")
    if family == "llama4":
        fields["shared_expert_intermediate_size"] = fields["expert_intermediate_size"]
        fields["moe_layer_step"] = _count_key(config, "interleave_moe_layer_step", 1) or 1
        _check_moe_layers(config, "moe_layers", layers, 0, fields["moe_layer_step"])
    elif family == "qwen3_moe":
        fields["moe_layer_step"] = _count_key(config, "decoder_sparse_step", 1) or 1
        dense = config.get("mlp_only_layers") or []
        if dense != list(range(len(dense))):
            raise CbsimError(
                "only leading dense layers are supported (0, 1, ... k-1)", field="mlp_only_layers"
            )
        fields["dense_layers"] = len(dense)
        if dense and fields["moe_layer_step"] > 1:
            raise CbsimError(
                "leading dense layers with a decoder_sparse_step above 1 are not supported",
                field="mlp_only_layers",
            )
    elif family in ("deepseek_v3", "kimi_k2"):
        shared = _count_key(config, "n_shared_experts", 0)
        fields["shared_expert_intermediate_size"] = shared * fields["expert_intermediate_size"]
        fields["dense_layers"] = _count_key(config, "first_k_dense_replace", 0)
        if _count_key(config, "moe_layer_freq", 1) > 1:
            raise CbsimError(
                "only an MoE layer after every dense one is supported (1)", field="moe_layer_freq"
            )
        fields["router_bias"] = config.get("topk_method") == "noaux_tc"
    elif family == "gpt_oss":
        fields["expert_bias"] = True
        fields["router_bias"] = True
    return fields


def _check_moe_layers(
    config: Mapping[str, Any], key: str, layers: int, dense: int, step: int
) -> None:
    """An explicit list of MoE layers must be the one the step implies."""
    listed = config.get(key)
    if listed is None:
        return
    implied = [i for i in range(dense, layers) if (i - dense + 1) % step == 0]
    if listed != implied:
        raise CbsimError(
            f"MoE layers other than every {step}th are not supported, got {_shown(listed)}",
            field=key,
        )


def _latent_attention_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """Multi-head latent attention's ranks and head widths (DeepSeek-V3, Kimi K2)."""
    return {
        "q_lora_rank": _count_key(config, "q_lora_rank", 0),
        "kv_lora_rank": _int_key(config, "kv_lora_rank"),
        "qk_rope_head_dim": _int_key(config, "qk_rope_head_dim"),
        "qk_nope_head_dim": _int_key(config, "qk_nope_head_dim"),
        "v_head_dim": _int_key(config, "v_head_dim"),
    }


def _local_attention_fields(config: Mapping[str, Any], family: str, layers: int) -> dict[str, Any]:
    """Local attention: gpt-oss's sliding-window layers (``layer_types``, alternating from the
    first when absent) and Llama 4's chunked-attention layers (those with rotary embedding,
    three of four), whose chunk is taken as a window (what a token attends to at most)."""
    if family == "gpt_oss":
        window = _count_key(config, "sliding_window", 0)
        types = config.get("layer_types")
        if types is None:
            local = (layers + 1) // 2
        elif isinstance(types, list) and len(types) == layers:
            local = sum(1 for t in types if t == "sliding_attention")
        else:
            raise CbsimError(f"must list {layers} layer types", field="layer_types")
    elif family == "llama4":
        window = _count_key(config, "attention_chunk_size", 0)
        rope = config.get("no_rope_layers")
        if rope is None:
            interval = _count_key(config, "no_rope_layer_interval", 4) or 4
            local = sum(1 for i in range(layers) if (i + 1) % interval)
        elif isinstance(rope, list) and len(rope) == layers:
            local = sum(1 for flag in rope if flag)
        else:
            raise CbsimError(f"must list {layers} flags", field="no_rope_layers")
    else:
        return {}
    if not window:
        return {}
    return {"sliding_window": window, "sliding_window_layers": local}


# ModelShape attribute -> the config.json key it is read from.
_CONFIG_KEYS = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "experts_per_token": "num_experts_per_tok",
    "dense_layers": "first_k_dense_replace",
    "mtp_layers": "num_nextn_predict_layers",
}


def _load_config_file(path: Path) -> ModelShape:
    if path.is_dir():
        path = path / "config.json"
    source = str(path)
    try:
        text = read_text_file(path, what="model config")
        config = parse_json(text, source)
    except CbsimError as err:
        raise err.located(source=source) from None
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    try:
        return model_from_hf_config(config, name)
    except CbsimError as err:
        raise err.located(source=source) from None


def get_model(name_or_path: str) -> ModelShape:
    """A catalog model by name, or the model described by a Hugging Face ``config.json``.

    A catalog name (compared without case) wins over a same-named file. Otherwise a string ending in ``.json``, or naming
    an existing file or directory (read as ``DIR/config.json``), is loaded as a config. Anything
    else raises :class:`CbsimError` listing the catalog names.
    """
    model = _CATALOG.get(name_or_path)
    if model is not None:
        return model
    canonical = canonical_name(name_or_path, MODEL_NAMES)
    if canonical is not None:
        return _CATALOG[canonical]
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".json") or path.exists():
        return _load_config_file(path)
    raise unknown_name("model", name_or_path, MODEL_NAMES)
