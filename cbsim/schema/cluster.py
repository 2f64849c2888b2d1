"""The ``cluster`` section: what serves the traffic.

``replicas`` copies of ``model`` on ``tp`` GPUs of kind ``gpu`` each, run by a serving
``engine``, with their parallel layout, precision, prefix cache and router; or pools of replicas
with settings of their own (a disaggregated cluster's prefill and decode pools, a mixed fleet).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from cbsim.catalog.quantization import INTEGER_FORMATS, canonical_dtype, kv_dtype_problem
from cbsim.common.errors import CbsimError, unknown_name
from cbsim.common.limits import (
    REPLICAS,
    IntervalSeconds,
    LoadBandwidth,
    NotBool,
    ReplicaCount,
    TimeOffset,
    TokenCount,
)
from cbsim.schema.base import StrictModel

DType = Annotated[
    Literal["bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4", "fp32"],
    BeforeValidator(canonical_dtype),
]
"""A weight format; its other names (``awq``, ``gptq``, ``w4a16``, ``w8a8``, ``nvfp4``,
``float32``...) are read as it (:data:`cbsim.catalog.quantization.DTYPE_ALIASES`)."""
KvDType = Annotated[Literal["bf16", "fp16", "fp8", "fp32"], BeforeValidator(canonical_dtype)]
"""A KV-cache precision (``fp32`` only under fp32 weights: :func:`cbsim.catalog.quantization.kv_dtype_problem`)."""


def _integer_checkpoint(model: Any) -> str | None:
    """``int4`` or ``int8`` when ``model`` names an integer-quantized checkpoint, else None
    (unreadable or unknown models are reported by the ``model`` field's own check; a
    ``config.json`` quantized in a format cbsim does not model is refused here)."""
    from cbsim.catalog.models import checkpoint_format

    if not isinstance(model, str):
        return None
    try:
        weight_format = checkpoint_format(model)
    except CbsimError as err:
        raise ValueError(f"model: {err}") from None
    return weight_format if weight_format in INTEGER_FORMATS else None


class KvOffload(StrictModel):
    """A CPU tier under the prefix cache: blocks evicted from GPU memory are kept in ``cpu_gib``
    GiB of host memory per GPU and loaded back at ``bandwidth_gib_s`` GiB/s per GPU (PCIe; Gen5
    x16 moves about 50 GB/s each way, 25 is a realistic sustained rate) when a request reuses
    them (:mod:`cbsim.memory.prefix_cache`)."""

    cpu_gib: Annotated[float, NotBool, Field(gt=0.0, le=65536.0)]
    bandwidth_gib_s: Annotated[float, NotBool, Field(gt=0.0, le=10000.0)] = 25.0


RouterKind = Literal["round_robin", "least_loaded", "random", "prefix_aware", "session_affinity"]


class Pool(StrictModel):
    """A group of replicas with settings of their own: a disaggregated cluster's prefill or decode
    pool (:class:`Disaggregation`), or one group of a mixed fleet (``cluster.pools``). Every key
    left unset is the cluster's; ``scheduler`` overrides keys of the scenario's ``scheduler``
    for this pool's replicas. The model is the cluster's (one model is served)."""

    replicas: ReplicaCount = 1
    gpu: str | None = None
    tp: Annotated[int, NotBool, Field(ge=1)] | None = None
    dtype: DType | None = None
    kv_dtype: KvDType | None = None
    engine: str | None = None
    calibration: str | None = None
    gpu_memory_utilization: Annotated[float, NotBool, Field(gt=0.0, le=1.0)] | None = None
    prefix_caching: bool | None = None
    kv_offload: KvOffload | None = None
    expert_routing: Literal["balanced", "skewed"] | None = None
    ep: Annotated[int, NotBool, Field(ge=1)] | None = None
    dp: Annotated[int, NotBool, Field(ge=1, le=64)] | None = None
    pp: Annotated[int, NotBool, Field(ge=1, le=64)] | None = None
    router: RouterKind | None = None
    scheduler: dict[str, Any] | None = None

    def cluster_keys(self) -> dict[str, Any]:
        """The cluster keys this pool sets (its replicas included)."""
        keys = self.model_dump(exclude_unset=True, exclude={"scheduler"})
        keys["replicas"] = self.replicas
        return keys


class KvTransfer(StrictModel):
    """The link a request's KV cache crosses from its prefill instance to its decode instance
    (:mod:`cbsim.memory.kv_transfer`). ``link``: ``auto`` (NVLink where the two instances share a node,
    else the NICs' RDMA), ``nvlink`` or ``rdma``. ``bandwidth_gb_s`` (10^9 bytes/s, the whole
    link's) and ``latency_s`` (per transfer) override the link's defaults from the hardware
    catalog. ``layerwise``: each layer's KV leaves as soon as the prefill has computed it
    (Mooncake's and NIXL's layer-wise mode), overlapping the transfer with the prefill."""

    link: Literal["auto", "nvlink", "rdma"] = "auto"
    bandwidth_gb_s: Annotated[float, NotBool, Field(gt=0.0, le=100_000.0)] | None = None
    latency_s: Annotated[float, NotBool, Field(ge=0.0, le=10.0)] | None = None
    layerwise: bool = False


class Disaggregation(StrictModel):
    """Disaggregated prefill and decode (DistServe, Splitwise, Mooncake, Dynamo, llm-d): requests
    are routed to a ``prefill`` instance, which computes the prompt; its KV cache then crosses
    ``kv_transfer`` to a ``decode`` instance, which produces the output tokens. Each pool takes
    cluster keys (:class:`Pool`)."""

    prefill: Pool = Field(default_factory=Pool)
    decode: Pool = Field(default_factory=Pool)
    kv_transfer: KvTransfer = Field(default_factory=KvTransfer)


AUTOSCALE_METRICS = ("queue", "kv_utilization", "rps")


class Autoscale(StrictModel):
    """A fleet that follows its load (:mod:`cbsim.engine.autoscale`), as a Kubernetes Horizontal Pod
    Autoscaler scales a serving Deployment: ``max_replicas`` replicas are built, of which
    ``initial_replicas`` (default ``min_replicas``) serve from t = 0. Every ``interval_s`` the
    autoscaler reads ``metric`` over the serving replicas (``queue``: waiting requests per replica;
    ``kv_utilization``: mean fraction of KV blocks in use; ``rps``: requests routed in the last
    interval per replica per second) and asks for ``ceil(current x metric / target)`` replicas
    within ``[min_replicas, max_replicas]``, leaving the fleet as it is within 10% of the target.
    A replica started serves after ``scale_up_delay_s`` (provisioning) plus its weights per GPU
    over ``weight_load_gbps`` GB/s (10^9 bytes/s); replicas are removed only when no scale event
    happened within ``cooldown_s``, drain what they hold, then are released; at most
    ``scale_down_step`` at a time when given (a Kubernetes ``scaleDown`` policy of that many pods
    per period), else down to the desired count at once. As the HPA's ``behavior`` stabilization
    windows do, the fleet shrinks only to the largest count asked for within the last
    ``stabilization_s`` seconds (``scaleDown.stabilizationWindowSeconds``, 300 by default; 0 or
    null: no window) and grows only to the smallest asked for within the last
    ``scale_up_stabilization_s`` (``scaleUp.stabilizationWindowSeconds``, 0 by default), so a
    moment of empty queues does not remove a replica the next burst needs."""

    min_replicas: ReplicaCount = 1
    max_replicas: ReplicaCount
    metric: str = "queue"
    target: Annotated[float, NotBool, Field(gt=0.0, le=1e9)]
    scale_up_delay_s: TimeOffset = 0.0
    cooldown_s: TimeOffset = 300.0
    interval_s: IntervalSeconds = 15.0
    weight_load_gbps: LoadBandwidth = 2.0
    initial_replicas: ReplicaCount | None = None
    scale_down_step: ReplicaCount | None = None
    stabilization_s: TimeOffset | None = 300.0  # None (files before the default): 0
    scale_up_stabilization_s: TimeOffset = 0.0

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if metric not in AUTOSCALE_METRICS:
            raise ValueError(unknown_name("autoscale metric", metric, AUTOSCALE_METRICS).message)
        return metric

    @model_validator(mode="after")
    def _consistent(self) -> Autoscale:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas: {self.max_replicas} is below min_replicas {self.min_replicas}"
            )
        initial = self.initial_replicas
        if initial is not None and not self.min_replicas <= initial <= self.max_replicas:
            raise ValueError(
                f"initial_replicas: {initial} is outside [min_replicas, max_replicas] = "
                f"[{self.min_replicas}, {self.max_replicas}]"
            )
        if self.metric == "kv_utilization" and self.target > 1.0:
            raise ValueError(
                f"target: kv_utilization is a fraction of the KV blocks; the target must be in "
                f"(0, 1], got {self.target:g}"
            )
        return self

    @property
    def start_replicas(self) -> int:
        """Replicas serving from t = 0."""
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas


class Cluster(StrictModel):
    """What serves: ``replicas`` copies of ``model`` on ``tp`` GPUs of kind ``gpu`` each, run by
    the serving ``engine`` (``vllm``, ``sglang``, ``tensorrt-llm``, ``none`` for the bare roofline,
    or an engine profile JSON; see :mod:`cbsim.cost.engine_profile`).

    A ``tp`` (or ``tp x dp``) group larger than a node takes whole nodes: its all-reduces and
    all-to-alls add the other nodes' share over the GPUs' NICs to one node's measured time
    (:meth:`cbsim.cost.roofline.CostModel.allreduce_time`).

    ``model`` is a catalog name (``llama-3.1-70b``), a Hugging Face id the catalog knows
    (``meta-llama/Llama-3.1-70B-Instruct``; no network), or a ``config.json`` path.

    ``dtype`` is the weights' precision (``fp4`` = NVFP4, Blackwell only; ``int4`` = 4-bit
    weight-only AWQ/GPTQ/w4a16, ``int8`` = W8A8, NVIDIA only: :mod:`cbsim.catalog.quantization`;
    ``fp32`` = vLLM's ``--dtype float32``, every tensor and the KV cache in 4 bytes, GEMMs at
    the GPU's fp32 peak without TF32, dense models only); unset,
    an integer-quantized checkpoint's own format where ``model`` names one (its Hugging Face id,
    or a ``config.json`` whose ``quantization_config`` says so), else bf16. ``kv_dtype`` the KV
    cache's, by default what the engine keeps for such weights (vLLM and SGLang: bf16 for an fp8
    checkpoint; TensorRT-LLM: fp8). Keys left unset here and in ``scheduler`` take the engine's
    defaults for this GPU (see :func:`apply_engine_defaults`).

    ``prefix_caching``: whether finished requests' KV blocks stay cached for later requests with
    the same prompt prefix (:mod:`cbsim.memory.prefix_cache`); unset, what the engine does by default
    (vLLM, SGLang and TensorRT-LLM: on; ``none`` and the other profiles: off). It only matters for
    requests whose prompt content is known: a replayed trace with prefix block ids, or
    sessions. ``kv_offload`` adds a CPU tier to it (:class:`KvOffload`).

    ``expert_routing`` (mixture-of-experts models): how the router spreads tokens over experts,
    ``balanced`` or ``skewed`` (a power law: a few hot experts), priced from vLLM's MoE kernels
    measured under each (:mod:`cbsim.cost.moe`). ``ep``: 1 (every GPU holds a 1/tp slice of every
    expert) or ``tp`` (each GPU holds ``experts / tp`` whole experts, vLLM's expert parallelism
    over the tensor-parallel group); the same weights per GPU either way, priced from the kernels
    measured in each layout.

    ``dp`` (mixture-of-experts models): attention data parallelism, as vLLM's
    ``--data-parallel-size`` with ``--enable-expert-parallel`` and SGLang's ``--enable-dp-attention``
    run DeepSeek-class models: a replica is ``dp`` ranks of ``tp`` GPUs, each rank with its own
    requests, KV cache and attention (and the scheduler's batch limits: ``max_batch_size`` and
    ``max_batched_tokens`` are per rank), the routed experts spread over all ``tp x dp`` GPUs
    (``ep`` must be ``tp x dp``), tokens dispatched to their experts and combined back by two
    all-to-alls per MoE layer. The ranks step together, one batch split evenly over them (a
    balanced data-parallel coordinator; see :class:`cbsim.cost.roofline.CostModel`).

    ``pp``: pipeline parallelism, ``pp`` stages of ``tp`` GPUs each holding a contiguous share of
    the layers (the first also the embedding, the last the LM head), across nodes where the
    stages do not fit in one (activations then cross the GPUs' NICs, ``network_bandwidth``). As
    vLLM runs it, ``pp`` micro-batches are in flight, one per stage: the batch is split into
    ``pp`` micro-batches and each iteration lasts one round of them through every stage — the
    largest stage's time per micro-batch, ``pp`` times — so a batch smaller than ``pp`` leaves
    stages idle (the bubble). The scheduler's batch limits are per micro-batch.
    """

    model: str = "llama-3-8b"
    gpu: str = "h100-sxm"
    tp: Annotated[int, NotBool, Field(ge=1)] = 1
    dtype: DType = "bf16"
    kv_dtype: KvDType | None = None
    replicas: ReplicaCount = 1
    router: RouterKind = "round_robin"
    engine: str = "vllm"
    calibration: str | None = None  # a profile name for this GPU, a JSON path, or "none"
    gpu_memory_utilization: Annotated[float, NotBool, Field(gt=0.0, le=1.0)] = 0.9
    max_model_len: TokenCount | None = None
    prefix_caching: bool | None = None
    kv_offload: KvOffload | None = None
    expert_routing: Literal["balanced", "skewed"] = "balanced"
    ep: Annotated[int, NotBool, Field(ge=1)] = 1
    dp: Annotated[int, NotBool, Field(ge=1, le=64)] = 1
    pp: Annotated[int, NotBool, Field(ge=1, le=64)] = 1
    disaggregation: Disaggregation | None = None
    pools: list[Pool] | None = Field(default=None, min_length=1, max_length=16)
    autoscale: Autoscale | None = None

    @property
    def replica_count(self) -> int:
        """Replicas in all: every pool's (``replicas`` in a plain cluster)."""
        if self.disaggregation is not None:
            return self.disaggregation.prefill.replicas + self.disaggregation.decode.replicas
        if self.pools is not None:
            return sum(pool.replicas for pool in self.pools)
        return self.replicas

    @model_validator(mode="before")
    @classmethod
    def _autoscaled_fleet(cls, data: Any) -> Any:
        """An autoscaled cluster is built with ``autoscale.max_replicas`` replicas: that is its
        ``replicas`` when not given (given, it must be the same; see :meth:`_autoscale_fits`)."""
        if isinstance(data, dict) and "replicas" not in data:
            autoscale = data.get("autoscale")
            top = autoscale.get("max_replicas") if isinstance(autoscale, dict) else None
            plain = not data.get("pools") and data.get("disaggregation") is None
            # a bad max_replicas is reported where it is, not as replicas
            usable = isinstance(top, int) and not isinstance(top, bool) and REPLICAS.contains(top)
            if usable and plain:
                data = {**data, "replicas": top}
        return data

    @model_validator(mode="after")
    def _autoscale_fits(self) -> Cluster:
        """Autoscaling scales one plain pool of replicas; ``replicas`` is the fleet it may use."""
        autoscale = self.autoscale
        if autoscale is None:
            return self
        if self.disaggregation is not None or self.pools is not None:
            which = "disaggregation" if self.disaggregation is not None else "pools"
            raise ValueError(
                f"autoscale: not supported with cluster.{which} (it scales one plain pool of "
                "replicas); leave out one of them"
            )
        if self.replicas != autoscale.max_replicas:
            raise ValueError(
                f"replicas: {self.replicas} with autoscale, whose fleet is "
                f"autoscale.max_replicas = {autoscale.max_replicas} replicas; leave replicas out "
                "(autoscale.initial_replicas says how many serve at first)"
            )
        return self

    @property
    def pooled(self) -> bool:
        """Whether replicas come in pools of their own settings (disaggregated or mixed)."""
        return self.disaggregation is not None or self.pools is not None

    @model_validator(mode="after")
    def _one_way_of_pooling(self) -> Cluster:
        if self.disaggregation is not None and self.pools is not None:
            raise ValueError("pools: give either disaggregation (prefill and decode pools) or "
                             "pools (a mixed aggregated fleet), not both")  # fmt: skip
        if self.pooled and "replicas" in self.model_fields_set:
            raise ValueError("replicas: with pools, each pool says its replicas")
        return self

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica takes: ``dp`` attention data-parallel ranks of ``tp`` GPUs each, or
        ``pp`` pipeline stages of ``tp`` GPUs each."""
        return self.tp * self.dp * self.pp

    @model_validator(mode="after")
    def _pipeline_layout(self) -> Cluster:
        """``pp`` stages split the model's layers; with attention data parallelism as well the
        layout is not modelled."""
        from cbsim.catalog.models import get_model

        if self.pp > 1:
            if self.dp > 1:
                raise ValueError("pp: pipeline stages with attention data parallelism (dp > 1) "
                                 "are not modelled; use one of them")  # fmt: skip
            layers = get_model(self.model).num_layers
            if self.pp > layers:
                raise ValueError(f"pp: {self.pp} stages for {layers} layers")
        return self

    @model_validator(mode="before")
    @classmethod
    def _checkpoint_dtype(cls, data: Any) -> Any:
        """Unset, ``dtype`` is an integer-quantized checkpoint's own format (``int4`` for
        ``Qwen/Qwen3-14B-AWQ``): an engine serves such a checkpoint in no other."""
        if isinstance(data, dict) and "dtype" not in data:
            weight_format = _integer_checkpoint(data.get("model"))
            if weight_format is not None:
                data = {**data, "dtype": weight_format}
        return data

    @model_validator(mode="after")
    def _dtype_of_checkpoint(self) -> Cluster:
        """An integer-quantized checkpoint runs in its own format; another ``dtype`` is refused
        (a 16-bit checkpoint may be given any format: a quantized copy of it)."""
        weight_format = _integer_checkpoint(self.model)
        if weight_format is not None and self.dtype != weight_format:
            raise ValueError(
                f"dtype: {self.model} is an {weight_format} checkpoint; engines serve it in "
                f"{weight_format} (leave dtype out or set it to {weight_format}), not {self.dtype}"
            )
        return self

    @model_validator(mode="after")
    def _fp32_layout(self) -> Cluster:
        """fp32 weights: a KV cache engines keep for them, and a model whose kernels cbsim prices
        in fp32 (not a mixture of experts or latent attention: their measured MoE and MLA
        tables are 16- and 8-bit kernels with no fp32 counterpart in vLLM's fused paths)."""
        problem = kv_dtype_problem(self.dtype, self.kv_dtype)
        if problem is not None:
            raise ValueError(problem)
        if self.dtype == "fp32":
            from cbsim.catalog.models import get_model

            model = get_model(self.model)
            if model.is_moe or model.is_mla:
                kind = "a mixture of experts" if model.is_moe else "a latent-attention (MLA) model"
                raise ValueError(
                    f"dtype: fp32 weights are not modelled for {kind} ({self.model}); "
                    "use bf16 or fp16"
                )
        return self

    @model_validator(mode="after")
    def _expert_only_dtype(self) -> Cluster:
        """``mxfp4`` stores a mixture of experts' routed experts (gpt-oss); the rest is bf16."""
        if self.dtype == "mxfp4":
            from cbsim.catalog.models import get_model

            if not get_model(self.model).is_moe:
                raise ValueError(
                    f"dtype: mxfp4 stores a mixture of experts' expert weights; {self.model} has "
                    "none (use bf16, fp16, fp8 or, on Blackwell, fp4)"
                )
        return self

    @model_validator(mode="after")
    def _expert_parallel_layout(self) -> Cluster:
        """``ep`` > 1 spreads a mixture of experts' experts over the tensor-parallel group (vLLM's
        ``--enable-expert-parallel`` without data parallelism: ep = tp)."""
        from cbsim.catalog.models import expert_parallel_problem, get_model

        problem = expert_parallel_problem(get_model(self.model), self.tp, self.ep, self.dp)
        if problem is not None:
            raise ValueError(f"{'dp' if problem.startswith('attention data') else 'ep'}: {problem}")
        return self

    @field_validator("tp")
    @classmethod
    def _tp_power_of_two(cls, tp: int) -> int:
        if tp & (tp - 1) or tp > 64:
            raise ValueError(f"tp must be a power of two up to 64, got {tp}")
        return tp

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, gpu: str) -> str:
        """The catalog spelling of the GPU (names compare without case)."""
        from cbsim.catalog.hardware import get_gpu

        try:
            return get_gpu(gpu).name
        except CbsimError as err:
            raise ValueError(err.message) from None

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        """The catalog spelling of a catalog model or Hugging Face id (compared without case;
        an id stays an id, so its checkpoint is what a plan launches); a config.json path as
        given, once it reads as a supported model (errors name the key in the file)."""
        from cbsim.catalog.models import get_model, model_spelling

        try:
            get_model(model)
        except CbsimError as err:
            raise ValueError(str(err)) from None
        return model_spelling(model)

    @field_validator("engine")
    @classmethod
    def _engine_spelling(cls, engine: str) -> str:
        """A shipped engine's name in its own spelling (``vLLM`` is ``vllm``); paths as given."""
        from cbsim.cost.engine_profile import canonical_engine

        return canonical_engine(engine)

    @property
    def effective_kv_dtype(self) -> KvDType:
        """KV cache precision: as given (or resolved from the engine), else the weights' own
        16- or 32-bit precision (bf16 for fp8, fp4 and integer weights)."""
        if self.kv_dtype is not None:
            return self.kv_dtype
        return self.dtype if self.dtype in ("fp16", "fp32") else "bf16"
