"""The training service's protocol (``expgit serve``): the JSON between a trainer that
runs elsewhere and the service that trains the experience repository, as pydantic models.

POST /v1/train/rollouts      a Rollout (docs/design.md, with its case and, ideally, its
                             evaluation; tool calls as ToolParts)  -> 202 TrainingJob
GET  /v1/train/jobs/{job_id}                                       -> TrainingJob
GET  /health                                                       -> Health (metadata.mode)

A job is transient (held in the service's memory); everything it produced is in git, and
``TrainingJob`` names those objects: the trajectory URI (``<branch>:<path>``), the
gradient ids and refs, the proposal id and ref, or the commit applied to ``main``. When
the job is finished, ``result`` is read back from git at those names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from expgit.core.domain import (
    AnalysisNotes,
    PolicyApplyResult,
    PolicyUpdatePlan,
    RubricEvaluation,
    SemanticGradient,
    Trajectory,
)

JobState = Literal["queued", "running", "completed", "failed"]
FINISHED: tuple[JobState, ...] = ("completed", "failed")


class TrainingJobResult(BaseModel):
    """What training one rollout produced (its share of the batch it landed in).

    ``trajectory`` and ``gradients`` are read from git at ``trajectory_uri`` and
    ``gradient_ids``; ``plan`` items cite this rollout's gradients and carry no contents
    (those are in the proposal commit)."""

    evaluation: RubricEvaluation | None = None
    analysis_metadata: AnalysisNotes = Field(default_factory=lambda: AnalysisNotes())
    trajectory: Trajectory | None = None
    gradients: list[SemanticGradient] = Field(default_factory=list)
    plan: PolicyUpdatePlan | None = None
    apply_result: PolicyApplyResult | None = None


class TrainingJob(BaseModel):
    """One submitted rollout. ``queued``: waiting for a free slot; ``running``: analysed,
    estimated, or waiting for its batch's update; ``completed``: trained (possibly with no
    gradient); ``failed``: ``errors`` says why (its gradients may still exist)."""

    job_id: str
    status: JobState
    case_name: str
    created_at: float
    updated_at: float
    errors: list[str] = Field(default_factory=list)
    trajectory_uri: str | None = None
    gradient_ids: list[str] = Field(default_factory=list)
    gradient_refs: list[str] = Field(default_factory=list)
    proposal_id: str | None = None
    proposal_ref: str | None = None
    applied_commit: str | None = None
    result: TrainingJobResult | None = None
