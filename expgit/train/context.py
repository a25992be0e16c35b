"""PipelineContext and ExecutionContext (docs/design.md, "The chain of components"), and
the one bound on a run's concurrent work (:func:`gather_bounded`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from expgit.core.domain import FreeMetadata

T = TypeVar("T")


@dataclass
class PipelineContext:
    """Per-run settings every stage can read. ``mode`` propose: updates stop at a
    proposal branch and ``main`` is untouched (the CI use); apply: applied to ``main``."""

    max_epochs: int = 1
    mode: Literal["propose", "apply"] = "propose"
    epoch: int = 0


@dataclass
class ExecutionContext:
    """``rollout_done``: called after each case's rollout is finished (live progress);
    an executor that cannot tell may leave it uncalled. ``metadata`` (the phase and
    epoch) is forwarded, opaque, to an environment service."""

    policy_snapshot_id: str
    metadata: FreeMetadata = field(default_factory=dict)
    rollout_done: Callable[[], None] | None = None


async def gather_bounded(limit: int, awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """``awaitables`` awaited at most ``limit`` at a time; their results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(awaitable: Awaitable[T]) -> T:
        async with gate:
            return await awaitable

    return list(await asyncio.gather(*(one(a) for a in awaitables)))
