"""PipelineContext and ExecutionContext (docs/design.md, "The chain of components")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from expgit.core.domain import FreeMetadata


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
