"""Serving-engine profiles: everything about vLLM, SGLang or TensorRT-LLM that is not the model.

The same model on the same GPU serves at different speeds under different engines, for three
reasons, and an engine profile holds all three:

* **Kernels.** Each engine ships its own GEMM, attention and all-reduce kernels. ``kernels`` names,
  per GPU, the calibration profile fitted to *that engine's* measured kernel tables; on a GPU not
  listed, ``kernel_transfer`` scales the GPU's default (vLLM-fitted) profile by the engine/vLLM
  ratio measured on another GPU, shape by shape; without it the GPU's default profile is used.
  ``allreduce`` names, per GPU, a profile whose all-reduce stands in for the engine's own where
  its kernel profile has none of its custom kernel (vLLM's one-shot/two-shot all-reduce, the
  same lineage as SGLang's, which was measured). ``custom_allreduce`` prices the engine's own
  one-shot/two-shot all-reduce from its mechanism on the GPUs it lists, which have no measured
  table of it (A100, B200: :mod:`cbsim.cost.custom_allreduce`). ``fused_elementwise``: the
  engine fuses each residual add into the RMSNorm after it and the SwiGLU activation into one
  kernel (vLLM, SGLang and TensorRT-LLM do), so a layer's element-wise work is four memory-bound
  kernels (two add+norm, activation, rotary) streaming at the GPU's calibrated memory
  efficiency, instead of the unfused operators Vidur timed.
* **CPU work per step.** Beyond its kernels an engine step pays for scheduling, preparing inputs,
  sampling and handing outputs back. Modern engines hide most of it behind the GPU (vLLM V1's async
  scheduling, SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler) and replay decode
  steps from CUDA graphs. :class:`StepOverhead` models a step as
  ``max(gpu, cpu) + serial`` where they overlap and ``gpu + cpu + serial`` where they do not:
  ``cpu = cpu_s + cpu_per_request_s · B + cpu_per_token_s · N`` for B requests and N new tokens,
  ``serial = serial_s + serial_per_request_s · B + serial_per_layer_s · L`` the part that never
  hides, where L is the decoder layers one GPU runs: a step launches a fixed number of kernels
  per layer, and each kernel boundary costs time the kernel tables (timing kernels alone) do
  not see — a launch, or a CUDA graph's node-to-node gap, and the ramp of the next kernel — so
  this part of a step grows with the model's depth, not with the GPU's speed.
* **What a client sees.** A benchmark client's time to first token includes the HTTP front end,
  tokenisation and the first token's way back. :class:`Frontend` holds a per-request and a
  per-prompt-token delay on the way in, and a per-output-token service time of the process that
  detokenises and streams tokens back (a queue: it only adds latency once it falls behind).

An engine profile also carries the engine's **defaults** (scheduler kind and token budget, KV
block size, the KV-cache precision it picks for an fp8 checkpoint, how much GPU memory it takes),
which fill in whatever a scenario leaves unset, and the **range** of batch sizes its overhead was
fitted on: a simulation far outside it says so in its summary. ``engine: none`` is the bare
roofline: no overhead, no front end, no defaults.

Profiles are JSON (``schema_version`` 2), shipped in ``cbsim/catalog/data/profiles/engines/`` and written by
``cbsim calibrate e2e``; a path to such a file works wherever an engine name does. Version-1 files
(``overhead_s``, ``overhead_per_request_s``, ``overhead_per_token_s``, not overlapped) still load.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cbsim.common import output_folders as outputs
from cbsim.common.documents import decode_utf8, parse_json
from cbsim.common.errors import CbsimError, canonical_name, did_you_mean
from cbsim.common.limits import BatchSize, BlockSize, EngineSeconds, TokenCount
from cbsim.cost.custom_allreduce import CustomAllreduce
from cbsim.cost.engine_version import (
    Release,
    deep_merge,
    in_range,
    parse_release,
    split_engine,
)
from cbsim.cost.memory_rule import MemoryRule
from cbsim.cost.profile import Measured as KernelMeasured

SCHEMA_VERSION = 2
BARE = "none"
ENGINE_DIR = "engines"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepOverhead(_Strict):
    """CPU-side time of one engine step and how much of it the GPU's work hides."""

    cpu_s: EngineSeconds = 0.0
    cpu_per_request_s: EngineSeconds = 0.0
    cpu_per_token_s: EngineSeconds = 0.0
    overlap: bool = False
    serial_s: EngineSeconds = 0.0
    serial_per_request_s: EngineSeconds = 0.0
    serial_per_layer_s: EngineSeconds = 0.0

    def for_layers(self, layers: int) -> StepOverhead:
        """These terms for a model whose GPUs each run ``layers`` decoder layers per step: the
        per-layer part folded into ``serial_s`` (what :meth:`step_time` adds)."""
        if not self.serial_per_layer_s:
            return self
        return self.model_copy(
            update={
                "serial_s": self.serial_s + self.serial_per_layer_s * layers,
                "serial_per_layer_s": 0.0,
            }
        )

    def cpu_time(self, requests: int, tokens: int) -> float:
        return self.cpu_s + self.cpu_per_request_s * requests + self.cpu_per_token_s * tokens

    def serial_time(self, requests: int) -> float:
        return self.serial_s + self.serial_per_request_s * requests

    def step_time(self, gpu_s: float, requests: int, tokens: int) -> float:
        """Seconds of a step whose kernels take ``gpu_s`` for B requests and N new tokens (the
        per-layer part counts once folded in by :meth:`for_layers`)."""
        cpu = self.cpu_time(requests, tokens)
        serial = self.serial_time(requests)
        if self.overlap:
            return (gpu_s if gpu_s > cpu else cpu) + serial
        return gpu_s + cpu + serial

    def added_time(self, gpu_s: float, requests: int, tokens: int) -> float:
        """What the step costs beyond its kernels."""
        return self.step_time(gpu_s, requests, tokens) - gpu_s

    @property
    def is_zero(self) -> bool:
        return not any(
            (
                self.cpu_s,
                self.cpu_per_request_s,
                self.cpu_per_token_s,
                self.serial_s,
                self.serial_per_request_s,
                self.serial_per_layer_s,
            )
        )


