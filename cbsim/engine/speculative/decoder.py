"""Speculative decoding inside the batch: one decoder per request, verification in the target step.

After the scheduler forms an iteration's batch, :meth:`SpeculativeDecoding.plan` decides every
decoding request's draft length k (its own controller proposes, the k policy decides for the
batch), clamps k so the request cannot overshoot its output length, and reserves KV for the k + 1
tokens the target will verify (reducing k, never preempting, when blocks are short). The iteration
then costs the proposer's drafting plus one target forward in which each speculating request
processes q = k + 1 tokens. When it completes, :meth:`SpeculativeDecoding.verify` draws how many
drafts each request accepted from the acceptance model; the scheduler emits accepted + 1 tokens and
releases the KV of the rejected ones.

Per request it keeps what the three seed implementations kept, computed correctly: steps, drafted,
accepted, an EMA of the per-step acceptance rate (weight 0.1, the first sample sets it), the running
conditional-acceptance estimate used by batch-aware policies, and the draft and target time spent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from cbsim.common.pcg64 import WordStream
from cbsim.common.rng import stream
from cbsim.cost import BatchStats, CostModel
from cbsim.cost.batch_stats import DECODE_QUERY_MAX
from cbsim.cost.compiled import CompiledCost
from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.speculative import cohort as cohort_fields
from cbsim.engine.speculative.acceptance import AcceptanceModel, level_scale, make_acceptance_model
from cbsim.engine.speculative.adaptive_hysteresis import AdaptiveHysteresisK
from cbsim.engine.speculative.cohort import IntArray, SpecCohort, verify_members
from cbsim.engine.speculative.cohort_step import NOT_TAKEN, plan_verify_members
from cbsim.engine.speculative.draft_reservation import (
    BLOCKS,
    GROUPED_ENTRIES,
    allocate_grown,
    draft_room,
    mark_skipped_slots,
    reserve_drafts,
    set_drafts,
)
from cbsim.engine.speculative.drafter_state import check_vocabulary, stale_accepted
from cbsim.engine.speculative.goodput_kernel import (
    NGRAM,
    CompiledProposer,
    StepBase,
    choose_goodput,
    compiled_proposer,
    draft_seconds,
    goodput_k,
    step_base,
)
from cbsim.engine.speculative.goodput_refine import goodput_k_per_request
from cbsim.engine.speculative.policies import (
    AlphaEstimator,
    BatchTableK,
    BatchView,
    FixedK,
    GoodputK,
    KController,
    KPolicy,
    StaticController,
    StepOutcome,
    check_outcome,
    make_policy,
)
from cbsim.engine.speculative.proposers import Proposer, make_proposer
from cbsim.engine.speculative.slots import EMA_WEIGHT, SpecSlots
from cbsim.engine.speculative.step_kernel import (
    ADAPTIVE,
    BATCH_TABLE,
    FIXED,
    GOODPUT,
    SCALED,
    CompiledAcceptance,
    compiled_acceptance,
    plan_step_kernel,
    reserve_kernel,
    verify_step_kernel,
)
from cbsim.memory.kvcache import KVCache
from cbsim.schema.speculative import Speculative
from cbsim.workload.request import Request

if TYPE_CHECKING:
    from cbsim.engine.scheduler.base import Batch, SchedulerPolicy

GENERATED = attrgetter("generated")
PRIOR_STRENGTH = 4.0  # pseudo-observations of the prior when estimating a request's α


class SpecState:
    """One request's speculative decoder: its k controller and its slot in the cluster's
    :class:`SpecSlots` (its α counts, acceptance EMA, drawn α and drafter staleness)."""

    __slots__ = ("controller", "slot", "slots")

    def __init__(self, controller: KController, slots: SpecSlots, model_alpha: float) -> None:
        self.controller = controller
        self.slots = slots
        self.slot = slots.new(model_alpha)

    def moved_to(self, slots: SpecSlots) -> SpecState:
        """This decoder with its figures in a slot of ``slots`` (another pool's)."""
        moved = SpecState(self.controller, slots, self.model_alpha)
        old, new = self.slot, moved.slot
        slots.accepted[new] = self.slots.accepted[old]
        slots.rejected[new] = self.slots.rejected[old]
        slots.ema[new] = self.slots.ema[old]
        slots.stale[new] = self.slots.stale[old]
        return moved

    @property
    def model_alpha(self) -> float:
        """The α the acceptance model drew for the request."""
        return float(self.slots.model_alpha[self.slot])

    @property
    def ema_acceptance(self) -> float:
        """EMA of the per-step acceptance rate (NaN before the first step)."""
        return float(self.slots.ema[self.slot])

    @property
    def stale(self) -> bool:
        """Whether the drafter skipped a step of this request (k = 0 with a stale-at-k0 drafter)."""
        return bool(self.slots.stale[self.slot])

    @stale.setter
    def stale(self, value: bool) -> None:
        self.slots.stale[self.slot] = value

    @property
    def rejections(self) -> int:
        """Verification steps that stopped at a rejected draft."""
        return int(self.slots.rejected[self.slot])


class SpeculativeDecoding:
    """The speculative decoders of every request on one cluster (shared policy and models)."""

    def __init__(
        self,
        config: Speculative,
        target: CostModel,
        seed: int,
        source: str | None = None,
        proposer: Proposer | None = None,
    ) -> None:
        self.policy: KPolicy = make_policy(config.policy)
        self.acceptance: AcceptanceModel = make_acceptance_model(config.acceptance, source)
        # ``proposer``: ``config.proposer`` drafting for ``target`` built already (a search's,
        # shared by its simulations as their cost models are)
        self.proposer: Proposer = (
            make_proposer(config.proposer, target) if proposer is None else proposer
        )
        self.target = target
        self.seed = seed
        check_vocabulary(config.proposer, target)
        # TensorRT-LLM's k = 0 defect (see cbsim.engine.speculative.drafter_state)
        self.stale_drafter = config.drafter_state_at_k0 == "stale"
        self.stale_scale = float(config.stale_acceptance_scale)
        self._stale_streams: dict[int, WordStream] = {}
        self.slots = SpecSlots()
        # per replica: its acceptance draws, its requests' own α, and its α so far (maximum
        # likelihood over its steps, the model's prior before any), so that a replica advanced
        # ahead of the others in one event draws and learns exactly as if stepped
        self._draw_streams: dict[int, WordStream] = {}
        self._request_levels: dict[int, Callable[[Request], float]] = {}
        self._replica_alphas: dict[int, AlphaEstimator] = {}
        # the goodput policy (per batch or per request) chooses k in compiled code when the cost
        # models compile
        self._compiled_goodput: CompiledProposer | None = None
        per_request = isinstance(self.policy, GoodputK) and self.policy.per_request
        self._goodput_call = KernelCall(goodput_k_per_request if per_request else goodput_k)
        # whether requests' k controllers learn from outcomes (batch-level policies' do not)
        controller = self.policy.controller()
        self._controllers_learn = not isinstance(controller, StaticController)
        # a constant k ignores outcomes: one controller serves every request
        self._shared_controller = None if self._controllers_learn else controller
        policy = self.policy
        self._per_request_goodput = per_request
        self._reserve_call = KernelCall(reserve_kernel)
        self._draft_call = KernelCall(draft_seconds)
        drafter = compiled_proposer(self.proposer, target)
        self._drafter = None if isinstance(drafter, str) else drafter
        if isinstance(policy, GoodputK):
            self._compiled_goodput = self._drafter
        # a stepped iteration's drafts planned in one compiled call (step_kernel)
        self._step = fused_step(policy, self._drafter)
        self._step_call = KernelCall(plan_step_kernel)
        # a stepped iteration's verification in one compiled call (step_kernel)
        acceptance = compiled_acceptance(self.acceptance)
        self._verify_fused: CompiledAcceptance | None = None
        if (
            not isinstance(acceptance, str)
            and not self.stale_drafter
            and not self._controllers_learn
        ):
            self._verify_fused = acceptance
        self._verify_call = KernelCall(verify_step_kernel)
        self._members_call = KernelCall(verify_members)
        self._cohort_step_call = KernelCall(plan_verify_members)
        self._verify_with_plan = self._verifies_with_plan()

    def _verifies_with_plan(self) -> bool:
        """Whether a cohort's step is verified in its plan's compiled call (``cohort_step``):
        with a compiled acceptance model whose levels are not scaled."""
        model = self._verify_fused
        return model is not None and model.code != SCALED

    def draw_stream(self, replica: int) -> WordStream:
        """Replica ``replica``'s acceptance draws (replica 0 keeps the single-replica stream),
        drawn from by the compiled verification and decode runs through its words."""
        drawn = self._draw_streams.get(replica)
        if drawn is None:
            extra = (replica,) if replica else ()
            drawn = WordStream(stream(self.seed, "acceptance", *extra))
            self._draw_streams[replica] = drawn
        return drawn

    def draw_rng(self, replica: int) -> np.random.Generator:
        """:meth:`draw_stream` as a generator, for Python draws."""
        return self.draw_stream(replica).generator()

    def stale_stream(self, replica: int) -> WordStream:
        """Replica ``replica``'s draws thinning stale drafters' acceptance."""
        drawn = self._stale_streams.get(replica)
        if drawn is None:
            drawn = WordStream(stream(self.seed, "acceptance:stale", replica))
            self._stale_streams[replica] = drawn
        return drawn

    def stale_rng(self, replica: int) -> np.random.Generator:
        """:meth:`stale_stream` as a generator, for Python draws."""
        return self.stale_stream(replica).generator()

    def _request_levels_of(self, replica: int) -> Callable[[Request], float]:
        """Replica ``replica``'s requests' own α at their start, one after the other."""
        levels = self._request_levels.get(replica)
        if levels is None:
            extra = (replica,) if replica else ()
            rng = stream(self.seed, "acceptance:requests", *extra)
            levels = self._request_levels[replica] = self.acceptance.levels(rng)
        return levels

    def replica_alpha(self, replica: int) -> AlphaEstimator:
        """What replica ``replica`` has learnt of α over its steps."""
        estimate = self._replica_alphas.get(replica)
        if estimate is None:
            estimate = AlphaEstimator(prior=self.acceptance.prior_alpha(), weight=0.0)
            self._replica_alphas[replica] = estimate
        return estimate

    # ------------------------------------------------------------------ per request

    def state(self, req: Request) -> SpecState:
        spec = req.spec
        if spec is None:
            level = self._request_levels_of(max(req.replica, 0))(req)
            controller = self._shared_controller or self.policy.controller()
            spec = SpecState(controller, self.slots, level)
            req.spec = spec
        assert isinstance(spec, SpecState)
        if spec.slots is not self.slots:  # decoded by another pool before: its figures move here
            spec = req.spec = spec.moved_to(self.slots)
        return spec

    def states(self, reqs: Sequence[Request]) -> list[SpecState]:
        """:meth:`state` of each of ``reqs``, in order."""
        states = []
        own = self.slots
        for req in reqs:
            spec = req.spec
            if not isinstance(spec, SpecState) or spec.slots is not own:
                spec = self.state(req)
            states.append(spec)
        return states

    def prior_alpha(self, replica: int = 0) -> float:
        """The replica's conditional acceptance so far (the model's prior before any step)."""
        return self.replica_alpha(replica).value

    # ------------------------------------------------------------------ per iteration

    def plan(self, batch: Batch, sched: SchedulerPolicy, replica: int = 0) -> float:
        """Choose k per decoding request, reserve KV, rewrite the batch; returns the draft seconds."""
        if batch.members is not None:
            drafting = self._plan_cohort(batch, sched, batch.members, replica)
            if drafting is not None:
                return drafting
            sched.spill_cohort(batch)  # request by request, as if never formed
        requests = batch.requests
        new_tokens = batch.new_tokens
        ks_all = [0] * len(requests)
        batch.ks = ks_all
        # one pass: the decoding entries' states and figures, the prefill chunks' stats
        entries: list[int] = []
        reqs: list[Request] = []
        context_list: list[int] = []
        slot_list: list[int] = []
        remaining_list: list[int] = []
        prefill = BatchStats()
        prior = self.prior_alpha(replica)
        own = self.slots
        for i, req in enumerate(requests):
            kv = req.kv_tokens
            if kv < req.prefill_target:
                q = new_tokens[i]
                prefill.add(q, kv, batch_sampled(req, q))
                continue
            entries.append(i)
            reqs.append(req)
            context_list.append(kv)
            spec = req.spec
            if not isinstance(spec, SpecState) or spec.slots is not own:
                spec = self.state(req)  # its first speculative step draws its α, in batch order
            slot_list.append(spec.slot)
            remaining_list.append(req.output_tokens - req.generated)
        batch.decoding = entries
        if not entries:
            return 0.0
        count = len(reqs)
        slots = np.array(slot_list, dtype=np.int64)
        remaining = np.array(remaining_list, dtype=np.int64)
        contexts = np.array(context_list, dtype=np.int64)
        # the drafts the step's token budget leaves room for, beside what is scheduled
        spare = draft_room(sched.step_budget(), sum(new_tokens) + batch.cohort)
        fused = None
        if self._step is not None:
            fused = self._plan_fused(
                batch, sched, reqs, slots, remaining, contexts, prefill, prior, replica, spare
            )
        if isinstance(fused, float):
            return fused
        if isinstance(fused, np.ndarray):  # the reservation stopped short: request by request
            chosen, compiled = fused, True
        else:
            chosen, compiled = self._choose(
                batch, reqs, slots, remaining, contexts, prefill, prior, replica
            )
        # within the step's token budget (drafts cut in batch order to the spare room), reserve
        # KV for each request's k + 1 tokens (fewer drafts where blocks are short) and add its
        # verify entry to the prefill chunks' stats: the same sums as the batch's entries in
        # order, since every term is a multiple of 1/2 far below 2**53
        chosen_ks = reserve_drafts(sched, reqs, chosen, contexts, spare, self._reserve_call)
        set_drafts(batch, chosen_ks)
        chosen = np.array(chosen_ks, dtype=np.int64)
        stats = prefill.copy()
        if count >= GROUPED_ENTRIES:
            add_verify_entries(stats, chosen, contexts)
        else:
            queries = [k + 1 for k in chosen_ks]
            stats.add_entries(queries, context_list, queries)
        batch.stats = stats
        batch.prefill_tokens = prefill.num_tokens
        batch.decode_tokens = chosen_ks.count(0)
        if compiled:  # the compiled proposer's pricing: the same floats
            draft = self._compiled_draft_time(chosen, contexts)
        else:
            draft = self.proposer.draft_time(chosen, contexts)
        batch.draft_s = draft
        return draft

    def _plan_fused(
        self,
        batch: Batch,
        sched: SchedulerPolicy,
        reqs: list[Request],
        slots: np.ndarray,
        remaining: np.ndarray,
        contexts: np.ndarray,
        prefill: BatchStats,
        prior: float,
        replica: int,
        spare: int,
    ) -> float | np.ndarray | None:
        """:meth:`plan`'s choice, cut, reservation and pricing in one compiled call
        (:mod:`~cbsim.engine.speculative.step_kernel`): the draft seconds, the batch rewritten;
        or, where a request's blocks would not fit without evicting, the drafts wanted (the
        policy's, cut to the outputs left; the stale drafters marked) for the Python path to
        reserve from; None where the cost models do not compile for this step. ``spare``: the
        drafts the step's token budget leaves room for (:func:`draft_room`)."""
        count = len(reqs)
        blocks = np.fromiter(map(BLOCKS, reqs), np.int64, count)
        call = self._fused_call(
            len(batch.requests), slots, remaining, contexts, blocks, prefill, prior, replica, spare,
            sched.kv,
        )  # fmt: skip
        if call is None:
            return None
        (wanted, kept, grown, stop, grown_total, tokens, kv_tokens, pairs, plain, drafting,
         target_s) = call  # fmt: skip
        if stop < count:
            return wanted  # type: ignore[no-any-return]
        allocate_grown(sched, reqs, grown, grown_total)
        set_drafts(batch, kept.tolist())
        return _priced(batch, prefill, count, tokens, kv_tokens, pairs, plain, drafting, target_s)

    def _step_settings(
        self,
        batch_size: int,
        count: int,
        prefill: BatchStats,
        replica: int,
        spare: int,
        kv: KVCache,
    ) -> tuple[Any, ...] | None:
        """:func:`~cbsim.engine.speculative.step_kernel.plan_step_kernel`'s arguments after the
        decoding entries' (the policy to the free blocks) for a step of ``batch_size`` entries,
        ``count`` of them decoding beside ``prefill``; None where the cost models do not compile
        for it."""
        step = self._step
        assert step is not None
        target = self.target.compiled(prefill.num_tokens + count * (step.k_max + 1))
        if target is None:
            return None
        draft = self._draft_cost(count, target)
        if draft is None:
            return None
        base = step_base(self.target, prefill) if step.policy == GOODPUT else _NO_BASE
        policy, fixed_k = step.policy, step.fixed_k
        if policy == ADAPTIVE:  # the replica's tier for this batch (AdaptiveHysteresisK.choose)
            assert isinstance(self.policy, AdaptiveHysteresisK)
            policy, fixed_k = FIXED, self.policy.k_for(batch_size, replica)
        room = kv.total_blocks - kv.used_blocks - kv.cached_blocks
        return (
            policy, fixed_k, step.table, batch_size, step.k_max, step.per_request, target,
            step.drafter.kind, draft, base, self.stale_drafter, spare, kv.block_size, room,
        )  # fmt: skip

    def _fused_call(
        self,
        batch_size: int,
        slots: IntArray,
        remaining: IntArray,
        contexts: IntArray,
        blocks: IntArray,
        prefill: BatchStats,
        prior: float,
        replica: int,
        spare: int,
        kv: KVCache,
    ) -> tuple[Any, ...] | None:
        """The compiled plan of a step of ``batch_size`` entries whose decoding ones have
        ``slots``, outputs ``remaining``, ``contexts`` and ``blocks`` (in batch order)
        (:func:`~cbsim.engine.speculative.step_kernel.plan_step_kernel`'s results), or None
        where the cost models do not compile for it."""
        settings = self._step_settings(batch_size, len(slots), prefill, replica, spare, kv)
        if settings is None:
            return None
        own = self.slots
        result: tuple[Any, ...] = self._step_call(
            own.accepted, own.rejected, own.stale, slots, prior, PRIOR_STRENGTH, remaining,
            contexts, blocks, *settings,
        )  # fmt: skip
        return result

    def _plan_cohort(
        self, batch: Batch, sched: SchedulerPolicy, cohort: SpecCohort, replica: int
    ) -> float | None:
        """:meth:`plan` of a step whose decoding entries are the speculative cohort's members
        (:mod:`~cbsim.engine.speculative.cohort`), on its table: the draft seconds, the batch
        and the members' drafts and blocks set (and, with an unscaled compiled acceptance, their
        verification drawn: :mod:`~cbsim.engine.speculative.cohort_step`); None, changing
        nothing, where the compiled plan does not take the step whole (the cost models do not
        compile for it, or a reservation falls short) or an entry outside the cohort decodes."""
        requests = batch.requests
        new_tokens = batch.new_tokens
        prefill = BatchStats()
        for i, req in enumerate(requests):
            kv = req.kv_tokens
            if kv >= req.prefill_target:
                return None
            q = new_tokens[i]
            prefill.add(q, kv, batch_sampled(req, q))
        count = len(cohort)
        spare = draft_room(sched.step_budget(), sum(new_tokens) + batch.cohort)
        prior = self.prior_alpha(replica)
        settings = self._step_settings(len(batch), count, prefill, replica, spare, sched.kv)
        if settings is None:
            return None
        own, model = self.slots, self._verify_fused
        if self._verify_with_plan and model is not None:
            call = self._cohort_step_call(
                cohort.table, count, own.accepted, own.rejected, own.stale, prior,
                PRIOR_STRENGTH, *settings, self.draw_stream(replica).words(), own.model_alpha,
                model.code, model.iid_alpha, model.rates, model.drift,
            )  # fmt: skip
            if call[0] == NOT_TAKEN:
                return None
            grown_total, tokens, kv_tokens, pairs, plain, drafting, target_s = call[:7]
            batch.verified = call[7:]
        else:
            remaining = cohort.column(cohort_fields.OUTPUTS) - cohort.column(
                cohort_fields.GENERATED
            )
            call = self._step_call(
                own.accepted, own.rejected, own.stale, cohort.column(cohort_fields.SLOT), prior,
                PRIOR_STRENGTH, remaining, cohort.column(cohort_fields.KV_TOKENS),
                cohort.column(cohort_fields.BLOCKS), *settings,
            )  # fmt: skip
            if call[3] < count:
                return None
            _, kept, _, _, grown_total, tokens, kv_tokens, pairs, plain, drafting, target_s = call
            cohort.column(cohort_fields.DRAFTS)[:] = kept
        if grown_total:  # the kernel grew the members' blocks in the table
            sched.kv.allocate(grown_total)
        batch.ks = [0] * len(requests)
        batch.decoding = []
        return _priced(batch, prefill, count, tokens, kv_tokens, pairs, plain, drafting, target_s)

    def _choose(
        self,
        batch: Batch,
        reqs: list[Request],
        slots: np.ndarray,
        remaining: np.ndarray,
        contexts: np.ndarray,
        prefill: BatchStats,
        prior: float,
        replica: int,
    ) -> tuple[np.ndarray, bool]:
        """The k policy's drafts for the decoding requests, cut to their outputs left (the
        drafters given none marked stale), and whether the choice was compiled."""
        count = len(reqs)
        alphas = self.slots.alphas(slots, prior, PRIOR_STRENGTH)
        context_sum = int(contexts.sum())

        def step_time(ks: Sequence[int]) -> float:
            k_low, k_high = min(ks), max(ks)
            if k_low != k_high:
                return self.step_time(prefill, contexts, np.asarray(ks, dtype=np.int64))
            stats = prefill.copy()
            stats.add_many(count, k_high + 1, context_sum)
            return self.proposer.draft_time_uniform(
                count, k_high, context_sum
            ) + self.target.time_stats(stats)

        def step_time_sweep(caps: np.ndarray) -> list[float]:
            """``step_time(min(k, caps))`` for k = 0 .. caps.max(): the same floats, with the
            draft steps priced once (see ``Proposer.draft_time_sweep``)."""
            drafts = self.proposer.draft_time_sweep(caps, contexts)
            floor = int(caps.min())
            times = []
            for k, draft in enumerate(drafts):
                if k <= floor:  # every request drafts k: the uniform path of step_time
                    stats = prefill.copy()
                    stats.add_many(count, k + 1, context_sum)
                    times.append(draft + self.target.time_stats(stats))
                else:
                    times.append(self._target_time(prefill, contexts, np.minimum(k, caps), draft))
            return times

        compiled = None
        if self._compiled_goodput is not None:
            compiled = choose_goodput(
                self._compiled_goodput, self.policy.k_max, self.target, self.proposer, alphas,
                remaining, contexts, prefill, self._goodput_call, self._per_request_goodput,
            )  # fmt: skip
        if compiled is not None:
            ks = compiled
        else:
            view = BatchView(
                batch_size=len(batch.requests),
                proposals=[cast("SpecState", r.spec).controller.k for r in reqs],
                alphas=alphas,
                remaining=remaining,
                step_time=step_time,
                step_time_sweep=step_time_sweep,
                replica=replica,
            )
            ks = np.asarray(self.policy.choose(view), dtype=np.int64)
        if self.stale_drafter:
            mark_skipped_slots(self.slots, slots, ks)
        chosen = np.maximum(np.minimum(ks, remaining - 1), 0)
        return chosen, compiled is not None

    def _compiled_draft_time(self, ks: np.ndarray, contexts: np.ndarray) -> float:
        """:meth:`Proposer.draft_time` in one compiled call (the decode runs' own pricing,
        :func:`~cbsim.engine.speculative.goodput_kernel.draft_seconds`), where the choice was
        compiled."""
        drafter = self._drafter
        assert drafter is not None
        count = len(ks)
        cost = self._draft_cost(count, self.target.compiled(1))
        if cost is None:
            return self.proposer.draft_time(ks, contexts)
        seconds: float = self._draft_call(drafter.kind, cost, ks, contexts, count)
        return seconds

    def _draft_cost(self, count: int, target: CompiledCost | None) -> CompiledCost | None:
        """The compiled proposer's pricing for ``count`` drafting requests: its own cost
        model's tables, or (n-gram lookup, priced per request) the target's compiled ``target``;
        None where they do not compile."""
        drafter = self._drafter
        assert drafter is not None
        if drafter.kind == NGRAM:
            return target
        cost: CompiledCost | None = self.proposer.cost.compiled(count, drafter.extra_gemm)  # type: ignore[attr-defined]
        return cost

    def step_time(self, prefill: BatchStats, contexts: np.ndarray, ks: np.ndarray) -> float:
        """Predicted iteration seconds if the decoding requests draft ``ks`` (broadcast)."""
        ks = np.broadcast_to(ks, contexts.shape)
        return self._target_time(prefill, contexts, ks, self.proposer.draft_time(ks, contexts))

    def _target_time(
        self, prefill: BatchStats, contexts: np.ndarray, ks: np.ndarray, draft: float
    ) -> float:
        """``draft`` plus the target's step over the prefill work and the requests verifying
        ``ks`` drafts (grouped by k, ascending)."""
        stats = prefill.copy()
        add_verify_entries(stats, ks, contexts)
        return draft + self.target.time_stats(stats)

    def verify(self, batch: Batch, replica: int = 0) -> None:
        """Draw each speculating request's accepted drafts and update its decoder."""
        if batch.members is not None:
            self._verify_cohort(batch, batch.members, replica)
            return
        ks_all = batch.ks
        assert ks_all is not None
        requests = batch.requests
        accepted_all = [0] * len(requests)
        batch.accepted = accepted_all
        rows = [i for i, k in enumerate(ks_all) if k > 0]
        decoding = batch.decoding
        for i in decoding:
            requests[i].decode_steps += 1
        if not rows:
            batch.spec_totals = (0, 0, 0, 0, 0, len(decoding))
            return
        reqs = [requests[i] for i in rows]
        ks_list = [ks_all[i] for i in rows]
        ks = np.array(ks_list, dtype=np.int64)
        if self._verify_fused is not None:
            accepted, rejected_sum = self._verify_compiled(reqs, ks, max(ks_list), replica)
        else:
            accepted, rejected_sum = self._verify_python(reqs, ks, ks_list, replica)
        if self.policy.observes_batches:
            self.policy.observe_batch(replica, ks_list, accepted)
        for i, req, k, a in zip(rows, reqs, ks_list, accepted, strict=True):
            accepted_all[i] = a
            req.spec_steps += 1
            req.drafted_tokens += k
            req.accepted_tokens += a
        accepted_sum = sum(accepted)
        self.replica_alpha(replica).observe_counts(accepted_sum, rejected_sum)
        # a decoding entry drafting nothing is a k of 0 (only decoding entries draft)
        drafted = sum(ks_list)
        k_min = min(ks_list) if len(rows) == len(decoding) else 0
        totals = (drafted + len(rows), drafted, accepted_sum, k_min, max(ks_list), len(decoding))
        batch.spec_totals = totals

    def _verify_cohort(self, batch: Batch, cohort: SpecCohort, replica: int) -> None:
        """:meth:`verify` of a step whose decoding entries are the speculative cohort's members,
        in one compiled call on its table (:func:`~cbsim.engine.speculative.cohort.verify_members`):
        the same draws as :meth:`_verify_compiled`'s, the same counts."""
        batch.accepted = [0] * len(batch.requests)
        model = self._verify_fused
        assert model is not None
        own = self.slots
        count = len(cohort)
        drawn = batch.verified  # drawn with the plan (cohort_step), or now
        if drawn is None:
            levels = own.model_alpha[cohort.column(cohort_fields.SLOT)]
            if model.code == SCALED:
                levels = level_scale(levels, self.acceptance.prior_alpha())
            drawn = self._members_call(
                cohort.table, count, self.draw_stream(replica).words(), levels, model.code,
                model.iid_alpha, model.rates, model.drift,
            )  # fmt: skip
        rows, drafted, accepted, rejected, k_min, k_max = drawn
        if not rows:
            batch.spec_totals = (0, 0, 0, 0, 0, count)
            return
        if self.policy.observes_batches:
            drafting = np.flatnonzero(cohort.column(cohort_fields.DRAFTS))
            self.policy.observe_batch(
                replica,
                cohort.column(cohort_fields.DRAFTS)[drafting].tolist(),
                cohort.column(cohort_fields.ACCEPTED)[drafting].tolist(),
            )
        self.replica_alpha(replica).observe_counts(accepted, rejected)
        batch.spec_totals = (drafted + rows, drafted, accepted, k_min, k_max, count)

    @property
    def forms_cohorts(self) -> bool:
        """Whether a speculative decode cohort can hold this decoder's running requests: its
        steps are planned and verified in compiled calls."""
        return self._step is not None and self._verify_fused is not None

    def _verify_python(
        self, reqs: list[Request], ks: np.ndarray, ks_list: list[int], replica: int
    ) -> tuple[list[int], int]:
        """:meth:`verify`'s draws and the decoders' updates through the acceptance model,
        the drafter's staleness and each request's controller: the accepted drafts and how
        many steps rejected one."""
        states = self.states(reqs)
        slots = np.array([s.slot for s in states], dtype=np.int64)
        model_alphas = self.slots.model_alpha[slots]
        drawn = self.acceptance.draw(reqs, model_alphas, ks, self.draw_rng(replica))
        if self.stale_drafter:
            drawn = stale_accepted(drawn, states, self.stale_scale, self.stale_rng(replica))
        accepted: list[int] = drawn.tolist()
        if len(accepted) != len(reqs) or bool(((drawn < 0) | (drawn > ks)).any()):
            for k, a in zip(ks_list, accepted, strict=True):
                check_outcome(k, a)
        rejected_sum = self.slots.observe(
            slots, ks, np.asarray(accepted, dtype=np.int64), EMA_WEIGHT
        )
        if self._controllers_learn:
            for spec, k, a in zip(states, ks_list, accepted, strict=True):
                spec.controller.observe(StepOutcome(drafted=k, accepted=a))
        return accepted, rejected_sum

    def _verify_compiled(
        self, reqs: list[Request], ks: np.ndarray, width: int, replica: int
    ) -> tuple[list[int], int]:
        """:meth:`_verify_python` in one compiled call
        (:func:`~cbsim.engine.speculative.step_kernel.verify_step_kernel`) for a compiled
        acceptance model without a stale drafter or learning controllers: the same uniforms
        from the replica's stream, the same counts."""
        model = self._verify_fused
        assert model is not None
        own = self.slots
        slots = np.array(
            [
                spec.slot
                if isinstance(spec := req.spec, SpecState) and spec.slots is own
                else self.state(req).slot
                for req in reqs
            ],
            dtype=np.int64,
        )
        levels = own.model_alpha[slots]
        if model.code == SCALED:
            levels = level_scale(levels, self.acceptance.prior_alpha())
        count = len(reqs)
        generated = _NO_OUTPUTS
        if model.drift:
            generated = np.fromiter(map(GENERATED, reqs), np.int64, count)
        drawn, rejected_sum = self._verify_call(
            self.draw_stream(replica).words(), width, ks, slots, levels, generated,
            own.accepted, own.rejected, own.ema, model.code, model.iid_alpha, model.rates,
            model.drift, EMA_WEIGHT,
        )  # fmt: skip
        return drawn.tolist(), int(rejected_sum)


def _priced(
    batch: Batch,
    prefill: BatchStats,
    count: int,
    tokens: int,
    kv_tokens: int,
    pairs: float,
    plain: int,
    drafting: float,
    target_s: float,
) -> float:
    """Set ``batch``'s work to ``prefill`` plus the verify entries of its ``count`` decoding
    requests (``tokens`` verified over ``kv_tokens`` keys and values, ``pairs`` causal pairs,
    ``plain`` of them drafting nothing), its drafting seconds, which it returns, and the target's
    seconds for it where the plan priced them (``target_s``; -1: not priced). ``prefill``, the
    caller's own and not read after, becomes the batch's stats."""
    batch.prefill_tokens = prefill.num_tokens
    stats = prefill
    stats.num_requests += count
    stats.num_tokens += tokens
    stats.sampled_tokens += tokens
    stats.decode_tokens += tokens
    stats.decode_kv_tokens += kv_tokens
    stats.decode_pairs += pairs
    stats.decode_requests += count
    batch.stats = stats
    batch.decode_tokens = plain
    batch.draft_s = drafting
    batch.target_s = target_s
    return float(drafting)


class FusedStep(NamedTuple):
    """A k policy and proposer as :func:`~cbsim.engine.speculative.step_kernel.plan_step_kernel`
    takes them."""

    policy: int
    fixed_k: int
    table: np.ndarray
    k_max: int
    per_request: bool
    drafter: CompiledProposer


def fused_step(policy: KPolicy, drafter: CompiledProposer | None) -> FusedStep | None:
    """How a stepped iteration's drafts are planned in one compiled call under ``policy``
    (``fixed``, ``batch_table``, ``goodput``, ``adaptive_hysteresis``) with a proposer whose pricing
    compiles, or None."""
    if drafter is None or policy.k_max + 1 > DECODE_QUERY_MAX:
        return None
    table = np.zeros((1, 3), dtype=np.int64)
    if isinstance(policy, GoodputK):
        return FusedStep(GOODPUT, 0, table, policy.k_max, policy.per_request, drafter)
    if isinstance(policy, FixedK):
        return FusedStep(FIXED, policy.k, table, policy.k_max, False, drafter)
    if isinstance(policy, BatchTableK):
        table = np.asarray(policy.table, dtype=np.int64).reshape(-1, 3)
        return FusedStep(BATCH_TABLE, 0, table, policy.k_max, False, drafter)
    if isinstance(policy, AdaptiveHysteresisK):  # its tier's k for the batch, as a fixed k
        return FusedStep(ADAPTIVE, 0, table, policy.k_max, False, drafter)
    return None


_NO_OUTPUTS = np.zeros(1, dtype=np.int64)
"""The outputs so far a verification without drift passes (never read)."""

_NO_BASE = StepBase(0, 0, 0, 0.0, 0, 0, 0.0, 0)
"""The sweep's base where the policy does not sweep (never read)."""


def add_verify_entries(stats: BatchStats, ks: np.ndarray, contexts: np.ndarray) -> None:
    """Add the verify entries of requests drafting ``ks`` over ``contexts`` cached tokens (k + 1
    queries each, all sampled) to ``stats``, grouped by k: every term of the sums is a whole
    number or a half far below 2**53, so the sums are those of adding the entries one by one."""
    counts = np.bincount(ks)
    context_sums = np.bincount(ks, weights=contexts)
    for k in np.flatnonzero(counts).tolist():
        stats.add_many(int(counts[k]), k + 1, int(context_sums[k]))


def batch_sampled(req: Request, new_tokens: int) -> int:
    """Logits a prefill chunk needs: one when it completes the prefill, else none."""
    return 1 if req.kv_tokens + new_tokens >= req.prefill_target else 0
