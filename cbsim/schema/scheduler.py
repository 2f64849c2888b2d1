"""The ``scheduler`` section: how a replica forms each iteration's batch, and which keys each
kind of scheduler reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from cbsim.common.errors import CbsimError
from cbsim.common.limits import BatchSize, BlockSize, NotBool, TokenCount
from cbsim.schema.base import StrictModel


class Scheduler(StrictModel):
    """How a replica forms each iteration's batch.

    ``static``: request-level batching (a batch runs until all its requests finish).
    ``orca``: iteration-level batching with full-length KV reserved at admission: whole prompts
    beside the running decodes within ``max_batched_tokens``, or, with ``chunked_prefill``, the
    prompt that does not fit cut to what the budget leaves (TensorRT-LLM's chunked context).
    ``prefill_first``: paged KV, prefills first (whole prompts within ``max_batched_tokens``),
    preemption: vLLM V0's scheduler and SGLang's. ``vllm`` is its former name, a deprecated alias
    (it read as vLLM's scheduler, but vLLM V1, ``engine: vllm``, runs ``sarathi``).
    ``sarathi``: chunked prefill, decodes first, within a per-iteration token budget
    ``max_batched_tokens`` (vLLM's ``--max-num-batched-tokens``); ``chunk_size`` is
    Sarathi-Serve's name for the same budget and may stand in for it. Set beside a different
    ``max_batched_tokens``, ``chunk_size`` is the most of one prompt a step prefills (vLLM's
    ``--long-prefill-token-threshold``), so long prompts leave room for others'.

    ``async_scheduling`` (every kind): the engine forms the batch of step n+1 while step n runs
    (vLLM's ``--async-scheduling``, on by default since late 2025; SGLang's and TensorRT-LLM's
    overlap schedulers), so its CPU work hides behind the GPU's, at a price: a request that
    reaches the scheduler while a step runs (or as one ends) missed the batch already formed and
    joins the step after next. An idle engine takes it at once. Off unless set (the shipped
    engine profiles were fitted without it: :mod:`cbsim.studies.calibration.engines`).

    Each kind reads only some keys (:attr:`USED_KEYS`): a key the user sets that the kind does not
    read is an error naming the scheduler, never a setting silently ignored. Only the
    user's keys count: an engine's defaults fill only keys the kind reads
    (:func:`apply_engine_defaults`). A key set to null is unset, so ``--set
    scheduler.kind=prefill_first --set scheduler.chunk_size=null`` runs a sarathi scenario under
    prefill_first. Under ``sarathi`` both budget keys hold the one budget (the user's, else the
    engine's, else 512) unless the user set both, differently.
    """

    kind: Literal["static", "orca", "prefill_first", "sarathi", "vllm"] = "prefill_first"
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
        "prefill_first": (
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
    DEPRECATED_KINDS: ClassVar[dict[str, str]] = {"vllm": "prefill_first"}
    _given_kind: str | None = PrivateAttr(default=None)  # a deprecated name the user wrote

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None or k not in cls.model_fields}
        return data

    @model_validator(mode="after")
    def _keys_fit_the_kind(self) -> Scheduler:
        if self.kind in self.DEPRECATED_KINDS:
            self._given_kind = self.kind
            self.__dict__["kind"] = self.DEPRECATED_KINDS[self.kind]
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
            self.__dict__["max_batched_tokens"] = budget
            if not self.caps_long_prefills:
                self.__dict__["chunk_size"] = budget
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
            if not self.caps_long_prefills:
                data.pop("max_batched_tokens" if alias else "chunk_size", None)
        return {k: v for k, v in data.items() if k == "kind" or k in used or k in given}

    @property
    def deprecated_kind(self) -> str | None:
        """The deprecated name the user gave the kind (``vllm`` for ``prefill_first``), or None."""
        return self._given_kind

    @classmethod
    def canonical_kind(cls, kind: str) -> str:
        """A kind by its current name (``vllm`` is ``prefill_first``)."""
        return cls.DEPRECATED_KINDS.get(kind, kind)

    @classmethod
    def unused_keys(cls, kind: str, given: Iterable[str]) -> list[str]:
        """The keys among ``given`` that a ``kind`` scheduler does not read, in field order."""
        used = cls.USED_KEYS.get(cls.canonical_kind(kind))
        if used is None:
            return []
        given = set(given)
        return [k for k in cls.model_fields if k in given and k != "kind" and k not in used]

    @classmethod
    def unused_key_message(cls, kind: str, key: str, default_of: str | None = None) -> str:
        """Why ``key`` is an error under ``kind`` (``default_of``: the engine whose default the
        kind is, when the user did not pick it)."""
        kind = cls.canonical_kind(kind)
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

    @property
    def caps_long_prefills(self) -> bool:
        """Whether ``chunk_size`` caps one prompt's chunk below the step's budget under
        ``sarathi``: the user set both budget keys (vLLM's ``--max-num-batched-tokens`` and
        ``--long-prefill-token-threshold``), differently."""
        given = self.model_fields_set
        return (
            "max_batched_tokens" in given
            and "chunk_size" in given
            and self.chunk_size != self.max_batched_tokens
        )

    def sarathi_budget(self, fallback: int) -> int:
        """The token budget under ``sarathi``: ``max_batched_tokens`` if the user set it, else
        ``chunk_size`` if set (Sarathi-Serve's name for the budget), else ``fallback``."""
        given = self.model_fields_set
        if "max_batched_tokens" in given:
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
            budget = self.sarathi_budget(self.SARATHI_BUDGET if budget is None else budget)
            updates["max_batched_tokens"] = budget
            if not self.caps_long_prefills:
                updates["chunk_size"] = budget
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