class Frontend(_Strict):
    """The API server between a client and the engine (one per replica).

    On the way in a request takes ``request_s + prompt_token_s · P`` (HTTP, parsing, tokenisation,
    hand-off to the scheduler) before the engine sees it. On the way out every token passes
    through one process that spends
    ``output_token_s`` on it (detokenisation, streaming): the tokens of an engine step are
    delivered when that process has handled them and everything before them. Handling a request
    also takes a random extra time, exponential with mean ``request_jitter_s`` (network and
    scheduling noise), drawn from the scenario's ``frontend`` stream.
    """

    request_s: EngineSeconds = 0.0
    prompt_token_s: EngineSeconds = 0.0
    output_token_s: EngineSeconds = 0.0
    request_jitter_s: EngineSeconds = 0.0

    def request_delay(self, prompt_tokens: int) -> float:
        return self.request_s + self.prompt_token_s * prompt_tokens

    @property
    def delays_requests(self) -> bool:
        return bool(self.request_s or self.prompt_token_s or self.request_jitter_s)

    @property
    def is_zero(self) -> bool:
        return not (self.delays_requests or self.output_token_s)


SchedulerKind = Literal["static", "orca", "prefill_first", "sarathi"]
KvDtype = Literal["bf16", "fp16", "fp8"]


class SchedulerDefaults(_Strict):
    """Scheduler settings the engine uses unless a scenario sets them (names as in the scenario).

    ``max_batched_tokens`` is the engine's per-step token budget, given to the kinds of its own
    scheduler's family (:meth:`cbsim.schema.scheduler.Scheduler.engine_budget`); ``chunk_size`` is an older
    profile's name for a sarathi budget. ``chunked_prefill`` (orca): a prompt that does not fit
    beside the running decodes is cut to what the budget leaves (TensorRT-LLM's chunked context).
    ``async_scheduling``: the engine forms the next step's batch while the current one runs
    (vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap schedulers).
    """

    kind: SchedulerKind | None = None
    max_batch_size: BatchSize | None = None
    max_batched_tokens: TokenCount | None = None
    chunk_size: TokenCount | None = None
    block_size: BlockSize | None = None
    watermark: float | None = Field(default=None, ge=0.0, lt=1.0)
    chunked_prefill: bool | None = None
    async_scheduling: bool | None = None

    @field_validator("kind", mode="before")
    @classmethod
    def _old_kind_name(cls, kind: Any) -> Any:
        """A profile written before the rename names the prefill-first scheduler ``vllm``."""
        return "prefill_first" if kind == "vllm" else kind

    def values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class EngineDefaults(_Strict):
    """What the engine does when the scenario does not say.

    ``kv_dtype``: the KV-cache precision per weight precision (an fp8 checkpoint keeps a bf16 cache
    under vLLM and SGLang unless told otherwise; TensorRT-LLM's fp8 checkpoints quantise it too).
    ``memory_fraction`` of ``memory_basis``: ``total`` GPU memory for weights + KV cache
    (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``) or of the memory
    ``free`` after weights and activations (TensorRT-LLM's ``free_gpu_memory_fraction``).
    ``prefix_caching``: whether the engine reuses cached prompt prefixes by default (vLLM V1's
    automatic prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse).
    """

    scheduler: SchedulerDefaults = Field(default_factory=SchedulerDefaults)
    kv_dtype: dict[str, KvDtype] = Field(default_factory=dict)
    memory_fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    memory_basis: Literal["total", "free"] | None = None  # None: total
    prefix_caching: bool | None = None  # None: off

    def merged(self, override: EngineDefaults | None) -> EngineDefaults:
        """These defaults with ``override``'s set values on top (a GPU's own defaults)."""
        if override is None:
            return self
        scheduler = {**self.scheduler.values(), **override.scheduler.values()}
        return EngineDefaults(
            scheduler=SchedulerDefaults(**scheduler),
            kv_dtype={**self.kv_dtype, **override.kv_dtype},
            memory_fraction=(
                override.memory_fraction
                if override.memory_fraction is not None
                else self.memory_fraction
            ),
            memory_basis=override.memory_basis or self.memory_basis,
            prefix_caching=(
                override.prefix_caching
                if override.prefix_caching is not None
                else self.prefix_caching
            ),
        )


