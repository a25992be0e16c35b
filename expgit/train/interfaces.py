"""The Protocols of the training pipeline. Each docstring is the contract.

The chain of docs/design.md ("The chain of components"), on git:
CaseLoader -> RolloutExecutor -> PolicyTrainer (RolloutAnalyzer -> GradientEstimator, or
both in one RolloutReflector -> PolicyOptimizer -> PolicyUpdater). ``ExperienceSet`` is a
snapshot of ``main``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from expgit.core.domain import (
    Case,
    PolicyApplyResult,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    RolloutTrainingResult,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.store.derived.snapshot import Snapshot
from expgit.train.context import ExecutionContext, PipelineContext

ExperienceSet = Snapshot


class CaseLoader(Protocol):
    """Yields the cases of one pass, batch by batch.

    May assume nothing about the caller's concurrency. Must yield each case at most once
    per call of :meth:`batches` and never an empty batch. Raises ExpgitError when the
    source is unreadable or malformed (with the place of the problem), before yielding.
    """

    def batches(self, context: PipelineContext) -> AsyncIterator[list[Case]]: ...


class RolloutExecutor(Protocol):
    """Runs the agent on cases against one policy snapshot.

    May assume the snapshot is immutable. Must return exactly one Rollout per case, in
    order, carrying ``context.policy_snapshot_id`` unchanged; a case that fails becomes a
    Rollout with ``error`` set and a failed evaluation, never an exception. Must never
    write to the experience repository. Raises only for misuse (no cases to run is fine).
    """

    async def execute(self, cases: Sequence[Case], policy_set: ExperienceSet,
                      context: ExecutionContext) -> list[Rollout]: ...


class RolloutEvaluator(Protocol):
    """Judges a rollout against its case's rubric when the environment did not.

    Must return a RubricEvaluation with one CriterionResult per criterion; passed = every
    required criterion passed; score = weighted mean. Must never write anything.
    Raises LLMError only if an ``llm_judge`` criterion's call fails.
    """

    async def evaluate(self, rollout: Rollout, context: PipelineContext) -> RubricEvaluation: ...


class RolloutAnalyzer(Protocol):
    """Turns a rollout into a trajectory: the training sample.

    Evaluation: ``rollout.evaluation`` if present, else the injected evaluator, else the
    fallback (passed iff a trajectory could be extracted). Must store the trajectory on the
    trajectories branch only (never on ``main``), content-addressed so the same rollout is
    stored once. At most one LLM call. Raises LLMError when that call fails.
    """

    async def analyze(self, rollout: Rollout, context: PipelineContext) -> RolloutAnalysis: ...


class GradientEstimator(Protocol):
    """Proposes edits of experiences from one analysis.

    May assume the experience set is a snapshot of ``main``. Must make at most one LLM call
    per analysis, commit each proposed edit as a gradient (the core's propose API) and
    return them with ``gradient_id`` set; an invalid proposed edit is dropped with a
    recorded reason, never committed. May return no gradient. Never touches ``main``.
    """

    async def estimate(self, analysis: RolloutAnalysis, experience_set: ExperienceSet,
                       context: PipelineContext) -> list[SemanticGradient]: ...


class RolloutReflector(Protocol):
    """Analyses a rollout and proposes its edits in one step: a RolloutAnalyzer and a
    GradientEstimator in one, with their contracts together.

    May assume the experience set is a snapshot of ``main``. Must store the trajectory
    as the analyzer does and commit each valid edit as a gradient as the estimator does
    (an invalid one dropped with its reason in ``analysis.metadata.rejected_edits``);
    never touches ``main``. At most one LLM call per rollout. Raises LLMError when that
    call fails.
    """

    async def reflect(self, rollout: Rollout, policy_set: ExperienceSet,
                      context: PipelineContext
                      ) -> tuple[RolloutAnalysis, list[SemanticGradient]]: ...


class PolicyOptimizer(Protocol):
    """Plans one update from a batch of gradients; only plans, never writes.

    Must cite, in each plan item, the gradients it came from; must keep every experience
    within the token budgets (refuse or compress, never exceed). One LLM call per chunk of
    at most ``gradients_per_chunk`` gradients. Raises LLMError on a failed call, and
    ExpgitError when no valid plan can be made.
    """

    async def plan(self, gradients: Sequence[SemanticGradient], policy_set: ExperienceSet,
                   context: PipelineContext) -> PolicyUpdatePlan: ...


class PolicyUpdater(Protocol):
    """The write boundary: turns a plan into a proposal and, in apply mode, applies it.

    Must go through the core's proposal and apply APIs (guard + CAS); a failure leaves
    ``main`` where it was and is reported in ``errors`` or raised as ConflictError.
    The caller holds the repository lock.
    """

    async def apply(self, plan: PolicyUpdatePlan, policy_set: ExperienceSet,
                    context: PipelineContext) -> PolicyApplyResult: ...


class PolicyTrainer(Protocol):
    """Trains on rollouts: analyse, estimate, plan, apply.

    Must record per-rollout failures in the result's ``errors`` and go on with the rest.
    ``analyses`` given: skip analysis for those rollouts.
    """

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: ExperienceSet,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult: ...


class PolicySnapshotter(Protocol):
    """The id of a policy snapshot: stable for equal content, different otherwise."""

    def snapshot(self, policy_set: ExperienceSet) -> str: ...
