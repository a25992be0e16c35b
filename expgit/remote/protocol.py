"""The remote benchmark protocol (docs/design.md, "Environment services"): the JSON that
crosses HTTP between the training side and an environment service, as pydantic models.

POST /v1/cases/query               CaseQuery        -> CasePage
POST /v1/rollouts/execute          RolloutRequest   -> ExecutionStatus (running)
GET  /v1/rollouts/executions/{id}                   -> ExecutionStatus (+ rollout when completed)
GET  /health                                        -> Health

Extension (optional, ignored by services without it): ``GET .../executions/{id}?wait=S``
is a long poll: answered when the execution finishes or after at most S seconds.

Unknown fields are refused on requests (a typo is an error, not a silent default) and
kept on responses' free-form ``metadata`` only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.domain import Case, FreeMetadata, Rollout


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CaseQuery(_Request):
    dataset: str | None = None
    domain: str | None = None
    split: str | None = None
    cursor: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    filters: dict[str, Any] = Field(default_factory=dict)


class CasePage(BaseModel):
    cases: list[Case] = Field(default_factory=list)
    next_cursor: str | None = None


class PolicySetRef(_Request):
    """Where the runtime reads the experiences: ``root_uri`` is the experience repository
    (a path or URL git understands); ``metadata`` carries ``commit`` (the commit to read)
    and ``experiences_root`` (the folder in it)."""

    root_uri: str
    policies: list[dict[str, Any]] = Field(default_factory=list)
    metadata: FreeMetadata = Field(default_factory=dict, description=(
        "open to any runtime: expgit sends commit, snapshot_id and experiences_root"))


class ExecutionContextRef(_Request):
    policy_snapshot_id: str
    metadata: FreeMetadata = Field(default_factory=dict, description=(
        "the client's own metadata, opaque to the service (expgit: phase, epoch)"))


class RolloutRequest(_Request):
    case: Case
    policy_set: PolicySetRef
    execution_context: ExecutionContextRef
    options: dict[str, Any] = Field(default_factory=dict)


ExecutionState = Literal["queued", "running", "completed", "failed"]


class ExecutionStatus(BaseModel):
    """``queued`` is an extension: accepted, waiting for a free slot (clients treat it as
    ``running``). ``completed`` carries the whole rollout; ``failed`` a readable error."""

    execution_id: str
    status: ExecutionState
    case_name: str
    created_at: float
    updated_at: float
    error: str | None = None
    rollout: Rollout | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    service: str
    version: str
    metadata: FreeMetadata = Field(default_factory=dict, description=(
        "what the service says of itself (e.g. llm, mode, agent_model)"))