class FittedRange(_Strict):
    """Where the overhead terms were fitted: batch sizes (requests per step) and GPUs/models."""

    batch_size: tuple[BatchSize, BatchSize]
    gpus: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)

    @field_validator("batch_size")
    @classmethod
    def _ordered(cls, batch_size: tuple[int, int]) -> tuple[int, int]:
        if batch_size[0] > batch_size[1]:
            raise ValueError(f"the smallest batch {batch_size[0]} is above the largest")
        return batch_size


class KernelTransfer(_Strict):
    """How to price an engine's kernels on a GPU it has no tables for: that GPU's default profile
    (fitted on vLLM's kernels) times, shape by shape, the engine's time over vLLM's on ``gpu``,
    where both were measured (``profile`` against ``reference``). Held out on H200, this predicts
    an engine's kernels better than either the GPU's vLLM profile or the engine's own profile
    moved to the GPU's spec sheet (``docs/calibration.md``)."""

    gpu: str
    profile: str
    reference: str = "aiconfigurator-vllm"


class Measured(KernelMeasured):
    """A calibration record (source, rows, held-out error) that also says how the held-out error
    was measured (``leave-one-model-out``, ...)."""

    holdout: str = ""


class EngineVersion(_Strict):
    """How the releases from ``since`` up to (not including) ``until`` differ from the profile's
    base (its newest release): ``changes``, a partial profile (same keys, mappings merged key by
    key) written over the base, or ``profile``, another shipped profile that models those
    releases (vLLM's V0 engine). ``note`` says what changed and where that is documented."""

    since: str
    until: str | None = None
    note: str = ""
    profile: str | None = None
    changes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("since", "until")
    @classmethod
    def _release(cls, release: str | None) -> str | None:
        if release is not None:
            try:
                parse_release(release)
            except CbsimError as err:
                raise ValueError(err.message) from None
        return release

    def covers(self, release: Release) -> bool:
        return in_range(release, self.since, self.until)


