"""Scenarios: the validated description of one simulation.

A scenario says what traffic arrives (``workload``), what serves it (``cluster``: model, GPU, tensor
parallelism, replicas, router), how each replica batches (``scheduler``), whether and how requests
decode speculatively (``speculative``) and what latency counts as good (``slo``). It is written as
YAML, validated by pydantic models that reject unknown keys, and can be overridden field by field
with dotted ``key=value`` pairs. Every error names the file, the dotted field path and the reason.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from cbsim.documents import parse_yaml, read_text_file
from cbsim.errors import CbsimError
from cbsim.limits import (
    TOTAL_GPUS,
    BatchSize,
    BlockSize,
    ClientCount,
    Concentration,
    Divergence,
    GammaCv,
    LognormalSigma,
    NotBool,
    Rate,
    ReplicaCount,
    RequestCount,
    Seconds,
    Seed,
    StepCount,
    TimeOffset,
    TimeScale,
    TokenCount,
    TokenMean,
    WindowSeconds,
)

ModelT = TypeVar("ModelT", bound=BaseModel)


def default_kind(kind: str) -> BeforeValidator:
    """Fill in ``kind`` when a mapping leaves it out, so a section's defaults work without it."""

    def fill(value: Any) -> Any:
        if isinstance(value, dict) and "kind" not in value:
            return {"kind": kind, **value}
        return value

    return BeforeValidator(fill)


