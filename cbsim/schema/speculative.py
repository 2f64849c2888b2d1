"""The ``speculative`` section: speculative decoding's proposer, how its drafts are accepted, and
the policy that picks how many tokens to draft.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from cbsim.common.limits import BatchSize, Concentration, Divergence, NotBool, StepCount
from cbsim.schema.base import StrictModel, default_kind
from cbsim.schema.cluster import Cluster


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
    """Acceptance rate per draft position.

    ``form: conditional`` (default): rate i is the probability that position i is accepted given
    every position before it was (the last rate repeats for later positions). ``form:
    unconditional``: rate i is the fraction of verify steps that accepted position i, as engines
    publish it (vLLM: EAGLE-3 on Llama-3.1-8B, k = 3, MT-Bench 0.73 / 0.52 / 0.35, mean acceptance
    length 1 + Σ = 2.60); non-increasing, converted to conditional rates u_i / u_(i−1).
    ``profile`` names a published pair (:mod:`cbsim.catalog.acceptance_profiles`) and sets
    ``rates`` and ``form: unconditional``. ``concentration``: each request scales the rates by
    its own level θ / m, θ ~ Beta(m·c, (1 − m)·c) around the mean rate m.
    """

    kind: Literal["positional"]
    rates: list[Probability] = Field(
        default_factory=lambda: [0.8, 0.75, 0.7, 0.65, 0.6], min_length=1
    )
    form: Literal["conditional", "unconditional"] = "conditional"
    profile: str | None = None
    concentration: Concentration | None = None

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("profile") is None:
            return data
        from cbsim.catalog.acceptance_profiles import acceptance_profile

        try:
            profile = acceptance_profile(str(data["profile"]))
        except KeyError as err:
            raise ValueError(str(err.args[0])) from None
        rates = list(profile.rates)
        if "rates" in data and list(data["rates"]) != rates:
            raise ValueError(f"profile {data['profile']} sets rates {rates}: drop rates")
        if data.get("form", "unconditional") != "unconditional":
            raise ValueError(f"profile {data['profile']} publishes unconditional rates")
        return {**data, "rates": rates, "form": "unconditional"}

    @model_validator(mode="after")
    def _non_increasing(self) -> PositionalAcceptance:
        if self.form == "unconditional":
            for earlier, later in itertools.pairwise(self.rates):
                if later > earlier:
                    raise ValueError(
                        f"unconditional rates must be non-increasing (position i is accepted only "
                        f"if every earlier one was), got {self.rates}"
                    )
        return self


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
    # an engine's documented table (cbsim.catalog.engine_presets), in place of ``table``
    preset: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        from cbsim.catalog.engine_presets import preset_table

        try:
            rows = preset_table(str(data["preset"]))
        except KeyError as err:
            raise ValueError(str(err.args[0])) from None
        if "table" in data and [tuple(r) for r in data["table"]] != rows:
            raise ValueError(f"preset {data['preset']} sets the table: drop table")
        return {**data, "table": rows}

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


class AdaptiveHysteresisPolicy(StrictModel):
    """SGLang's ``--speculative-adaptive``: every request drafts the active tier's k, one of
    ``candidate_steps``; after each verify step an EMA (weight ``ema_weight``) of the batch's mean
    accepted drafts s moves the tier one up when s + 1 ≥ k + ½ + ``up_hysteresis`` and one down
    when s + 1 < k_lower + ½ − ``down_hysteresis``; one state per replica and batch-size range
    (``batch_ranges``; sizes outside every range share one more). See
    :mod:`cbsim.engine.speculative.adaptive_hysteresis`."""

    kind: Literal["adaptive_hysteresis"]
    candidate_steps: list[DraftLength] = Field(default_factory=lambda: [1, 3, 7], min_length=1)
    initial: DraftLength | None = None  # default: the middle candidate
    ema_weight: Annotated[float, NotBool, Field(gt=0.0, le=1.0)] = 0.2
    up_hysteresis: Annotated[float, NotBool, Field(ge=0.0, le=32.0)] = 0.0
    down_hysteresis: Annotated[float, NotBool, Field(ge=0.0, le=32.0)] = 0.25
    batch_ranges: list[tuple[BatchSize, BatchSize]] = Field(
        default_factory=lambda: [(1, 8), (9, 32), (33, 100_000)], min_length=1
    )

    @model_validator(mode="after")
    def _consistent(self) -> AdaptiveHysteresisPolicy:
        if self.initial is not None and self.initial not in self.candidate_steps:
            raise ValueError(f"initial ({self.initial}) must be one of {self.candidate_steps}")
        spans = sorted(self.batch_ranges)
        for low, high in spans:
            if low > high:
                raise ValueError(f"range [{low}, {high}]: min_batch must not exceed max_batch")
        for (_, high), (low, _) in itertools.pairwise(spans):
            if low <= high:
                raise ValueError(f"batch ranges overlap at batch size {low}")
        return self


KPolicy = Annotated[
    FixedPolicy
    | ThresholdPolicy
    | EwmaLookaheadPolicy
    | HeuristicPolicy
    | BatchTablePolicy
    | GoodputPolicy
    | AdaptiveHysteresisPolicy,
    Field(discriminator="kind"),
    default_kind("fixed"),
]


class Speculative(StrictModel):
    """Speculative decoding: a proposer drafts, the target verifies k + 1 tokens in one forward."""

    enabled: bool = False
    proposer: Proposer = Field(default_factory=DraftModelProposer)
    acceptance: Acceptance = Field(default_factory=IidAcceptance)
    policy: KPolicy = Field(default_factory=FixedPolicy)
    # TensorRT-LLM's k = 0 defect: "stale" drafters lose their state in a step with k = 0 and
    # accept only a ``stale_acceptance_scale`` share of drafts after (cbsim.engine.speculative.drafter_state)
    drafter_state_at_k0: Literal["kept", "stale"] = "kept"
    stale_acceptance_scale: Probability = 0.1