class EngineProfile(_Strict):
    """One serving engine: kernels per GPU, step overhead, front end, defaults, fitted range,
    and how its older releases differ (:mod:`cbsim.cost.engine_version`)."""

    schema_version: Literal[2] = 2
    engine: str
    description: str = ""
    version: str = ""
    kernels: dict[str, str] = Field(default_factory=dict)
    kernel_transfer: KernelTransfer | None = None
    allreduce: dict[str, str] = Field(default_factory=dict)
    custom_allreduce: CustomAllreduce | None = None
    fused_elementwise: bool = False
    overhead: StepOverhead = Field(default_factory=StepOverhead)
    frontend: Frontend = Field(default_factory=Frontend)
    defaults: EngineDefaults = Field(default_factory=EngineDefaults)
    gpu_defaults: dict[str, EngineDefaults] = Field(default_factory=dict)
    fitted_range: FittedRange | None = None
    provenance: dict[str, Measured] = Field(default_factory=dict)
    memory: MemoryRule = Field(default_factory=MemoryRule)
    versions: list[EngineVersion] = Field(default_factory=list)

    @field_validator("engine")
    @classmethod
    def _named(cls, engine: str) -> str:
        if not engine.strip():
            raise ValueError("must not be empty")
        return engine

    @model_validator(mode="before")
    @classmethod
    def _memory_from_defaults(cls, data: Any) -> Any:
        """A profile without a memory rule (written before rules existed) keeps the fraction
        its defaults name: of all memory (a flat rule) or of the memory free after weights
        (TensorRT-LLM's rule)."""
        if not isinstance(data, dict) or "memory" in data:
            return data
        defaults = data.get("defaults")
        fraction = defaults.get("memory_fraction") if isinstance(defaults, dict) else None
        if fraction is None:
            return data
        basis = defaults.get("memory_basis") if isinstance(defaults, dict) else None
        kind = "tensorrt-llm" if basis == "free" else "flat"
        return {**data, "memory": {"kind": kind, "fraction": fraction}}

    def defaults_for(self, gpu: str) -> EngineDefaults:
        """The engine's defaults on one GPU (its per-GPU defaults over the general ones)."""
        return self.defaults.merged(self.gpu_defaults.get(gpu))

    def kernel_profile(self, gpu: str) -> str | None:
        """The calibration profile of this engine's kernels on ``gpu`` (None: the GPU's default)."""
        return self.kernels.get(gpu)

    def outside_fitted_range(self, max_batch: int, factor: float = 2.0) -> str:
        """A warning when a run's largest batch is far outside the fitted batch sizes, else ''."""
        if self.fitted_range is None or max_batch <= 0:
            return ""
        low, high = self.fitted_range.batch_size
        if max_batch > factor * high:
            return (
                f"engine {self.engine}: batches reached {max_batch} requests, beyond the "
                f"{low}-{high} its overhead was fitted on"
            )
        return ""


def bare_profile() -> EngineProfile:
    """``engine: none``: the bare roofline, no overhead, no front end, no defaults."""
    return EngineProfile(engine=BARE, description="bare roofline: no engine overhead")


# --------------------------------------------------------------------------- files


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 file (three overhead terms added to every step) as a version-2 mapping."""
    known = {
        "schema_version",
        "engine",
        "description",
        "overhead_s",
        "overhead_per_request_s",
        "overhead_per_token_s",
        "provenance",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise CbsimError(f"{unknown[0]}: unknown key in a version-1 engine profile")
    return {
        "engine": data.get("engine", ""),
        "description": data.get("description", ""),
        "overhead": {
            "cpu_s": data.get("overhead_s", 0.0),
            "cpu_per_request_s": data.get("overhead_per_request_s", 0.0),
            "cpu_per_token_s": data.get("overhead_per_token_s", 0.0),
            "overlap": False,
        },
        "provenance": data.get("provenance", {}),
    }


def read_engine_profile(path: Path | Any) -> EngineProfile:
    """An engine profile from a JSON file (version 2, or a version-1 overhead file)."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CbsimError(
            f"cannot read engine profile: {err.strerror or err}", source=name
        ) from None
    data = parse_json(decode_utf8(raw, name), name, invalid="not valid JSON")
    if not isinstance(data, dict):
        raise CbsimError("an engine profile must hold a JSON object", source=name)
    version = data.get("schema_version")
    if version == 1:
        try:
            data = _from_version_1(data)
        except CbsimError as err:
            raise err.located(source=name) from None
    elif version != SCHEMA_VERSION:
        raise CbsimError(
            f"schema_version {version!r} is not supported (this cbsim reads engine profiles of "
            f"version 1 and {SCHEMA_VERSION}); write one with `cbsim calibrate e2e`",
            source=name,
        )
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        # the profile's own field stays in the message: an option or scenario field naming the
        # profile (--engine, cluster.engine) is put before the file, not joined to this path
        raise CbsimError(f"{where}: {message}", source=name) from None


def _is_engine_profile(path: Path) -> bool:
    try:
        read_engine_profile(path)
    except (CbsimError, ValueError, RecursionError):
        return False
    return True


def write_engine_profile(profile: EngineProfile, path: Path) -> Path:
    """Write a profile as JSON atomically (temporary file, then rename); an existing file is
    replaced only if it holds an engine profile."""
    data = profile.model_dump(mode="json", exclude_none=True)
    return outputs.write_bytes(
        path,
        (json.dumps(data, indent=1) + "\n").encode("utf-8"),
        replaceable=_is_engine_profile,
        description="a cbsim engine profile",
    )


def _shipped_dir() -> Any:
    return files("cbsim.catalog") / "data" / "profiles" / ENGINE_DIR


