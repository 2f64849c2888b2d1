"""A model's shape: the transformer dimensions that decide what an LLM costs to serve.

The cost of a serving iteration depends on a model only through its shape (:class:`ModelShape`):
how many decoder layers, how wide the hidden state and the MLP are, how many query and key/value
heads attention has (grouped-query attention shares each KV head among several query heads,
shrinking the KV cache), how large the vocabulary is and whether the output projection shares the
input embedding's weights; for mixture-of-experts models the experts and their routing, for
latent-attention models the low-rank bottlenecks, for local attention the window. From those
follow the parameter count (weights to read from memory each iteration), the KV-cache bytes per
token (what bounds how many requests fit) and the FLOPs per token, and whether a parallel layout
can split the model at all (:func:`expert_parallel_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cbsim.common.errors import CbsimError


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
        post_norms: each layer also normalises the attention and the MLP outputs (Gemma 2 and
            3, GLM-4-0414): four RMSNorms a layer instead of two.
        norm_bias: the norms are LayerNorms with a bias beside each weight (Phi-3.5-MoE).
        lm_head_bias: the LM head carries a bias (Phi-3.5-MoE's ``lm_head_bias``).
        shared_expert_gate: a sigmoid gate (one weight per hidden unit) scales the shared
            expert's output in each MoE layer (Qwen2-MoE).
        multimodal_params: weights a multimodal checkpoint loads beyond its text decoder (the
            vision encoder and its projector; Llama 3.2 Vision's cross-attention gates, norms
            and image-token embeddings too): held in memory, never read for a text token.
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
    post_norms: bool = False
    norm_bias: bool = False
    lm_head_bias: bool = False
    shared_expert_gate: bool = False
    multimodal_params: int = 0

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
            "multimodal_params",
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
            if (
                self.experts_per_token
                or self.expert_intermediate_size
                or self.dense_layers
                or self.shared_expert_gate
            ):
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
            shared_expert_gate=False,
            multimodal_params=0,
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
        """Parameters of one MoE layer's router (plus its bias or score correction, and the
        shared expert's gate)."""
        bias = self.num_experts if self.router_bias else 0
        gate = self.hidden_size if self.shared_expert_gate else 0
        return self.num_experts * self.hidden_size + bias + gate

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
        norms = 4 if self.post_norms else 2
        return norms * self._final_norm_param_count() + qk_norm

    def _final_norm_param_count(self) -> int:
        return self.hidden_size * (2 if self.norm_bias else 1)

    def _lm_head_param_count(self) -> int:
        """The LM head's weights (shared with the embedding when tied) and bias."""
        return self.embedding_param_count() + (self.vocab_size if self.lm_head_bias else 0)

    def layer_param_count(self) -> int:
        """Parameters of one dense decoder layer: attention, MLP, its two (four with post-norms)
        norms and the per-head q/k norms where the model has them."""
        return self.attention_param_count() + self.mlp_param_count() + self._norm_param_count()

    def moe_layer_param_count(self) -> int:
        """Parameters of one MoE decoder layer (every expert counted)."""
        return self.attention_param_count() + self.moe_param_count() + self._norm_param_count()

    def embedding_param_count(self) -> int:
        """Parameters of the token embedding (also of the LM head, when it is not tied)."""
        return self.vocab_size * self.hidden_size

    def param_count(self) -> int:
        """Total parameters the checkpoint loads: embedding, layers, final norm, the LM head
        unless tied, and a multimodal checkpoint's vision encoder (``multimodal_params``); not
        the multi-token-prediction layers."""
        lm_head = self._lm_head_param_count()
        if self.tie_word_embeddings:
            lm_head -= self.embedding_param_count()
        return (
            self.embedding_param_count()
            + self.num_dense_layers * self.layer_param_count()
            + self.num_moe_layers * self.moe_layer_param_count()
            + self._final_norm_param_count()
            + lm_head
            + self.multimodal_params
        )

    def text_param_count(self) -> int:
        """Parameters of the text model alone (:meth:`param_count` less ``multimodal_params``)."""
        return self.param_count() - self.multimodal_params

    def active_param_count(self) -> int:
        """Parameters one token reads: every layer's attention and norms, dense MLPs, in an MoE
        layer the router, its ``experts_per_token`` experts and the shared ones, the final norm
        and the LM head; not the embedding table (a token reads one row of it) nor a vision
        encoder. Equal to :meth:`param_count` less the embedding for a text-only dense model
        with an untied head."""
        attention = self.attention_param_count() + self._norm_param_count()
        moe = (
            self.experts_per_token * self.expert_param_count()
            + self.router_param_count()
            + self.shared_expert_param_count()
        )
        return (
            self.num_dense_layers * (attention + self.mlp_param_count())
            + self.num_moe_layers * (attention + moe)
            + self._final_norm_param_count()
            + self._lm_head_param_count()  # tied or not
        )

    def linear_param_count(self) -> int:
        """Weights of the decoder layers' linear projections: attention's (MLA's down and up
        projections included), the dense MLPs', every routed and shared expert's matrices. What
        an fp8 checkpoint stores in 8 bits; the embedding, the LM head, norms, biases, routers
        and a vision encoder stay in 16 bits."""
        h = self.hidden_size
        if self.is_mla:
            attention = self.attention_param_count() - self.q_lora_rank - self.kv_lora_rank
        else:
            attention = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        matrices = 3 if self.gated_mlp else 2
        experts = self.num_experts * matrices * h * self.expert_intermediate_size
        return (
            self.num_layers * attention
            + self.num_dense_layers * self.mlp_param_count()
            + self.num_moe_layers * (experts + self.shared_expert_param_count())
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
