"""OfflinePolicyOptimizationPipeline (docs/design.md, "One batch"): train, eval,
train_from_rollouts.

``train``: optional baseline eval (epoch -1), then per epoch and batch: snapshot ``main``
-> execute -> ``trainer.train_rollouts``, then optional final eval (epoch = max_epochs).
A final eval of a tree the run already measured reuses that measurement (``reused``: the
phase it comes from) and makes no call: in apply mode the applied proposal's candidate eval
(or the baseline if nothing was applied); in propose mode ``main`` never moves, so the
final eval is the baseline's. Every batch then runs against the same ``main``; the result
records the policy each batch saw and says so in ``notes``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from expgit.core.domain import (
    Case,
    FreeMetadata,
    Rollout,
    RolloutTrainingResult,
)
from expgit.core.redaction.messages import Redactor
from expgit.errors import ExpgitError, InvalidInputError
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import ListCaseLoader
from expgit.train.context import ExecutionContext, PipelineContext
from expgit.train.groups import group_cases
from expgit.train.interfaces import (
    CaseLoader,
    ExperienceSet,
    PolicySnapshotter,
    PolicyTrainer,
    RolloutExecutor,
)
from expgit.train.measurement.candidate import summarize
from expgit.train.measurement.candidate_stage import CandidateStage, Evaluate
from expgit.train.measurement.phase_metrics import (
    BatchRecord,
    PhaseMetrics,
    PipelineEvaluationResult,
    PipelineResult,
    add_reviewed,
    add_training,
    rollout_summary,
    score_eval,
)


class PipelineObserver(Protocol):
    """Progress callbacks (the CLI's live line or plain lines); must not raise. Per phase:
    ``phase_started``; per batch ``stage("rollout")``, ``rollout_done`` after each case
    (when the executor tells), ``stage("train")`` before training a batch, ``batch_done``;
    then ``phase_done``."""

    def phase_started(self, phase: str, epoch: int) -> None: ...

    def stage(self, name: str) -> None: ...

    def rollout_done(self) -> None: ...

    def batch_done(self, phase: str, epoch: int, cases: int) -> None: ...

    def phase_done(self, metrics: PhaseMetrics) -> None: ...


class OfflinePolicyOptimizationPipeline:
    """Orchestrates CaseLoader -> RolloutExecutor -> PolicyTrainer over epochs and
    batches, each batch against a fresh snapshot of ``main``; eval runs the executor only."""

    def __init__(self, repo: ExperienceRepository, snapshotter: PolicySnapshotter,
                 executor: RolloutExecutor, trainer: PolicyTrainer, *,
                 observer: PipelineObserver | None = None,
                 candidates: CandidateStage | None = None,
                 redactor: Redactor | None = None, group_size: int = 1) -> None:
        self.repo = repo
        self.group_size = group_size  # runs of each training case (its trainer's groups)
        self.candidates = candidates  # with an eval loader: each proposal is measured
        self.redactor = redactor or Redactor(repo.settings.limits.max_message_chars)
        self.snapshotter = snapshotter
        self.executor = executor
        self.trainer = trainer
        self.observer = observer

    def _started(self, phase: str, epoch: int) -> None:
        if self.observer is not None:
            self.observer.phase_started(phase, epoch)

    def _stage(self, name: str) -> None:
        if self.observer is not None:
            self.observer.stage(name)

    def _execution(self, snapshot_id: str, metadata: FreeMetadata) -> ExecutionContext:
        """The batch's execution context, telling the observer of each rollout done."""
        self._stage("rollout")
        done = self.observer.rollout_done if self.observer is not None else None
        return ExecutionContext(snapshot_id, metadata=metadata, rollout_done=done)

    async def _policy(self, at: str | ExperienceSet | None = None
                      ) -> tuple[ExperienceSet, str]:
        """The policy at commit ``at`` (default ``main``), or ``at`` itself when it is a
        policy made in memory (a skill's evals run without that skill)."""
        policy_set = at if isinstance(at, ExperienceSet) else await asyncio.to_thread(
            self.repo.snapshot, at)
        return policy_set, self.snapshotter.snapshot(policy_set)

    async def train(self, case_loader: CaseLoader, context: PipelineContext,
                    eval_loader: CaseLoader | None = None) -> PipelineResult:
        main_before = await asyncio.to_thread(self.repo.main_commit)
        result = PipelineResult(mode=context.mode, main_before=main_before,
                                main_after=main_before)
        # the trees this run measured: the candidate stage's, or (without one) the baseline's
        measured = self.candidates or CandidateStage(self.repo)
        if eval_loader is not None:
            result.baseline = await self._evaluate(
                "baseline_eval", eval_loader, replace(context, epoch=-1))
            measured.remember(main_before, result.baseline.rollouts)
        stage = self.candidates if eval_loader is not None else None

        async def evaluate(commit: str, phase: str, epoch: int,
                           cases: Sequence[Case] | None = None) -> list[Rollout]:
            assert eval_loader is not None
            loader = eval_loader if cases is None else ListCaseLoader(cases, len(cases))
            done = await self._evaluate(phase, loader, replace(context, epoch=epoch),
                                        at=commit)
            result.candidate_phases.append(done.metrics)
            return done.rollouts

        for epoch in range(context.max_epochs):
            result.epochs.append(await self._train_epoch(
                case_loader, replace(context, epoch=epoch),
                None if stage is None else (stage, evaluate)))
        if stage is not None:
            result.candidates = list(stage.reports)
        if eval_loader is not None:
            result.final = await self._final_eval(eval_loader, context, measured)
        result.main_after = await asyncio.to_thread(self.repo.main_commit)
        if context.mode == "propose":
            result.notes.append(
                f"propose mode: {self.repo.settings.main_branch} stayed at "
                f"{main_before[:12]}; every batch was trained against it, so later batches "
                "did not see the proposals of earlier ones")
        return result

    async def _final_eval(self, eval_loader: CaseLoader, context: PipelineContext,
                          measured: CandidateStage) -> PipelineEvaluationResult:
        """The final eval of ``main``; when a phase of this run measured its tree (the
        baseline while ``main`` has not moved, as in propose mode, or the applied
        proposal's candidate eval), that measurement, marked ``reused``."""
        final = replace(context, epoch=context.max_epochs)
        main = await asyncio.to_thread(self.repo.main_commit)
        known = await asyncio.to_thread(measured.measured, main)
        if known is None:
            return await self._evaluate("final_eval", eval_loader, final)
        source, rollouts = known
        policy_set, snapshot_id = await self._policy(main)
        metrics = PhaseMetrics(phase="final_eval", epoch=final.epoch, reused=source,
                               rollouts=[rollout_summary(r, r.evaluation) for r in rollouts],
                               batches=[BatchRecord(batch=0, cases=len(rollouts),
                                                    policy_commit=policy_set.commit,
                                                    policy_snapshot_id=snapshot_id)])
        score_eval(metrics, rollouts)
        return PipelineEvaluationResult(metrics=metrics, rollouts=rollouts)

    async def _train_epoch(self, case_loader: CaseLoader, context: PipelineContext,
                           review: tuple[CandidateStage, Evaluate] | None = None
                           ) -> PhaseMetrics:
        """``review``: the candidate stage measures each proposal (and, in apply mode,
        applies it if the gate lets it through), so the trainer only proposes."""
        metrics = PhaseMetrics(phase="train_epoch", epoch=context.epoch)
        started = time.monotonic()
        self._started(metrics.phase, context.epoch)
        number = 0
        trained: list[Rollout] = []
        async for cases in case_loader.batches(context):
            policy_set, snapshot_id = await self._policy()
            runs = group_cases(cases, self.group_size,
                               self.repo.settings.train.group_temperature)
            rollouts = self.redactor.models(await self.executor.execute(
                self.redactor.models(runs), policy_set, self._execution(
                    snapshot_id, {"phase": "train", "epoch": context.epoch})))
            trained += rollouts
            self._stage("train")
            training = await self.trainer.train_rollouts(
                rollouts, policy_set,
                context if review is None else replace(context, mode="propose"))
            record = BatchRecord(batch=number, cases=len(cases),
                                 policy_commit=policy_set.commit,
                                 policy_snapshot_id=snapshot_id)
            add_training(metrics, record, rollouts, training, context.mode)
            if review is not None and record.proposals:
                stage, evaluate = review
                add_reviewed(metrics, record, await stage.review(
                    evaluate, record.proposals, context.epoch), context.mode)
            number += 1
            if self.observer is not None:
                self.observer.batch_done(metrics.phase, context.epoch, len(runs))
        if self.group_size > 1:  # pass^k of the epoch's groups
            metrics.summary = summarize(trained, self.group_size)
        metrics.seconds = time.monotonic() - started
        if self.observer is not None:
            self.observer.phase_done(metrics)
        return metrics

    async def eval(self, case_loader: CaseLoader, context: PipelineContext, *,
                   at: str | ExperienceSet | None = None, phase: str = "eval"
                   ) -> PipelineEvaluationResult:
        """Run and score the cases at ``at`` (default ``main``; a commit, or a policy
        made in memory); no analysis, no writes.
        Every rollout must carry an evaluation (an ExpgitError otherwise)."""
        return await self._evaluate(phase, case_loader, context, at=at)

    async def _evaluate(self, phase: str, case_loader: CaseLoader, context: PipelineContext,
                        *, at: str | ExperienceSet | None = None
                        ) -> PipelineEvaluationResult:
        """``at``: the commit to evaluate (default: ``main`` at each batch)."""
        metrics = PhaseMetrics(phase=phase, epoch=context.epoch)
        started = time.monotonic()
        self._started(phase, context.epoch)
        all_rollouts: list[Rollout] = []
        number = 0
        async for cases in case_loader.batches(context):
            policy_set, snapshot_id = await self._policy(at)
            rollouts = self.redactor.models(await self.executor.execute(
                self.redactor.models(cases), policy_set, self._execution(
                    snapshot_id, {"phase": phase, "epoch": context.epoch})))
            for rollout in rollouts:
                if rollout.evaluation is None:
                    raise ExpgitError(
                        f"{phase}: the rollout of case {rollout.case.name!r} has no "
                        "evaluation; eval needs an executor that evaluates its rollouts")
            metrics.batches.append(BatchRecord(batch=number, cases=len(cases),
                                               policy_commit=policy_set.commit,
                                               policy_snapshot_id=snapshot_id))
            metrics.rollouts += [rollout_summary(r, r.evaluation) for r in rollouts]
            metrics.errors += [f"case {r.case.name}: rollout failed: {r.error}"
                               for r in rollouts if r.error]
            all_rollouts += rollouts
            number += 1
            if self.observer is not None:
                self.observer.batch_done(phase, context.epoch, len(cases))
        score_eval(metrics, all_rollouts)
        metrics.seconds = time.monotonic() - started
        if self.observer is not None:
            self.observer.phase_done(metrics)
        return PipelineEvaluationResult(metrics=metrics, rollouts=all_rollouts)

    async def train_from_rollouts(self, rollouts: Sequence[Rollout],
                                  context: PipelineContext) -> RolloutTrainingResult:
        """Train on recorded rollouts (no loader, no executor) against the current
        ``main``. Each rollout must include its case."""
        for number, rollout in enumerate(rollouts, start=1):
            if rollout.case is None or not rollout.case.name.strip():
                raise InvalidInputError(f"rollout {number}: it must include its case")
        policy_set, _ = await self._policy()
        return await self.trainer.train_rollouts(self.redactor.models(rollouts), policy_set,
                                                 context)