def engine_names() -> list[str]:
    """The shipped engine profiles' names, ``none`` included."""
    folder = _shipped_dir()
    names = {BARE}
    if folder.is_dir():
        names |= {
            p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
        }
    return sorted(names)


def is_profile_path(engine: str) -> bool:
    return engine.endswith(".json") or Path(engine).is_file()


ENGINE_ALIASES: dict[str, str] = {
    "trtllm": "tensorrt-llm",  # AI Configurator's --backend, TensorRT-LLM's own trtllm-serve
    "trt-llm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",  # the Python package
    "tensorrtllm": "tensorrt-llm",
    "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp",
    "deepspeed_mii": "deepspeed-mii",
    "mii": "deepspeed-mii",
}
"""Other names of shipped engines (compared without case), as other tools spell them."""


def _engine_name(name: str) -> str | None:
    """The shipped engine ``name`` names (its own name or an alias, any case), or None."""
    known = canonical_name(name, engine_names())
    if known is not None:
        return known
    alias = canonical_name(name, ENGINE_ALIASES)
    return ENGINE_ALIASES[alias] if alias is not None else None


def canonical_engine(engine: str) -> str:
    """A shipped engine's name in its own spelling (names compare without case: ``vLLM`` is
    ``vllm``, ``vLLM@0.8.5`` is ``vllm@0.8.5``; :data:`ENGINE_ALIASES` too: ``trtllm`` is
    ``tensorrt-llm``); anything else (a profile path, an unknown name) unchanged."""
    if engine in (BARE, *engine_names()) or is_profile_path(engine):
        return engine
    name, release = split_engine(engine)
    if release is not None and not is_profile_path(name):
        known = _engine_name(name)
        return f"{known}@{release.strip()}" if known else engine
    return _engine_name(engine) or engine


@lru_cache(maxsize=32)
def load_engine_profile(engine: str) -> EngineProfile:
    """A shipped engine profile by name, a profile JSON by path, or the bare one for ``none``;
    ``NAME@RELEASE`` is that engine as it was in that release (:func:`at_release`).

    Unknown names raise :class:`CbsimError` listing the known ones.
    """
    if engine == BARE:
        return bare_profile()
    if is_profile_path(engine):
        return read_engine_profile(Path(engine))
    name, release = split_engine(canonical_engine(engine))
    if release is not None:
        return at_release(load_engine_profile(name), release)
    if name == BARE:
        return bare_profile()
    path = _shipped_dir() / f"{name}.json"
    if not path.is_file():
        raise CbsimError(
            f"unknown engine {name!r}; known: {', '.join(engine_names())} "
            f"(or a path to an engine profile JSON){did_you_mean(name, engine_names())}"
        )
    return read_engine_profile(path)


def known_releases(profile: EngineProfile) -> str:
    """The releases a profile's version ranges cover, for messages (``0.4 to 0.11``)."""
    if not profile.versions:
        return "none"
    oldest = min(profile.versions, key=lambda v: parse_release(v.since)).since
    return f"{oldest} and later"


def at_release(profile: EngineProfile, release: str) -> EngineProfile:
    """``profile`` as the engine behaved in ``release``: every version range covering it
    applied in order (another profile's, or its changes over the base); the base itself at or
    after its newest range. ``version`` then names the release."""
    try:
        wanted = parse_release(release)
    except CbsimError as err:
        raise CbsimError(f"engine {profile.engine}@{release}: {err.message}") from None
    if profile.engine == BARE:
        raise CbsimError("engine none is the bare roofline: it has no releases")
    if not profile.versions:
        raise CbsimError(
            f"engine {profile.engine} has no release ranges; name it without @{release}"
        )
    oldest = min(parse_release(v.since) for v in profile.versions)
    if wanted < oldest:
        raise CbsimError(
            f"engine {profile.engine}@{release}: this profile models releases "
            f"{known_releases(profile)}"
        )
    data = profile.model_dump(mode="json", exclude_none=True)
    notes = []
    for version in profile.versions:
        if not version.covers(wanted):
            continue
        if version.profile is not None:
            other = load_engine_profile(version.profile)
            if other.versions:
                other = at_release(other, release)
            data = other.model_dump(mode="json", exclude_none=True)
        data = deep_merge(data, version.changes)
        notes.append(version.note or f"{version.since}-{version.until or ''}")
    data["versions"] = []
    data["version"] = release + (f" ({'; '.join(notes)})" if notes else "")
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CbsimError(
            f"engine {profile.engine}@{release}: its version ranges make {where} invalid: "
            f"{first['msg']}"
        ) from None