class StrictModel(BaseModel):
    """Base for every scenario section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- workload


class PoissonArrival(StrictModel):
    """Exponential inter-arrival times at ``rate`` requests per second."""

    kind: Literal["poisson"] = "poisson"
    rate: Rate


class GammaArrival(StrictModel):
    """Gamma inter-arrival times: ``rate`` per second, coefficient of variation ``cv`` (1 = Poisson)."""

    kind: Literal["gamma"]
    rate: Rate
    cv: GammaCv = 1.0


class OfflineArrival(StrictModel):
    """Every request arrives at time 0: offline batch inference (a benchmark's static batch)."""

    kind: Literal["offline"]


class TraceArrival(StrictModel):
    """Arrival times replayed from ``workload.trace``."""

    kind: Literal["trace"]


class ClosedLoopArrival(StrictModel):
    """``concurrency`` clients, each sending its next request once its previous one has finished
    and ``think_time_s`` has passed: the load of vLLM's ``bench serve --max-concurrency``,
    genai-perf/aiperf and trtllm-bench. Arrival times come out of the simulation (a finish
    releases the next request), never more than ``concurrency`` requests are in flight, and
    requests gain a ``client`` column.

    All clients send their first request at time 0, or, with ``ramp_s``, each at a uniformly
    random time in ``[0, ramp_s)`` (the scenario's ``clients`` stream): with fixed lengths,
    clients that start together finish together and stay in lockstep, while real benchmark
    clients drift apart; a ramp of about one request's duration starts them spread out.
    ``think_time: exponential`` makes each think time random with mean ``think_time_s`` (the
    ``clients`` stream), which also lets clients drift apart."""

    kind: Literal["closed_loop"]
    concurrency: ClientCount
    think_time_s: TimeOffset = 0.0
    think_time: Literal["fixed", "exponential"] = "fixed"
    ramp_s: TimeOffset = 0.0


ArrivalProcess = Literal["poisson", "constant"]
MAX_STAGES = 64


class Stage(StrictModel):
    """One rate point of a staged load: ``rate`` requests per second for ``duration_s`` seconds,
    sent as ``process`` says (default: the stages' ``process``)."""

    rate: Rate
    duration_s: Seconds
    process: ArrivalProcess | None = None


class StagesArrival(StrictModel):
    """A load generator's sweep of rate points, as ``vllm bench serve`` over several request
    rates, guidellm's rate sweeps and LMBenchmark run it: each stage sends at its ``rate`` for its
    ``duration_s``, Poisson (exponential gaps, the first gap included; the scenario's
    ``arrivals`` stream) or ``constant`` (one request every 1/rate seconds from the stage's start,
    as LMBenchmark and many load generators send). A stage starts once every request of the
    previous one is done (finished, rejected or timed out, as the client sees it: its last token
    delivered) and ``gap_s`` more seconds have passed, so stage start times come out of the
    simulation and stages never overlap. The stages say how many requests are sent: leave
    ``num_requests`` and ``duration_s`` out. Requests gain a ``stage`` column (0, 1, ...) and the
    summary per-stage figures (``stage0_ttft_p50_s``, ...; see :func:`cbsim.metrics.stage_summary`)."""

    kind: Literal["stages"]
    stages: list[Stage] = Field(min_length=1, max_length=MAX_STAGES)
    process: ArrivalProcess = "poisson"
    gap_s: TimeOffset = 0.0

    def process_of(self, stage: Stage) -> ArrivalProcess:
        """How ``stage`` sends its requests."""
        return stage.process if stage.process is not None else self.process


Arrival = Annotated[
    PoissonArrival
    | GammaArrival
    | OfflineArrival
    | TraceArrival
    | ClosedLoopArrival
    | StagesArrival,
    Field(discriminator="kind"),
    default_kind("poisson"),
]


class Client(StrictModel):
    """How the benchmark client treats a request: one still unfinished ``timeout_s`` seconds after
    it was sent is given up (its status ``timed_out``, counted in the summary's ``timed_out``) and
    aborted on the server, as vLLM aborts a request whose client disconnected: at its replica's
    next step boundary it leaves the waiting queue or the running batch (the step already under
    way completes), its KV blocks are freed and its prefix-cache entries released (computed
    prefixes stay cached). A closed-loop client then sends its next request (after its think
    time); a session's timed-out turn ends the session. A timed-out request keeps the tokens the
    server generated for it (``generated_tokens``) and its first token's time when that reached
    the client before the timeout (``first_token_s``, ``ttft_s``; else NaN); ``finish_s``,
    ``e2e_s`` and ``tpot_s`` are NaN, so it never enters the completed requests' latency
    percentiles. The inter-token latency counts every token streamed, a timed-out request's
    included."""

    timeout_s: Seconds


class FixedLength(StrictModel):
    kind: Literal["fixed"]
    value: TokenCount


class UniformLength(StrictModel):
    """Integers drawn uniformly from [low, high], both inclusive."""

    kind: Literal["uniform"]
    low: TokenCount
    high: TokenCount

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


class LognormalLength(StrictModel):
    """Lognormal lengths with arithmetic ``mean`` and log-space ``sigma``, clipped to [min, max]."""

    kind: Literal["lognormal"]
    mean: TokenMean
    sigma: LognormalSigma
    min: TokenCount = 1
    max: TokenCount | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class EmpiricalLength(StrictModel):
    """Lengths resampled (with replacement) from a trace: a shipped trace name or a file path.

    When prompt and output lengths are both empirical from the same trace they are drawn from the
    same rows, so their correlation is kept.
    """

    kind: Literal["empirical"]
    trace: str


Length = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


class TraceReplay(StrictModel):
    """Replay a real request log: its arrival times (scaled) and its prompt/output lengths.

    ``prefix_block_tokens``: the tokens each of the trace's prefix block ids stands for (512 in
    the Mooncake traces); used by prefix caching."""

    path: str
    time_scale: TimeScale | None = None
    rate_scale: TimeScale | None = None
    start_s: TimeOffset = 0.0
    prefix_block_tokens: TokenCount = 512

    @model_validator(mode="after")
    def _one_scale(self) -> TraceReplay:
        if self.time_scale is not None and self.rate_scale is not None:
            raise ValueError("give time_scale or rate_scale, not both (rate_scale = 1/time_scale)")
        return self

    @property
    def effective_time_scale(self) -> float:
        """Factor applied to the trace's arrival times (0.5 replays twice as fast)."""
        if self.rate_scale is not None:
            return 1.0 / self.rate_scale
        return self.time_scale if self.time_scale is not None else 1.0


class SystemPrompt(StrictModel):
    """A system prompt sessions share: ``templates`` different ones, each ``tokens`` long (drawn
    once per template); a session uses template r (r = 1, 2, ...) with probability proportional
    to 1 / r**zipf (0: all alike)."""

    templates: Annotated[int, NotBool, Field(ge=1, le=10_000)] = 4
    tokens: Length
    zipf: Annotated[float, NotBool, Field(ge=0.0, le=10.0)] = 1.0


class Sessions(StrictModel):
    """Multi-turn conversations (:mod:`cbsim.sessions`). Sessions start by ``workload.arrival``
    (poisson or gamma; its rate counts sessions per second), ``count`` of them or as many as
    start within ``workload.duration_s``. A session has ``turns`` turns; turn t sends the whole
    conversation so far as its prompt (the system prompt, every earlier user message and answer,
    then its own ``user_tokens`` message) and asks for ``answer_tokens`` tokens; it is sent
    ``think_time_s`` (``fixed``, or ``exponential`` with that mean) after the previous answer has
    reached the user. A rejected turn ends its session."""

    count: RequestCount | None = None
    turns: Length
    user_tokens: Length
    answer_tokens: Length
    think_time_s: TimeOffset = 0.0
    think_time: Literal["fixed", "exponential"] = "fixed"
    system_prompt: SystemPrompt | None = None


def _fixed_if_number(value: Any) -> Any:
    """A bare token count is a fixed length."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


PoolLength = Annotated[
    FixedLength | UniformLength | LognormalLength,
    Field(discriminator="kind"),
    BeforeValidator(_fixed_if_number),
]
MAX_POOL_PROMPTS = 10_000_000


class PromptPool(StrictModel):
    """Shared-prefix prompts as benchmark tools generate them (SGLang's ``generated-shared-prefix``
    dataset, vLLM's ``prefix_repetition``, genai-perf's prefix prompts): ``system_prompts``
    system prompts of ``system_tokens`` tokens each (a length distribution, or a number: fixed),
    each with ``questions`` questions of its own of ``question_tokens`` tokens, drawn once
    (:mod:`cbsim.prompt_pool`). Every request's prompt is one system prompt (prompt r, r = 1, 2,
    ..., with probability proportional to 1 / r**zipf; 0: all alike) followed by one of its
    questions (uniformly), drawn with replacement, so prompts recur and the prefix cache reuses
    the system prompts and whole recurring prompts as a server would. The pool replaces
    ``prompt_tokens``; ``output_tokens`` still gives the output lengths. Works with every arrival
    process but a replayed trace."""

    system_prompts: Annotated[int, NotBool, Field(ge=1, le=100_000)]
    system_tokens: PoolLength
    questions: Annotated[int, NotBool, Field(ge=1, le=MAX_POOL_PROMPTS)]
    question_tokens: PoolLength
    zipf: Annotated[float, NotBool, Field(ge=0.0, le=10.0)] = 0.0

    @model_validator(mode="after")
    def _bounded(self) -> PromptPool:
        prompts = self.system_prompts * self.questions
        if prompts > MAX_POOL_PROMPTS:
            raise ValueError(
                f"{self.system_prompts:,} system prompts x {self.questions:,} questions is "
                f"{prompts:,} prompts; at most {MAX_POOL_PROMPTS:,}"
            )
        return self


class Workload(StrictModel):
    """What arrives: a synthetic process (rate stages among them, :class:`StagesArrival`), a
    replayed trace, trace lengths with synthetic arrivals, or multi-turn sessions; ``client``: the
    benchmark client's timeout (:class:`Client`); ``prompt_pool``: shared-prefix prompts in place
    of prompt lengths (:class:`PromptPool`)."""

    num_requests: RequestCount | None = None
    duration_s: Seconds | None = None
    arrival: Arrival | None = None
    prompt_tokens: Length | None = None
    output_tokens: Length | None = None
    trace: TraceReplay | None = None
    sessions: Sessions | None = None
    client: Client | None = None
    prompt_pool: PromptPool | None = None

    @model_validator(mode="after")
    def _complete(self) -> Workload:
        if self.prompt_pool is not None:
            self._pool_alone()
        if self.sessions is not None:
            return self._sessions_complete()
        if isinstance(self.arrival, StagesArrival):
            extra = [n for n in ("num_requests", "duration_s") if getattr(self, n) is not None]
            if extra:
                raise ValueError(
                    f"with arrival kind 'stages' leave out {' and '.join(extra)} (each stage's "
                    "rate and duration_s say how many requests are sent)"
                )
            return self
        if self.trace is None:
            if self.arrival is None:
                raise ValueError(
                    "without a trace the workload needs arrival "
                    "(or give workload.trace to replay a real log)"
                )
            if isinstance(self.arrival, TraceArrival):
                raise ValueError("arrival kind 'trace' needs workload.trace")
            if self.num_requests is None and self.duration_s is None:
                raise ValueError("give num_requests or duration_s (or a trace)")
        if isinstance(self.arrival, OfflineArrival) and self.num_requests is None:
            raise ValueError("arrival kind 'offline' needs num_requests")
        return self

    def _sessions_complete(self) -> Workload:
        assert self.sessions is not None
        if not isinstance(self.arrival, PoissonArrival | GammaArrival):
            raise ValueError(
                "sessions start by workload.arrival: give it (kind poisson or gamma; its rate "
                "is sessions per second)"
            )
        extra = [
            name
            for name in ("trace", "prompt_tokens", "output_tokens", "num_requests")
            if getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(
                f"with sessions leave out {', '.join(extra)} (sessions.count, user_tokens and "
                "answer_tokens say it)"
            )
        if self.sessions.count is None and self.duration_s is None:
            raise ValueError("give sessions.count or duration_s")
        return self

    def _pool_alone(self) -> None:
        """A prompt pool makes the prompts: nothing else may."""
        clashing = {
            "prompt_tokens": "the pool gives the prompt lengths",
            "trace": "a replayed trace brings its own prompts",
            "sessions": "sessions build their own prompts",
        }
        for name, why in clashing.items():
            if getattr(self, name) is not None:
                raise ValueError(f"prompt_pool: leave out workload.{name} ({why})")

    @property
    def closed_loop(self) -> ClosedLoopArrival | None:
        """The closed-loop client population, when the load is closed-loop."""
        return self.arrival if isinstance(self.arrival, ClosedLoopArrival) else None


# --------------------------------------------------------------------------- cluster

DType = Literal["bf16", "fp16", "fp8", "fp4", "mxfp4"]
KvDType = Literal["bf16", "fp16", "fp8"]


class KvOffload(StrictModel):
    """A CPU tier under the prefix cache: blocks evicted from GPU memory are kept in ``cpu_gib``
    GiB of host memory per GPU and loaded back at ``bandwidth_gib_s`` GiB/s per GPU (PCIe; Gen5
    x16 moves about 50 GB/s each way, 25 is a realistic sustained rate) when a request reuses
    them (:mod:`cbsim.prefix_cache`)."""

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
    (:mod:`cbsim.kv_transfer`). ``link``: ``auto`` (NVLink where the two instances share a node,
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


class Cluster(StrictModel):
    """What serves: ``replicas`` copies of ``model`` on ``tp`` GPUs of kind ``gpu`` each, run by
    the serving ``engine`` (``vllm``, ``sglang``, ``tensorrt-llm``, ``none`` for the bare roofline,
    or an engine profile JSON; see :mod:`cbsim.cost.engine_profile`).

    A ``tp`` (or ``tp x dp``) group larger than a node takes whole nodes: its all-reduces and
    all-to-alls add the other nodes' share over the GPUs' NICs to one node's measured time
    (:meth:`cbsim.cost.roofline.CostModel.allreduce_time`).

    ``dtype`` is the weights' precision (``fp4`` = NVFP4, Blackwell only); ``kv_dtype`` the KV
    cache's, by default what the engine keeps for such weights (vLLM and SGLang: bf16 for an fp8
    checkpoint; TensorRT-LLM: fp8). Keys left unset here and in ``scheduler`` take the engine's
    defaults for this GPU (see :func:`apply_engine_defaults`).

    ``prefix_caching``: whether finished requests' KV blocks stay cached for later requests with
    the same prompt prefix (:mod:`cbsim.prefix_cache`); unset, what the engine does by default
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

    @property
    def replica_count(self) -> int:
        """Replicas in all: every pool's (``replicas`` in a plain cluster)."""
        if self.disaggregation is not None:
            return self.disaggregation.prefill.replicas + self.disaggregation.decode.replicas
        if self.pools is not None:
            return sum(pool.replicas for pool in self.pools)
        return self.replicas

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
        from cbsim.models import get_model

        if self.pp > 1:
            if self.dp > 1:
                raise ValueError("pp: pipeline stages with attention data parallelism (dp > 1) "
                                 "are not modelled; use one of them")  # fmt: skip
            layers = get_model(self.model).num_layers
            if self.pp > layers:
                raise ValueError(f"pp: {self.pp} stages for {layers} layers")
        return self

    @model_validator(mode="after")
    def _expert_only_dtype(self) -> Cluster:
        """``mxfp4`` stores a mixture of experts' routed experts (gpt-oss); the rest is bf16."""
        if self.dtype == "mxfp4":
            from cbsim.models import get_model

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
        from cbsim.models import expert_parallel_problem, get_model

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
        from cbsim.hardware import get_gpu

        try:
            return get_gpu(gpu).name
        except CbsimError as err:
            raise ValueError(err.message) from None

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        """The catalog spelling of a catalog model (names compare without case); a config.json
        path as given, once it reads as a supported model (errors name the key in the file)."""
        from cbsim.models import MODEL_NAMES, get_model

        try:
            shape = get_model(model)
        except CbsimError as err:
            raise ValueError(str(err)) from None
        return shape.name if shape.name in MODEL_NAMES else model

    @field_validator("engine")
    @classmethod
    def _engine_spelling(cls, engine: str) -> str:
        """A shipped engine's name in its own spelling (``vLLM`` is ``vllm``); paths as given."""
        from cbsim.cost.engine_profile import canonical_engine

        return canonical_engine(engine)

    @property
    def effective_kv_dtype(self) -> KvDType:
        """KV cache precision: as given (or resolved from the engine), else the weights' 16-bit
        precision (bf16 for fp8 and fp4 weights)."""
        if self.kv_dtype is not None:
            return self.kv_dtype
        return "fp16" if self.dtype == "fp16" else "bf16"


