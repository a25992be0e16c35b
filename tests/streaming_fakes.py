"""Fakes of the streaming trainer's collaborators (analyzer, estimator, engine), with
rollouts that carry how many gradients each should yield. Shared by the streaming and
git-executor tests."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from json_value import number

from expgit.core.domain import (
    Case,
    ExperienceSetRef,
    PolicyApplyResult,
    PolicyPlanItem,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.errors import ExpgitError
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.context import PipelineContext

POLICY = Snapshot(commit="0" * 40, id="1" * 40, root="experiences", entries={}, strays=[])


def rollout(name: str, gradients: int = 1, **metadata: Any) -> Rollout:
    case = Case(name=name, task_signature=name, rubric=Rubric(
        name=name, criteria=[RubricCriterion(name="ok")]))
    return Rollout(case=case, policy_snapshot_id=POLICY.id,
                   metadata={"gradients": gradients, **metadata})


class FakeAnalyzer:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.calls: list[str] = []

    async def analyze(self, rollout: Rollout, context: PipelineContext) -> RolloutAnalysis:
        self.calls.append(rollout.case.name)
        await asyncio.sleep(0)
        if rollout.case.name in self.fail:
            raise ExpgitError(f"analyzer refused {rollout.case.name}")
        return RolloutAnalysis(rollout=rollout,
                               evaluation=RubricEvaluation(passed=True, score=1.0))


class FakeEstimator:
    async def estimate(self, analysis: RolloutAnalysis, experience_set: Snapshot,
                       context: PipelineContext) -> list[SemanticGradient]:
        assert experience_set is POLICY
        name = analysis.rollout.case.name
        await asyncio.sleep(random.random() / 200)
        return [SemanticGradient(target_experience_name=f"{name}-{i}", rationale="r",
                                 gradient_id=f"{name}#{i}")
                for i in range(int(number(analysis.rollout.metadata, "gradients")))]


class FakeEngine:
    """Records each batch; fails the batches numbered in ``fail``; checks batches never
    overlap (the engine lock's promise). No repository: callers pass a policy set."""

    repo: ExperienceRepository | None = None

    def __init__(self, fail: set[int] | None = None, delay: float = 0.0) -> None:
        self.fail = fail or set()
        self.delay = delay
        self.batches: list[list[str]] = []
        self.active = 0

    async def plan_and_apply(self, gradients: Sequence[SemanticGradient],
                             context: PipelineContext
                             ) -> tuple[PolicyUpdatePlan, PolicyApplyResult]:
        assert self.active == 0, "two batches were planned and applied at once"
        self.active += 1
        try:
            number = len(self.batches)
            self.batches.append([g.gradient_id or "" for g in gradients])
            await asyncio.sleep(self.delay)
            if number in self.fail:
                raise ExpgitError(f"batch {number} conflicts")
            plan = PolicyUpdatePlan(items=[
                PolicyPlanItem(kind="upsert_experience",
                               target_experience_name=g.target_experience_name,
                               gradient_ids=[g.gradient_id or ""]) for g in gradients])
            return plan, PolicyApplyResult(
                updated_policy_set=ExperienceSetRef(commit="c", snapshot_id="s"),
                proposal_id=f"proposal-{number}")
        finally:
            self.active -= 1


def make(engine: FakeEngine | None = None, analyzer: FakeAnalyzer | None = None, **kw: Any
         ) -> tuple[StreamingPolicyTrainer, FakeEngine]:
    engine = engine or FakeEngine()
    trainer = StreamingPolicyTrainer(analyzer or FakeAnalyzer(), FakeEstimator(), engine, **kw)
    return trainer, engine


CTX = PipelineContext()
