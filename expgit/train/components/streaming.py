"""StreamingPolicyTrainer: rollouts arrive one by one; their gradients are batched.

``submit_rollout`` analyses and estimates at once (outside any lock), then hands the
gradients to the batcher and waits for the batch they land in. One background task flushes
a batch when ``max_gradients_per_update`` gradients are pending, when the oldest pending
gradient has waited ``max_wait_seconds`` (checked every ``timer_check_interval_seconds``),
or on :meth:`flush` / :meth:`close`. Batches go through the engine one at a time. A
rollout's gradients are never split across batches.

The git work of submissions and batches (trajectory and gradient commits, snapshots,
proposals, applies) runs in threads (:func:`asyncio.to_thread`), off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from expgit.core.domain import (
    PlanNotes,
    PolicyApplyResult,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    RolloutTrainingResult,
)
from expgit.errors import UsageError
from expgit.train.components.policy_trainer import (
    Prepared,
    TrainingEngine,
    describe,
    match_analyses,
    prepare,
    update_errors,
)
from expgit.train.context import PipelineContext, gather_bounded
from expgit.train.interfaces import (
    ExperienceSet,
    GradientEstimator,
    RolloutAnalyzer,
    RolloutReflector,
)
from expgit.train.measurement.phase_metrics import combined_apply_result


@dataclass
class _Outcome:
    plan: PolicyUpdatePlan | None = None
    apply_result: PolicyApplyResult | None = None
    error: str | None = None


@dataclass
class _Entry:
    prepared: Prepared
    context: PipelineContext
    seq: int
    since: float
    done: asyncio.Future[_Outcome] = field(repr=False)


def scoped(prepared: Prepared, outcome: _Outcome) -> RolloutTrainingResult:
    """One caller's view of a batch: its analysis, its gradients, the plan items citing
    them, and the shared apply result."""
    mine = {g.gradient_id for g in prepared.gradients if g.gradient_id}
    plan = None
    if outcome.plan is not None:
        plan = PolicyUpdatePlan(
            items=[i for i in outcome.plan.items if mine & set(i.gradient_ids)],
            metadata=outcome.plan.metadata.model_copy())
    errors = [outcome.error] if outcome.error else update_errors(outcome.apply_result)
    return RolloutTrainingResult(
        analyses=[prepared.analysis] if prepared.analysis else [],
        gradients=list(prepared.gradients), plan=plan, apply_result=outcome.apply_result,
        errors=errors)


class StreamingPolicyTrainer:
    """Trains on rollouts as they come: analyse and estimate each at once, batch the
    gradients by count and age, plan and apply each batch once, in order. Each caller's
    result covers only its own gradients; a failed batch fails only its own callers."""

    def __init__(self, analyzer: RolloutAnalyzer, estimator: GradientEstimator,
                 engine: TrainingEngine, *, max_gradients_per_update: int = 8,
                 max_wait_seconds: float = 10.0, timer_check_interval_seconds: float = 1.0,
                 concurrency: int = 4, reflector: RolloutReflector | None = None) -> None:
        if max_gradients_per_update < 1 or max_wait_seconds <= 0 \
                or timer_check_interval_seconds <= 0 or concurrency < 1:
            raise UsageError("streaming trainer: max_gradients_per_update and concurrency "
                             "must be >= 1, the waits > 0")
        self.analyzer = analyzer
        self.estimator = estimator
        self.reflector = reflector  # one call per rollout with no given analysis
        self.engine = engine
        self.max_gradients_per_update = max_gradients_per_update
        self.max_wait_seconds = max_wait_seconds
        self.timer_check_interval_seconds = timer_check_interval_seconds
        self.concurrency = concurrency  # of analysis/estimation in train_rollouts
        self.batches_applied = 0
        self._pending: list[_Entry] = []
        self._seq = 0
        self._force_upto = -1
        self._closing = False
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._main: ExperienceSet | None = None

    # ------------------------------------------------------------------ public API
    async def submit_rollout(self, rollout: Rollout, context: PipelineContext,
                             policy_set: ExperienceSet | None = None,
                             analysis: RolloutAnalysis | None = None
                             ) -> RolloutTrainingResult:
        """Analyse and estimate ``rollout`` (against ``policy_set``, default: the current
        ``main``), then wait until its gradients are planned and applied."""
        self._check_open()
        prepared = await self._prepare(rollout, context, policy_set, analysis)
        if prepared.error is not None or not prepared.gradients:
            return scoped(prepared, _Outcome(error=prepared.error))
        return scoped(prepared, await asyncio.shield(self._enqueue(prepared, context)))

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: ExperienceSet,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        """The PolicyTrainer view: submit every rollout, flush, and merge the results.
        ``apply_result.metadata.batches`` lists every batch's apply result."""
        self._check_open()
        given = match_analyses(rollouts, analyses)
        prepared = await gather_bounded(self.concurrency, (
            self._prepare(r, context, policy_set, a)
            for r, a in zip(rollouts, given, strict=True)))
        waiting = [(p, self._enqueue(p, context)) for p in prepared
                   if p.error is None and p.gradients]
        await self.flush()
        outcomes = {id(p): await asyncio.shield(f) for p, f in waiting}
        return merge_results(prepared, outcomes)

    async def flush(self) -> None:
        """Flush every gradient submitted so far, now, and wait for those batches."""
        if not self._pending:
            return
        self._force_upto = self._seq
        futures = [e.done for e in self._pending]
        self._poke()
        await asyncio.gather(*(asyncio.shield(f) for f in futures))

    async def close(self) -> None:
        """Flush what is pending and stop; later submissions are refused."""
        self._closing = True
        self._poke()
        if self._worker is not None and not self._worker.done():
            await asyncio.shield(self._worker)

    # ------------------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closing:
            raise UsageError("the streaming trainer is closed")

    async def _prepare(self, rollout: Rollout, context: PipelineContext,
                       policy_set: ExperienceSet | None,
                       analysis: RolloutAnalysis | None) -> Prepared:
        if policy_set is None:
            try:
                policy_set = await asyncio.to_thread(self._current_main)
            except Exception as exc:
                return Prepared(rollout, analysis, error=f"case {rollout.case.name}: "
                                f"cannot read the policy: {describe(exc)}")
        return await prepare(self.analyzer, self.estimator, rollout, policy_set, context,
                             analysis, self.reflector)

    def _current_main(self) -> ExperienceSet:
        """The snapshot of ``main`` now (reused while ``main`` has not moved)."""
        repo = self.engine.repo
        if repo is None:
            raise UsageError("submit_rollout needs a policy_set: the engine has no repo")
        cached = self._main
        commit = repo.main_commit()
        if cached is None or cached.commit != commit:
            cached = self._main = repo.snapshots.load(commit)
        return cached

    def _enqueue(self, prepared: Prepared, context: PipelineContext
                 ) -> asyncio.Future[_Outcome]:
        loop = asyncio.get_running_loop()
        self._seq += 1
        entry = _Entry(prepared, context, self._seq, loop.time(), loop.create_future())
        stopped = self._worker is not None and self._worker.done()
        if stopped and self._closing:
            entry.done.set_result(_Outcome(error="the streaming trainer was closed before "
                                           "these gradients could be applied"))
            return entry.done
        self._pending.append(entry)
        if self._worker is None or stopped:  # first use, or its event loop has ended
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._run(), name="expgit-streaming-trainer")
        if self._pending_count() >= self.max_gradients_per_update:
            self._poke()
        return entry.done

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _pending_count(self) -> int:
        return sum(len(e.prepared.gradients) for e in self._pending)

    def _take_batch(self, now: float) -> list[_Entry]:
        if not self._pending:
            return []
        due = (self._pending_count() >= self.max_gradients_per_update
               or now - self._pending[0].since >= self.max_wait_seconds
               or self._pending[0].seq <= self._force_upto or self._closing)
        if not due:
            return []
        batch: list[_Entry] = []
        count = 0
        while self._pending and (not batch or count + len(
                self._pending[0].prepared.gradients) <= self.max_gradients_per_update):
            entry = self._pending.pop(0)
            batch.append(entry)
            count += len(entry.prepared.gradients)
        return batch

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = self._take_batch(loop.time())
            if batch:
                await self._apply(batch)
                continue
            if self._closing and not self._pending:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.timer_check_interval_seconds)

    async def _apply(self, batch: list[_Entry]) -> None:
        gradients = [g for e in batch for g in e.prepared.gradients]
        try:
            plan, apply_result = await self.engine.plan_and_apply(gradients, batch[0].context)
            outcome = _Outcome(plan, apply_result)
        except Exception as exc:  # fails this batch's callers only
            outcome = _Outcome(error=f"update failed: {describe(exc)}")
        self.batches_applied += 1
        for entry in batch:
            if not entry.done.done():
                entry.done.set_result(outcome)


def merge_results(prepared: Sequence[Prepared], outcomes: dict[int, _Outcome]
                  ) -> RolloutTrainingResult:
    """One result for many rollouts that may have gone through several batches."""
    batches: list[_Outcome] = list({id(o): o for o in outcomes.values()}.values())
    result = RolloutTrainingResult(
        analyses=[p.analysis for p in prepared if p.analysis is not None],
        gradients=[g for p in prepared for g in p.gradients],
        errors=[p.error for p in prepared if p.error is not None])
    plans = [o.plan for o in batches if o.plan is not None]
    if plans:
        result.plan = PolicyUpdatePlan(items=[i for p in plans for i in p.items],
                                       metadata=PlanNotes(batches=len(plans)))
    result.apply_result = combined_apply_result(
        [o.apply_result for o in batches if o.apply_result is not None])
    for outcome in batches:
        result.errors.extend([outcome.error] if outcome.error
                             else update_errors(outcome.apply_result))
    return result
