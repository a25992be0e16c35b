"""BatchPolicyTrainer: analyse and estimate a batch of rollouts, then one plan-and-apply.

Analysis and estimation run concurrently (bounded) and outside the repository lock; only
the engine's ``plan_and_apply`` takes the lock, once per batch. A rollout whose analysis or
estimation fails is recorded in ``errors`` and the rest go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from expgit.core.domain import (
    PolicyApplyResult,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    RolloutTrainingResult,
    SemanticGradient,
)
from expgit.errors import ExpgitError, UsageError
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext, gather_bounded
from expgit.train.interfaces import (
    ExperienceSet,
    GradientEstimator,
    RolloutAnalyzer,
    RolloutReflector,
)


class TrainingEngine(Protocol):
    """The shared plan-and-apply kernel (:class:`expgit.train.engine.PolicyTrainingEngine`):
    takes the lock, reloads ``main``, plans and applies one batch of gradients;
    ``repo``: where ``main`` is read (None: an engine with no repository, e.g. a fake)."""

    @property
    def repo(self) -> ExperienceRepository | None: ...

    async def plan_and_apply(self, gradients: Sequence[SemanticGradient],
                             context: PipelineContext
                             ) -> tuple[PolicyUpdatePlan, PolicyApplyResult]: ...


def describe(exc: BaseException) -> str:
    """A one-line description of a failure for an ``errors`` list."""
    if isinstance(exc, ExpgitError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Prepared:
    """One rollout after analysis and estimation (or the failure that stopped it)."""

    rollout: Rollout
    analysis: RolloutAnalysis | None = None
    gradients: list[SemanticGradient] = field(default_factory=list)
    error: str | None = None


async def prepare(analyzer: RolloutAnalyzer, estimator: GradientEstimator, rollout: Rollout,
                  policy_set: ExperienceSet, context: PipelineContext,
                  analysis: RolloutAnalysis | None = None,
                  reflector: RolloutReflector | None = None) -> Prepared:
    """Analyse (unless ``analysis`` is given) and estimate one rollout, in one step with
    a ``reflector`` when no analysis is given; never raises for a failure of either stage
    (it is returned in ``error``)."""
    stage = "analysis"
    try:
        if analysis is None and reflector is not None:
            stage = "reflection"
            analysis, gradients = await reflector.reflect(rollout, policy_set, context)
            return Prepared(rollout, analysis, list(gradients))
        if analysis is None:
            analysis = await analyzer.analyze(rollout, context)
        stage = "estimation"
        gradients = await estimator.estimate(analysis, policy_set, context)
    except Exception as exc:  # one rollout's failure never stops the others
        return Prepared(rollout, analysis,
                        error=f"case {rollout.case.name}: {stage} failed: {describe(exc)}")
    return Prepared(rollout, analysis, list(gradients))


def match_analyses(rollouts: Sequence[Rollout],
                   analyses: Sequence[RolloutAnalysis] | None
                   ) -> list[RolloutAnalysis | None]:
    """For each rollout, the given analysis of it (matched by equal rollout), or None."""
    if not analyses:
        return [None] * len(rollouts)
    unused = list(analyses)
    matched: list[RolloutAnalysis | None] = []
    for rollout in rollouts:
        index = next((i for i, a in enumerate(unused) if a.rollout == rollout), None)
        matched.append(unused.pop(index) if index is not None else None)
    if unused:
        raise UsageError(f"{len(unused)} given analyses belong to none of the rollouts "
                         f"(first: case {unused[0].rollout.case.name!r})")
    return matched


def update_errors(apply_result: PolicyApplyResult | None) -> list[str]:
    if apply_result is None:
        return []
    return [f"update: {message}" for message in apply_result.errors]


class BatchPolicyTrainer:
    """Trains on an explicit batch: analyse and estimate every rollout concurrently (at
    most ``concurrency`` at a time, outside the lock), then one ``plan_and_apply`` of all
    their gradients. Per-rollout failures and a failed update land in ``errors``. With a
    ``reflector``, a rollout with no given analysis is analysed and estimated in its one
    call."""

    def __init__(self, analyzer: RolloutAnalyzer, estimator: GradientEstimator,
                 engine: TrainingEngine, *, concurrency: int = 4,
                 reflector: RolloutReflector | None = None) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, not {concurrency}")
        self.analyzer = analyzer
        self.estimator = estimator
        self.engine = engine
        self.concurrency = concurrency
        self.reflector = reflector

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: ExperienceSet,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        given = match_analyses(rollouts, analyses)
        prepared = await gather_bounded(self.concurrency, (
            prepare(self.analyzer, self.estimator, r, policy_set, context, a, self.reflector)
            for r, a in zip(rollouts, given, strict=True)))
        result = RolloutTrainingResult(
            analyses=[p.analysis for p in prepared if p.analysis is not None],
            gradients=[g for p in prepared for g in p.gradients],
            errors=[p.error for p in prepared if p.error is not None])
        return await plan_and_apply(self.engine, result, context)


async def plan_and_apply(engine: TrainingEngine, result: RolloutTrainingResult,
                         context: PipelineContext) -> RolloutTrainingResult:
    """One ``plan_and_apply`` of ``result``'s gradients (none: nothing to do) into
    ``result``; a failed update lands in its ``errors``."""
    if not result.gradients:
        return result
    try:
        result.plan, result.apply_result = await engine.plan_and_apply(
            result.gradients, context)
    except ExpgitError as exc:
        result.errors.append(f"update failed: {exc.message}")
        return result
    result.errors.extend(update_errors(result.apply_result))
    return result
