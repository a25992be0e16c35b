"""PipelineContext and ExecutionContext (RFC section 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class PipelineContext:
    """Per-run settings every stage can read. ``mode`` propose: updates stop at a
    proposal branch and ``main`` is untouched (the CI use); apply: applied to ``main``."""

    max_epochs: int = 1
    mode: Literal["propose", "apply"] = "propose"
    epoch: int = 0
    execution_metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutionContext:
    policy_snapshot_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
