"""A bound on the LLM-bound training stages of the service: at most ``limit`` analyses,
estimations and reflections at once, over all jobs. Waiting for a batch's update holds no slot, so a
rollout whose gradients wait for their batch never keeps another from being analysed.

The job a stage runs for is known from a context variable (set by the job's task): when
its first stage gets a slot, the job is marked running.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

from expgit.core.domain import Rollout, RolloutAnalysis, SemanticGradient
from expgit.errors import UsageError
from expgit.train.context import PipelineContext
from expgit.train.interfaces import (
    ExperienceSet,
    GradientEstimator,
    RolloutAnalyzer,
    RolloutReflector,
)

Stage = TypeVar("Stage")
ON_SLOT: ContextVar[Callable[[], None] | None] = ContextVar("expgit_on_slot", default=None)


class StageGate:
    """At most ``limit`` stages hold a slot at once; entering one calls the current
    task's ``ON_SLOT`` hook (if any)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise UsageError(f"the stage concurrency must be at least 1, not {limit}")
        self.limit = limit
        self.active = 0
        self.peak = 0
        self._slots = asyncio.Semaphore(limit)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._slots:
            hook = ON_SLOT.get()
            if hook is not None:
                hook()
            self.active += 1
            self.peak = max(self.peak, self.active)
            try:
                yield
            finally:
                self.active -= 1


@dataclass(eq=False)  # compared and hashed by identity, as any stage
class _Gated(Generic[Stage]):
    """A training stage run through ``inner`` within a slot of ``gate``."""

    inner: Stage
    gate: StageGate


class GatedAnalyzer(_Gated[RolloutAnalyzer]):
    """A RolloutAnalyzer that analyses through ``inner`` within a slot of ``gate``."""

    async def analyze(self, rollout: Rollout, context: PipelineContext) -> RolloutAnalysis:
        async with self.gate.slot():
            return await self.inner.analyze(rollout, context)


class GatedEstimator(_Gated[GradientEstimator]):
    """A GradientEstimator that estimates through ``inner`` within a slot of ``gate``."""

    async def estimate(self, analysis: RolloutAnalysis, experience_set: ExperienceSet,
                       context: PipelineContext) -> list[SemanticGradient]:
        async with self.gate.slot():
            return await self.inner.estimate(analysis, experience_set, context)


class GatedReflector(_Gated[RolloutReflector]):
    """A RolloutReflector that reflects through ``inner`` within a slot of ``gate``."""

    async def reflect(self, rollout: Rollout, policy_set: ExperienceSet,
                      context: PipelineContext
                      ) -> tuple[RolloutAnalysis, list[SemanticGradient]]:
        async with self.gate.slot():
            return await self.inner.reflect(rollout, policy_set, context)
