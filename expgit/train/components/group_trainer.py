"""GroupPolicyTrainer: a batch of grouped rollouts -> one plan-and-apply.

The rollouts come as :func:`~expgit.train.groups.group_cases` laid the cases out: each
case's ``group_size`` runs in a row. Each group is reflected on by a
:class:`~expgit.train.components.group_reflector.GroupReflector` (at most one call; a
group with nothing to contrast none), the groups concurrently (at most ``concurrency``
at once, outside the lock), then one ``plan_and_apply`` of all their gradients, as the
batch trainer does. A group whose reflection fails is recorded in ``errors`` and the rest
go on; the result's ``groups`` counts the groups, the reflected and skipped ones, and
the runs that failed with an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from expgit.core.domain import GroupStats, Rollout, RolloutAnalysis, RolloutTrainingResult
from expgit.errors import UsageError
from expgit.train.components.group_reflector import GroupReflection, GroupReflector
from expgit.train.components.policy_trainer import TrainingEngine, describe, plan_and_apply
from expgit.train.context import PipelineContext, gather_bounded
from expgit.train.groups import split_groups
from expgit.train.interfaces import ExperienceSet


class GroupPolicyTrainer:
    """Trains on a batch of groups of ``group_size`` runs (module docstring)."""

    def __init__(self, reflector: GroupReflector, engine: TrainingEngine, *,
                 group_size: int, concurrency: int = 4) -> None:
        if concurrency < 1 or group_size < 2:
            raise UsageError("concurrency must be at least 1 and group_size at least 2")
        self.reflector = reflector
        self.engine = engine
        self.group_size = group_size
        self.concurrency = concurrency

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: ExperienceSet,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        if analyses:
            raise UsageError("a group trainer analyses its groups itself: give no analyses")
        groups = split_groups(rollouts, self.group_size)

        async def one(group: list[Rollout]) -> GroupReflection | str:
            try:
                return await self.reflector.reflect(group, policy_set, context)
            except Exception as exc:  # one group's failure never stops the others
                return f"case {group[0].case.name}: group reflection failed: {describe(exc)}"

        done = await gather_bounded(self.concurrency, map(one, groups))
        reflections = [d for d in done if isinstance(d, GroupReflection)]
        stats = GroupStats(size=self.group_size, groups=len(groups),
                           skipped=sum(1 for r in reflections if r.skipped is not None),
                           errors=sum(1 for r in rollouts if r.error is not None))
        stats.reflected = len(groups) - stats.skipped
        result = RolloutTrainingResult(
            analyses=[r.analysis for r in reflections if r.analysis is not None],
            gradients=[g for r in reflections for g in r.gradients or []],
            errors=[d for d in done if isinstance(d, str)], groups=stats)
        return await plan_and_apply(self.engine, result, context)