# --------------------------------------------------------------------------- scheduler


class Scheduler(StrictModel):
    """How a replica forms each iteration's batch.

    ``static``: request-level batching (a batch runs until all its requests finish).
    ``orca``: iteration-level batching with full-length KV reserved at admission: whole prompts
    beside the running decodes within ``max_batched_tokens``, or, with ``chunked_prefill``, the
    prompt that does not fit cut to what the budget leaves (TensorRT-LLM's chunked context).
    ``vllm``: paged KV, prefills first (whole prompts within ``max_batched_tokens``), preemption.
    ``sarathi``: chunked prefill, decodes first, within a per-iteration token budget
    ``max_batched_tokens`` (vLLM's ``--max-num-batched-tokens``); ``chunk_size`` is
    Sarathi-Serve's name for the same budget and may stand in for it.

    ``async_scheduling`` (every kind): the engine forms the batch of step n+1 while step n runs
    (vLLM's ``--async-scheduling``, on by default since late 2025; SGLang's and TensorRT-LLM's
    overlap schedulers), so its CPU work hides behind the GPU's, at a price: a request that
    reaches the scheduler while a step runs (or as one ends) missed the batch already formed and
    joins the step after next. An idle engine takes it at once. Off unless set (the shipped
    engine profiles were fitted without it: :mod:`cbsim.calibration.engines`).

    Each kind reads only some keys (:attr:`USED_KEYS`): a key the user sets that the kind does not
    read is an error naming the scheduler, never a setting silently ignored, and so is setting
    ``max_batched_tokens`` and ``chunk_size`` to different values under ``sarathi``. Only the
    user's keys count: an engine's defaults fill only keys the kind reads
    (:func:`apply_engine_defaults`). A key set to null is unset, so ``--set scheduler.kind=vllm
    --set scheduler.chunk_size=null`` runs a sarathi scenario under vllm. Under ``sarathi`` both
    budget keys hold the one budget: the user's, else the engine's, else 512.
    """

    kind: Literal["static", "orca", "vllm", "sarathi"] = "vllm"
    max_batch_size: BatchSize = 256
    max_batched_tokens: TokenCount = 8192
    block_size: BlockSize = 16
    chunk_size: TokenCount = 512
    watermark: Annotated[float, NotBool, Field(ge=0.0, lt=1.0)] = 0.01
    chunked_prefill: bool = False
    async_scheduling: bool = False

    # the keys each kind reads (``kind`` aside); a written scenario leaves the others out
    USED_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "static": ("max_batch_size", "max_batched_tokens", "block_size", "async_scheduling"),
        "orca": (
            "max_batch_size",
            "max_batched_tokens",
            "block_size",
            "chunked_prefill",
            "async_scheduling",
        ),
        "vllm": (
            "max_batch_size",
            "max_batched_tokens",
            "block_size",
            "watermark",
            "async_scheduling",
        ),
        "sarathi": (
            "max_batch_size",
            "max_batched_tokens",
            "block_size",
            "chunk_size",
            "watermark",
            "async_scheduling",
        ),
    }
    SARATHI_BUDGET: ClassVar[int] = 512  # sarathi's budget when neither user nor engine sets one

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None or k not in cls.model_fields}
        return data

    @model_validator(mode="after")
    def _keys_fit_the_kind(self) -> Scheduler:
        given = self.model_fields_set
        # without a kind the engine's defaults pick one: engine_updates checks the keys then
        if "kind" in given:
            unused = self.unused_keys(self.kind, given)
            if unused:
                key = unused[0]
                error = PydanticCustomError("unused_key", self.unused_key_message(self.kind, key))
                raise ValidationError.from_exception_data(
                    type(self).__name__,
                    [InitErrorDetails(type=error, loc=(key,), input=getattr(self, key))],
                )
        if self.kind == "sarathi":
            budget = self.sarathi_budget(self.chunk_size)
            self.__dict__["max_batched_tokens"] = self.__dict__["chunk_size"] = budget
        return self

    @model_serializer(mode="wrap")
    def _only_keys_the_kind_reads(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Defaults the kind does not read are left out, so a written scenario reads back;
        ``sarathi``'s budget is written once, so it reads back by the same name."""
        data = handler(self)
        used = self.USED_KEYS.get(self.kind)
        if used is None or not isinstance(data, dict):
            return data
        given = self.model_fields_set
        if self.kind == "sarathi":  # one budget, by the name the user gave it (as warnings say)
            alias = "chunk_size" in given and "max_batched_tokens" not in given
            data.pop("max_batched_tokens" if alias else "chunk_size", None)
        return {k: v for k, v in data.items() if k == "kind" or k in used or k in given}

    @classmethod
    def unused_keys(cls, kind: str, given: Iterable[str]) -> list[str]:
        """The keys among ``given`` that a ``kind`` scheduler does not read, in field order."""
        used = cls.USED_KEYS.get(kind)
        if used is None:
            return []
        given = set(given)
        return [k for k in cls.model_fields if k in given and k != "kind" and k not in used]

    @classmethod
    def unused_key_message(cls, kind: str, key: str, default_of: str | None = None) -> str:
        """Why ``key`` is an error under ``kind`` (``default_of``: the engine whose default the
        kind is, when the user did not pick it)."""
        reads = cls.USED_KEYS[kind]
        origin = ""
        if default_of is not None:
            origin = f" ({default_of}'s default; scheduler.kind picks another)"
        hint = ""
        if key == "chunk_size":
            hint = " (its token budget is max_batched_tokens)"
        elif key == "chunked_prefill" and kind == "sarathi":
            hint = " (it always chunks prompts)"
        return (
            f"not used by the {kind} scheduler{origin}, which reads {', '.join(reads[:-1])} and "
            f"{reads[-1]}{hint}: remove it (or set it to null)"
        )

    def sarathi_budget(self, fallback: int) -> int:
        """The token budget under ``sarathi``: ``max_batched_tokens`` if the user set it, else
        ``chunk_size`` if set, else ``fallback``. ValueError when the user set both, differently."""
        given = self.model_fields_set
        if "max_batched_tokens" in given:
            if "chunk_size" in given and self.chunk_size != self.max_batched_tokens:
                raise ValueError(
                    f"max_batched_tokens ({self.max_batched_tokens}) and chunk_size "
                    f"({self.chunk_size}) are both the sarathi scheduler's per-iteration token "
                    "budget and differ: set one of them (max_batched_tokens, as vLLM names it)"
                )
            return self.max_batched_tokens
        return self.chunk_size if "chunk_size" in given else fallback

    def engine_updates(self, engine: Mapping[str, Any], engine_name: str) -> dict[str, Any]:
        """The keys an engine's scheduler defaults (``engine``, named ``engine_name``) fill here:
        those the kind (the user's, else the engine's) reads and the user left unset; the token
        budget only from an engine of the kind's family (:meth:`engine_budget`), under
        ``sarathi`` into both budget keys. A key the user set that the engine's kind does not
        read is an error naming that kind."""
        given = self.model_fields_set
        if "kind" in given:
            kind = self.kind
        else:
            kind = engine.get("kind", self.kind)
            unused = self.unused_keys(kind, given)
            if unused:
                origin = f"engine {engine_name}" if "kind" in engine else "cbsim"
                raise CbsimError(
                    self.unused_key_message(kind, unused[0], origin),
                    field=f"scheduler.{unused[0]}",
                )
        used = self.USED_KEYS[kind]
        updates = {
            key: value
            for key, value in engine.items()
            if key not in given
            and (key == "kind" or key in used)
            and key not in ("max_batched_tokens", "chunk_size")
        }
        budget = self.engine_budget(kind, engine)
        if kind == "sarathi":
            try:
                budget = self.sarathi_budget(self.SARATHI_BUDGET if budget is None else budget)
            except ValueError as err:
                raise CbsimError(str(err), field="scheduler") from None
            updates["max_batched_tokens"] = updates["chunk_size"] = budget
        elif budget is not None and "max_batched_tokens" not in given:
            updates["max_batched_tokens"] = budget
        return {key: value for key, value in updates.items() if getattr(self, key) != value}

    @classmethod
    def engine_budget(cls, kind: str, engine: Mapping[str, Any]) -> int | None:
        """The token budget an engine's scheduler defaults (``engine``) give a ``kind``
        scheduler, or None. An engine's budget is made for its own scheduler, so it goes to the
        kinds of the same family: chunked prefill (``sarathi``; vLLM's 2048 on an A100) or whole
        prompts (``vllm``, ``orca``, ``static``). Older profiles named the sarathi budget
        ``chunk_size`` beside a ``max_batched_tokens`` for the other kinds."""
        if "chunk_size" in engine:  # an older profile: one budget per family
            return engine["chunk_size"] if kind == "sarathi" else engine.get("max_batched_tokens")
        chunked = engine.get("kind") == "sarathi"
        if (kind == "sarathi") != chunked:
            return None
        return engine.get("max_batched_tokens")


# --------------------------------------------------------------------------- speculative


class DraftModelProposer(StrictModel):
    """A small catalog model drafting k tokens with k sequential decode steps on the same GPUs."""

    kind: Literal["draft_model"] = "draft_model"
    model: str = "llama-3.2-1b"

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        return Cluster._known_model(model)


class EagleProposer(StrictModel):
    """An EAGLE-style one-layer head over the target's hidden state."""

    kind: Literal["eagle"]


class NgramProposer(StrictModel):
    """Prompt-lookup (n-gram) drafting: negligible cost, low and bursty acceptance."""

    kind: Literal["ngram"]


class MtpProposer(StrictModel):
    """Multi-token prediction (DeepSeek-V3/R1's MTP module, vLLM's ``deepseek_mtp``): ``layers``
    decoder layers of the target's own architecture (experts and latent attention included)
    over its hidden state and the next token's embedding, sharing its embedding and LM head,
    run once per draft token."""

    kind: Literal["mtp"]
    layers: Annotated[int, NotBool, Field(ge=1, le=4)] = 1


Proposer = Annotated[
    DraftModelProposer | EagleProposer | NgramProposer | MtpProposer,
    Field(discriminator="kind"),
    default_kind("draft_model"),
]


Probability = Annotated[float, NotBool, Field(ge=0.0, le=1.0)]
DraftLength = Annotated[int, NotBool, Field(ge=1, le=32)]


class IidAcceptance(StrictModel):
    """Each draft token is accepted with conditional probability ``alpha`` given its prefix was."""

    kind: Literal["iid"] = "iid"
    alpha: Probability = 0.7


class PositionalAcceptance(StrictModel):
    """Conditional acceptance rate per draft position (the last rate repeats for later positions)."""

    kind: Literal["positional"]
    rates: list[Probability] = Field(
        default_factory=lambda: [0.8, 0.75, 0.7, 0.65, 0.6], min_length=1
    )


class PerRequestAcceptance(StrictModel):
    """Each request draws its own conditional α from a Beta(mean, concentration); optionally α
    drifts by ``drift_per_1k_tokens`` for every thousand tokens of output (clamped to [0, 1])."""

    kind: Literal["per_request"]
    mean: Annotated[float, NotBool, Field(gt=0.0, lt=1.0)] = 0.7
    concentration: Concentration = 10.0
    drift_per_1k_tokens: Annotated[float, NotBool, Field(ge=-1.0, le=1.0)] = 0.0


class TraceAcceptance(StrictModel):
    """Replay per-position oracle acceptance lengths from a CSV (request_id, prompt_len, output_len,
    acc_len); its requests also supply the prompt and output lengths."""

    kind: Literal["trace"]
    path: str


class TokenLevelAcceptance(StrictModel):
    """Run the exact verifier on per-position draft/target distributions over a vocabulary, drawn
    from a seeded process whose ``divergence`` sets how far the draft is from the target."""

    kind: Literal["token_level"]
    vocab_size: Annotated[int, NotBool, Field(ge=2, le=100_000)] = 1000
    divergence: Divergence = 0.15  # α ≈ 0.70 at vocab 1000


Acceptance = Annotated[
    IidAcceptance
    | PositionalAcceptance
    | PerRequestAcceptance
    | TraceAcceptance
    | TokenLevelAcceptance,
    Field(discriminator="kind"),
    default_kind("iid"),
]


class FixedPolicy(StrictModel):
    """Always draft ``k`` tokens."""

    kind: Literal["fixed"] = "fixed"
    k: DraftLength = 4


class ThresholdPolicy(StrictModel):
    """k + 1 when a step's acceptance rate exceeds ``max_acceptance_rate``, k − 1 when it is below
    ``min_acceptance_rate``, within [1, k_max]."""

    kind: Literal["threshold"]
    k: DraftLength = 4
    k_max: DraftLength = 8
    min_acceptance_rate: Probability = 0.5
    max_acceptance_rate: Probability = 0.8
    adaptive: bool = True  # false: keep k fixed

    @model_validator(mode="after")
    def _ordered(self) -> ThresholdPolicy:
        if self.k > self.k_max:
            raise ValueError(f"k ({self.k}) must not exceed k_max ({self.k_max})")
        if self.min_acceptance_rate > self.max_acceptance_rate:
            raise ValueError("min_acceptance_rate must not exceed max_acceptance_rate")
        return self


class EwmaLookaheadPolicy(StrictModel):
    """EWMA of accepted tokens per step s ← α·accepted + (1 − α)·s; k = clamp(round half up of
    s + 1, k_min, k_max), recomputed every ``cooldown_steps`` steps."""

    kind: Literal["ewma_lookahead"]
    initial: DraftLength = 5
    k_min: DraftLength = 2
    k_max: DraftLength = 12
    alpha: Annotated[float, NotBool, Field(gt=0.0, le=1.0)] = 0.2
    cooldown_steps: StepCount = 4

    @model_validator(mode="after")
    def _ordered(self) -> EwmaLookaheadPolicy:
        if not self.k_min <= self.initial <= self.k_max:
            raise ValueError(
                f"need k_min <= initial <= k_max, got {self.k_min}, {self.initial}, {self.k_max}"
            )
        return self


class HeuristicPolicy(StrictModel):
    """k + 2 when every draft was accepted, else max(1, k − 1), capped at k_max."""

    kind: Literal["heuristic"]
    k: DraftLength = 4
    k_max: DraftLength = 8

    @model_validator(mode="after")
    def _ordered(self) -> HeuristicPolicy:
        if self.k > self.k_max:
            raise ValueError(f"k ({self.k}) must not exceed k_max ({self.k_max})")
        return self


class BatchTablePolicy(StrictModel):
    """k from a table of batch-size ranges [[min_batch, max_batch, k], ...]; k = 0 turns speculation
    off; batch sizes outside every range use k = 0."""

    kind: Literal["batch_table"]
    table: list[tuple[BatchSize, BatchSize, Annotated[int, Field(ge=0, le=32)]]] = Field(
        default_factory=lambda: [(1, 8, 4), (9, 32, 2), (33, 100_000, 0)], min_length=1
    )

    @model_validator(mode="after")
    def _ranges(self) -> BatchTablePolicy:
        spans = sorted(self.table)
        for low, high, _ in spans:
            if low > high:
                raise ValueError(f"range [{low}, {high}]: min_batch must not exceed max_batch")
        for (_, high, _), (low, _, _) in itertools.pairwise(spans):
            if low <= high:
                raise ValueError(f"ranges overlap at batch size {low}")
        return self


class GoodputPolicy(StrictModel):
    """Each iteration, the k in [0, k_max] maximising expected emitted tokens per second of the
    predicted step time (draft + verify at this batch), from each request's running acceptance
    estimate; per batch (one k for all) or per request."""

    kind: Literal["goodput"]
    k_max: DraftLength = 8
    per_request: bool = False


KPolicy = Annotated[
    FixedPolicy
    | ThresholdPolicy
    | EwmaLookaheadPolicy
    | HeuristicPolicy
    | BatchTablePolicy
    | GoodputPolicy,
    Field(discriminator="kind"),
    default_kind("fixed"),
]


class Speculative(StrictModel):
    """Speculative decoding: a proposer drafts, the target verifies k + 1 tokens in one forward."""

    enabled: bool = False
    proposer: Proposer = Field(default_factory=DraftModelProposer)
    acceptance: Acceptance = Field(default_factory=IidAcceptance)
    policy: KPolicy = Field(default_factory=FixedPolicy)


# --------------------------------------------------------------------------- slo and scenario


class Slo(StrictModel):
    """Latency targets a request must meet to count towards goodput."""

    ttft_s: Seconds | None = 2.0
    tpot_s: Seconds | None = 0.1
    e2e_s: Seconds | None = None


class Output(StrictModel):
    """How results are summarised: the width of the timeseries windows."""

    timeseries_window_s: WindowSeconds = 10.0


class Scenario(StrictModel):
    """One simulation, fully specified.

    The run drains: it ends when every admitted request has finished, unless ``horizon_s`` stops
    it earlier (requests still in the system are then reported unfinished). ``fast_forward``
    advances runs of pure-decode iterations in one event (identical results, see
    :mod:`cbsim.decode_run`); turn it off to step every iteration.
    """

    name: str = "scenario"
    seed: Seed = 0
    workload: Workload
    cluster: Cluster = Field(default_factory=Cluster)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    speculative: Speculative = Field(default_factory=Speculative)
    slo: Slo = Field(default_factory=Slo)
    output: Output = Field(default_factory=Output)
    horizon_s: Seconds | None = None
    fast_forward: bool = True

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not name or any(c in name for c in "/\\\0") or name in {".", ".."}:
            raise ValueError("name must be a non-empty string without path separators")
        return name

    def missing_lengths(self) -> list[str]:
        """Length fields the workload lacks (lengths can come from a trace or acceptance trace)."""
        wl = self.workload
        from_acceptance_trace = self.speculative.enabled and isinstance(
            self.speculative.acceptance, TraceAcceptance
        )
        if wl.trace is not None or wl.sessions is not None or from_acceptance_trace:
            return []
        names = ["prompt_tokens", "output_tokens"] if wl.prompt_pool is None else ["output_tokens"]
        return [n for n in names if getattr(wl, n) is None]

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as plain data (round-trips through :func:`load_scenario`).

        A pooled cluster (``disaggregation`` or ``pools``) has no ``replicas`` of its own, and
        each pool is written with every setting its replicas ran with (:func:`_resolved_pools`),
        since the cluster's resolved keys, read back as set, would otherwise reach the pools."""
        data = self.model_dump(mode="json")
        if self.cluster.pooled:
            _resolved_pools(self, data["cluster"])
        return data


def _resolved_pools(scenario: Scenario, cluster: dict[str, Any]) -> None:
    """Write into ``cluster`` (the dumped cluster of a pooled ``scenario``) each pool as its
    replicas run it: every pool key from the pool's resolved cluster, its whole resolved
    scheduler, no cluster-wide ``replicas``."""
    from cbsim.pools import pool_plans

    cluster.pop("replicas", None)
    plans = pool_plans(scenario)
    pools = [_resolved_pool(plan.scenario) for plan in plans]
    if scenario.cluster.disaggregation is not None:
        cluster["disaggregation"]["prefill"], cluster["disaggregation"]["decode"] = pools
    else:
        cluster["pools"] = pools


def _resolved_pool(pool_scenario: Scenario) -> dict[str, Any]:
    """A pool's keys as its replicas run them (the scenario :func:`cbsim.pools.pool_plans`
    gives them)."""
    resolved = pool_scenario.cluster.model_dump(mode="json")
    keys = {name: resolved[name] for name in Pool.model_fields if name != "scheduler"}
    keys["scheduler"] = pool_scenario.scheduler.model_dump(mode="json")
    return keys


# --------------------------------------------------------------------------- loading


def _format_loc(loc: Sequence[int | str]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(str(item))
    return "".join(parts)


TAGGED_SECTIONS = {
    "arrival", "prompt_tokens", "output_tokens", "proposer", "acceptance", "policy", "system_tokens",
    "question_tokens",
}  # fmt: skip


def _discriminator_tags() -> set[str]:
    return {
        "poisson", "gamma", "offline", "trace", "closed_loop", "stages", "fixed", "uniform", "lognormal", "empirical",
        "draft_model", "eagle", "ngram", "iid", "positional", "per_request", "token_level",
        "threshold", "ewma_lookahead", "heuristic", "batch_table", "goodput",
    }  # fmt: skip


def validation_problem(err: ValidationError) -> CbsimError:
    """A validation error of part of a scenario (a pool's keys) as one clear line; its field path
    is relative to that part (see :meth:`CbsimError.located`)."""
    return _error_from_validation(err, None)


def _error_from_validation(err: ValidationError, source: str | None) -> CbsimError:
    """The first validation problem as one clear line (field path without union tags)."""
    first = err.errors()[0]
    tags = _discriminator_tags()
    loc: list[int | str] = []
    previous: int | str | None = None
    for part in first["loc"]:
        raw_previous, previous = previous, part
        if isinstance(part, str) and ("function-" in part or "[" in part):
            continue  # pydantic's names for validator wrappers
        if isinstance(part, str) and part in tags and raw_previous in TAGGED_SECTIONS:
            continue  # the union variant's tag, e.g. "poisson" in arrival.poisson.rate
        loc.append(part)
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key (check the spelling; unknown keys are errors)"
    elif first["type"] == "missing":
        message = "required field is missing"
    message = message.removeprefix("Value error, ")
    ctx = first.get("ctx") or {}
    if first["type"] == "union_tag_invalid":
        message = f"unknown kind {ctx.get('tag')!r}; known: {ctx.get('expected_tags')}"
    elif first["type"] == "union_tag_not_found":
        message = "missing key 'kind' (it picks which variant this is)"
    elif first["type"] == "literal_error" and loc and loc[-1] in ("kind", "router", "dtype"):
        message = f"unknown {loc[-1]} {first.get('input')!r}; known: {ctx.get('expected')}"
    elif first["type"] == "int_parsing_size" or (
        first["type"] == "float_type" and isinstance(first.get("input"), int)
    ):
        message = "number too large to be a physical quantity here"
    more = len(err.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return CbsimError(message, source=source, field=_format_loc(loc) or None)


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value``; the value is parsed as YAML (numbers, booleans, lists)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise CbsimError(f"override {text!r} is not of the form dotted.key=value", field="--set")
    try:
        value = parse_yaml(raw, None) if raw.strip() else ""
    except CbsimError as err:
        if not err.message.startswith("invalid YAML"):
            raise CbsimError(err.message, field=f"--set {key.strip()}") from None
        value = raw  # not YAML: the text itself
    return key.strip(), value


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with each dotted key set, creating intermediate mappings as needed."""
    result = copy.deepcopy(data)
    for dotted, value in overrides.items():
        node = result
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise CbsimError(
                    f"cannot set {dotted!r}: {'.'.join(parts[: i + 1])} is not a mapping",
                    field=dotted,
                )
            node = child
        node[parts[-1]] = value
    return result


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of a YAML file, or a located error (see :mod:`cbsim.documents`:
    UTF-8 only, no duplicate keys, bounded nesting and alias expansion)."""
    source = str(path)
    data = parse_yaml(read_text_file(path), source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CbsimError("the top level must be a mapping of keys", source=source)
    return data


def load_scenario(
    path_or_dict: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    seed: int | None = None,
    written: bool = False,
) -> Scenario:
    """Read and validate a scenario from a YAML path or a mapping.

    ``overrides`` are dotted keys (``{"scheduler.kind": "sarathi"}`` or ``["scheduler.kind=sarathi"]``)
    applied before validation; ``seed`` replaces the scenario's seed. ``written``: the scenario a
    result folder holds, possibly written by an older cbsim (see :func:`_migrate_written`).
    """
    source: str | None = None
    if isinstance(path_or_dict, Mapping):
        data = copy.deepcopy(dict(path_or_dict))
    else:
        path = Path(path_or_dict)
        source = str(path)
        data = _resolve_relative_paths(read_yaml(path), path.parent)
    if written:
        data = _migrate_written(data)
    if overrides:
        pairs: dict[str, Any] = (
            dict(parse_override(o) for o in overrides)
            if not isinstance(overrides, Mapping)
            else dict(overrides)
        )
        data = apply_overrides(data, pairs)
    if seed is not None:
        data["seed"] = seed
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as err:
        raise _error_from_validation(err, source) from None
    _check_calibration(scenario.cluster, source)
    try:
        scenario = apply_engine_defaults(scenario)
    except CbsimError as err:
        raise err.located(source=source) from None
    _check_feasible(scenario, source)
    return scenario


def _migrate_written(data: dict[str, Any]) -> dict[str, Any]:
    """A result folder's resolved scenario as this cbsim reads it. Older ones wrote every
    scheduler key, read or not by the kind, and ran ``sarathi`` on ``chunk_size`` alone: the keys
    the kind does not read are dropped and a sarathi ``max_batched_tokens`` gives way to its
    ``chunk_size`` (the budget that run used)."""
    sections = [data.get("scheduler")]
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        _migrate_written_pools(cluster)
        split = cluster.get("disaggregation")
        if isinstance(split, dict):
            sections += [pool.get("scheduler") for pool in split.values() if isinstance(pool, dict)]
        pools = cluster.get("pools")
        if isinstance(pools, list):
            sections += [pool.get("scheduler") for pool in pools if isinstance(pool, dict)]
    for section in sections:
        if not isinstance(section, dict) or section.get("kind") not in Scheduler.USED_KEYS:
            continue
        kind = section["kind"]
        if kind == "sarathi" and "chunk_size" in section:
            section.pop("max_batched_tokens", None)
        for key in Scheduler.unused_keys(kind, list(section)):
            section.pop(key)
    return data


def _written_pools(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """The pool mappings of a written cluster (disaggregated or a mixed fleet)."""
    split = cluster.get("disaggregation")
    pools = [split.get("prefill"), split.get("decode")] if isinstance(split, dict) else []
    if isinstance(cluster.get("pools"), list):
        pools += cluster["pools"]
    return [pool for pool in pools if isinstance(pool, dict)]


def _migrate_written_pools(cluster: dict[str, Any]) -> None:
    """Older cbsims wrote a pooled cluster with ``replicas`` beside its pools (which reads as an
    error) and every pool key it left to the cluster as null: the cluster's ``replicas`` is
    dropped and a null pool key left to the cluster again. (This cbsim writes no ``replicas``
    there, and every pool key resolved: :meth:`Scenario.to_dict`.)"""
    pools = _written_pools(cluster)
    if not pools or "replicas" not in cluster:
        return
    del cluster["replicas"]
    for pool in pools:
        for key in [k for k, v in pool.items() if v is None]:
            del pool[key]


def _keeping_fields_set(model: ModelT, updates: Mapping[str, Any]) -> ModelT:
    """A copy with ``updates`` applied that still reports only the user's keys as set, so a dump
    with ``exclude_unset`` (what sweeps and capacity searches vary) leaves resolved defaults out."""
    if not updates:
        return model
    copied = model.model_copy(update=dict(updates))
    copied.__pydantic_fields_set__ = set(model.model_fields_set)
    return copied


def apply_engine_defaults(scenario: Scenario) -> Scenario:
    """The scenario with every key it leaves unset filled from its engine's defaults for its GPU:
    scheduler kind, token budget, batch cap, block size and chunked prefill (only the keys the
    kind reads: :meth:`Scheduler.engine_updates`), the KV-cache precision for its weights, the GPU
    memory the engine takes. Keys the scenario sets win; one the engine's scheduler does not read
    is an error. Idempotent; the returned scenario still reports only the user's keys as set (see
    :func:`_keeping_fields_set`)."""
    from cbsim.cost.engine_profile import load_engine_profile
    from cbsim.cost.roofline import default_kv_dtype

    cluster = scenario.cluster
    profile = load_engine_profile(cluster.engine)
    defaults = profile.defaults_for(cluster.gpu)
    scheduler_updates = scenario.scheduler.engine_updates(
        defaults.scheduler.values(), cluster.engine
    )
    cluster_updates: dict[str, Any] = {}
    if cluster.kv_dtype is None:
        cluster_updates["kv_dtype"] = default_kv_dtype(profile, cluster.gpu, cluster.dtype)
    if (
        "gpu_memory_utilization" not in cluster.model_fields_set
        and defaults.memory_fraction is not None
    ):
        cluster_updates["gpu_memory_utilization"] = _memory_utilization(
            cluster, defaults.memory_fraction, defaults.memory_basis or "total"
        )
    if not scheduler_updates and not cluster_updates:
        return scenario
    return _keeping_fields_set(
        scenario,
        {
            "scheduler": _keeping_fields_set(scenario.scheduler, scheduler_updates),
            "cluster": _keeping_fields_set(cluster, cluster_updates),
        },
    )


def _memory_utilization(cluster: Cluster, fraction: float, basis: str) -> float:
    """``gpu_memory_utilization`` (a fraction of all GPU memory for weights, activations and KV
    cache) equivalent to an engine taking ``fraction`` of ``basis`` memory: all of it, or what is
    free after weights and activations (TensorRT-LLM's ``free_gpu_memory_fraction``)."""
    if basis == "total":
        return fraction
    from cbsim.hardware import get_gpu
    from cbsim.kvcache import kv_capacity_bytes
    from cbsim.models import get_model

    gpu = get_gpu(cluster.gpu)
    free = kv_capacity_bytes(
        get_model(cluster.model), gpu, cluster.tp, cluster.dtype, 1.0, cluster.dp, cluster.pp
    )
    if free <= 0:
        return 1.0  # the weights do not fit: the feasibility check says so
    used = gpu.memory_bytes - free
    return min(1.0, (used + fraction * free) / gpu.memory_bytes)


# Fields that may hold a file path; a relative path is taken relative to the scenario file when
# the file exists there (so a scenario and its trace can travel together), else as given.
PATH_FIELDS = (
    ("workload", "trace", "path"),
    ("workload", "prompt_tokens", "trace"),
    ("workload", "output_tokens", "trace"),
    ("cluster", "model"),
    ("speculative", "acceptance", "path"),
    ("speculative", "proposer", "model"),
)


def _resolve_relative_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    for keys in PATH_FIELDS:
        node: Any = data
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        value = node.get(keys[-1])
        if isinstance(value, str) and not Path(value).is_absolute():
            candidate = base / value
            if candidate.exists():
                node[keys[-1]] = str(candidate)
    return data


def _check_feasible(scenario: Scenario, source: str | None) -> None:
    """Cross-field checks: the model fits in GPU memory, traces exist and have the columns, etc."""
    from cbsim.traces import load_trace

    workload = scenario.workload
    missing = scenario.missing_lengths()
    if missing:
        raise CbsimError(
            f"workload needs {' and '.join(missing)} (or workload.trace to take lengths from a real log)",
            source=source,
            field=f"workload.{missing[0]}",
        )
    acceptance = scenario.speculative.acceptance
    if scenario.speculative.enabled and isinstance(acceptance, TraceAcceptance):
        from cbsim.speculative.acceptance_trace import load_acceptance_trace

        load_acceptance_trace(acceptance.path, source=source)
    _check_proposer(scenario, source)
    if workload.trace is not None:
        load_trace(workload.trace.path, source=source, field="workload.trace.path")
    for name in ("prompt_tokens", "output_tokens"):
        spec = getattr(workload, name)
        if isinstance(spec, EmpiricalLength):
            load_trace(spec.trace, source=source, field=f"workload.{name}.trace")

    if not math.isfinite(scenario.workload.duration_s or 0.0):
        raise CbsimError("must be finite", source=source, field="workload.duration_s")
    _check_pools_fit(scenario, source)
    from cbsim.workload import check_workload_size

    check_workload_size(scenario, source)


def _check_proposer(scenario: Scenario, source: str | None) -> None:
    """A speculative proposer the model can have (an MTP module of a local-attention model is
    not modelled)."""
    if not scenario.speculative.enabled or scenario.speculative.proposer.kind != "mtp":
        return
    from cbsim.models import get_model
    from cbsim.speculative.proposers import mtp_problem

    problem = mtp_problem(get_model(scenario.cluster.model))
    if problem:
        raise CbsimError(problem, source=source, field="speculative.proposer.kind")


def _check_pools_fit(scenario: Scenario, source: str | None) -> None:
    """Every pool's replicas fit their GPUs (a plain cluster is one pool), and the GPUs in all
    are within bounds."""
    from cbsim.pools import pool_plans

    try:
        plans = pool_plans(scenario)
    except CbsimError as err:
        raise err.located(source=source) from None
    total_gpus = sum(plan.gpus for plan in plans)
    if not TOTAL_GPUS.contains(total_gpus):
        shapes = ", ".join(
            f"{plan.replicas:,} replicas of {plan.scenario.cluster.gpus_per_replica} GPUs"
            for plan in plans
        )
        raise CbsimError(
            f"{shapes} are {total_gpus:,} GPUs; GPUs in total {TOTAL_GPUS.violation(total_gpus)}",
            source=source,
            field="cluster.replicas" if len(plans) == 1 else "cluster",
        )
    for plan in plans:
        prefix = "cluster" if plan.field == "cluster" else plan.field
        cluster, field = plan.scenario.cluster, _pool_key_field(scenario, prefix)
        if plan.field != "cluster":  # (a plain cluster's: _check_calibration)
            _check_precision_and_profile(cluster, source, field)
        _check_heads_split(cluster, source, field("tp"))
        _check_cluster_fits(cluster, source, prefix)


def _pool_key_field(scenario: Scenario, prefix: str) -> Callable[[str], str]:
    """Where the user set each key of the pool at ``prefix`` (``cluster`` for a plain
    cluster): the pool's own key if it sets it, else the cluster's."""
    cluster = scenario.cluster
    pool: Pool | None = None
    if prefix.startswith("cluster.pools[") and cluster.pools is not None:
        pool = cluster.pools[int(prefix.removeprefix("cluster.pools[").removesuffix("]"))]
    elif prefix.startswith("cluster.disaggregation.") and cluster.disaggregation is not None:
        pool = getattr(cluster.disaggregation, prefix.rsplit(".", 1)[1])

    def field(key: str) -> str:
        if pool is not None and key in pool.model_fields_set:
            return f"{prefix}.{key}"
        return f"cluster.{key}"

    return field


def _check_heads_split(cluster: Cluster, source: str | None, field: str) -> None:
    """``tp`` shares the model's attention heads as the engines shard them
    (:meth:`~cbsim.models.ModelShape.splits_attention`)."""
    from cbsim.models import get_model

    problem = get_model(cluster.model).attention_split_problem(cluster.tp)
    if problem:
        raise CbsimError(f"{problem}, or add replicas, pp or dp", source=source, field=field)


def _check_cluster_fits(cluster: Cluster, source: str | None, prefix: str) -> None:
    """One pool's layout fits its GPUs' nodes and memory (``prefix``: where its keys are)."""
    from cbsim.hardware import get_gpu
    from cbsim.kvcache import kv_capacity_bytes
    from cbsim.models import get_model

    gpu = get_gpu(cluster.gpu)
    model = get_model(cluster.model)
    node = gpu.gpus_per_node
    if cluster.tp > node and cluster.tp % node:
        raise CbsimError(
            f"tp {cluster.tp} exceeds the {node} GPUs of one {gpu.name} node without filling "
            f"whole nodes (a group across nodes takes a multiple of {node})",
            source=source,
            field=f"{prefix}.tp",
        )
    group = cluster.tp * cluster.dp
    if group > node and group % node:
        raise CbsimError(
            f"tp x dp = {group} exceeds the {node} GPUs of one {gpu.name} node without filling "
            f"whole nodes (a group across nodes takes a multiple of {node})",
            source=source,
            field=f"{prefix}.dp",
        )
    capacity = kv_capacity_bytes(
        model,
        gpu,
        cluster.tp,
        cluster.dtype,
        cluster.gpu_memory_utilization,
        cluster.dp,
        cluster.pp,
    )
    if capacity <= 0:
        raise CbsimError(
            f"{model.name} ({cluster.dtype}) does not fit in {gpu.name} memory at tp={cluster.tp} "
            f"with gpu_memory_utilization={cluster.gpu_memory_utilization}: weights need "
            f"{-capacity / 2**30:.1f} GiB more per GPU; raise cluster.tp or cluster.pp"
            f"{'' if cluster.dtype in ('fp8', 'fp4', 'mxfp4') else ', or use fp8'}",
            source=source,
            field=f"{prefix}.tp",
        )


def _check_calibration(cluster: Cluster, source: str | None) -> None:
    """The serving engine's profile and the calibration profile exist and parse, and the GPU can
    run the weights' precision."""
    from cbsim.cost.engine_profile import load_engine_profile

    try:
        load_engine_profile(cluster.engine)
    except CbsimError as err:
        raise err.located(source=source, field="cluster.engine") from None
    if not cluster.pooled:  # (each pool's GPU, precision and profile: _check_pools_fit)
        _check_precision_and_profile(cluster, source, "cluster.{}".format)


def _check_precision_and_profile(
    cluster: Cluster, source: str | None, field: Callable[[str], str]
) -> None:
    """One pool's GPU runs its weights' precision and has the calibration profile it names
    (``field``: where each key is set)."""
    from cbsim.cost.engine_profile import load_engine_profile
    from cbsim.cost.profile import DEFAULT_PROFILE, load_profile
    from cbsim.hardware import get_gpu

    try:
        get_gpu(cluster.gpu).peak_flops(cluster.dtype)
    except CbsimError as err:
        where = field("dtype")
        if where == "cluster.dtype" and field("gpu") != "cluster.gpu":
            where = field("gpu")  # the pool's GPU takes the cluster's precision
        raise CbsimError(err.message, source=source, field=where) from None
    name = cluster.calibration or DEFAULT_PROFILE
    if name == DEFAULT_PROFILE:
        name = load_engine_profile(cluster.engine).kernel_profile(cluster.gpu) or DEFAULT_PROFILE
    try:
        load_profile(cluster.gpu, name)
    except CbsimError as err:
        raise err.located(source=source, field=field("calibration")) from None
