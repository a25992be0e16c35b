"""Relabel recorded rollouts with the feedback outcome evaluator before training.

A production session has no rubric verdict; its thumbs, ratings and re-asks are the
label (:mod:`expgit.outcomes.feedback`). ``expgit train-rollouts --evaluator feedback``
evaluates each rollout by them; a rollout that marks no response keeps the evaluation it
was recorded with (or none).
"""

from __future__ import annotations

from collections.abc import Sequence

from expgit.core.domain import Rollout, RubricEvaluation
from expgit.outcomes.feedback import FeedbackOutcomeEvaluator
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext

EVALUATORS = ("recorded", "feedback")


class _Recorded:
    """The fallback: the evaluation the rollout came with."""

    async def evaluate(self, rollout: Rollout, context: PipelineContext) -> RubricEvaluation:
        return rollout.evaluation or RubricEvaluation(passed=False, score=0.0)


async def by_feedback(repo: ExperienceRepository, rollouts: Sequence[Rollout],
                      context: PipelineContext) -> list[Rollout]:
    """``rollouts`` with their evaluation from their feedback signals (InvalidInputError
    naming the rollout whose signals are malformed, before anything is trained)."""
    evaluator = FeedbackOutcomeEvaluator.for_repo(repo, fallback=_Recorded())
    return [rollout.model_copy(update={"evaluation": await evaluator.evaluate(rollout, context)})
            for rollout in rollouts]
