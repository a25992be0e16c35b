"""The training domain of docs/design.md ("The objects"), as pydantic models (they cross
files, HTTP and LLMs).

Case -> Rollout (messages of Parts, optional evaluation) -> RolloutAnalysis (with a
Trajectory) -> SemanticGradient (a before/after edit of one experience, committed as a
gradient) -> PolicyUpdatePlan -> PolicyApplyResult (a proposal or an applied commit).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.train.checks import CriterionCheck


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- messages
class TextPart(_Model):
    type: Literal["text"] = "text"
    text: str


class ToolPart(_Model):
    """A tool call and its result, kept apart from text (docs/design.md, "Cases and rollouts")."""

    type: Literal["tool"] = "tool"
    tool_id: str
    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    tool_output: str | None = None
    tool_status: str = "completed"


Part = Annotated[TextPart | ToolPart, Field(discriminator="type")]


class Message(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    parts: list[Part] = Field(default_factory=list)
    # the reasoning summary a model showed with this message (e.g. a Responses API
    # ``reasoning`` item's summary); left out of the JSON when None, so messages without
    # it serialise (and fingerprint) as they always did
    reasoning: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @classmethod
    def text(cls, role: Literal["system", "user", "assistant", "tool"], text: str) -> Message:
        return cls(role=role, parts=[TextPart(text=text)])

    @property
    def plain_text(self) -> str:
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


# ------------------------------------------------------------------------ cases, rubric
class RubricCriterion(_Model):
    name: str
    description: str = ""
    required: bool = True
    weight: float = Field(default=1.0, ge=0)
    check: CriterionCheck | None = None  # how to check it; None: the environment decides
    metadata: dict[str, Any] = Field(default_factory=dict)


class Rubric(_Model):
    name: str
    description: str = ""
    criteria: list[RubricCriterion] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Case(_Model):
    name: str
    task_signature: str
    input: dict[str, Any] = Field(default_factory=dict)
    rubric: Rubric
    metadata: dict[str, Any] = Field(default_factory=dict)


class CriterionResult(_Model):
    criterion_name: str
    passed: bool
    score: float = Field(ge=0, le=1)
    feedback: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class RubricEvaluation(_Model):
    passed: bool
    score: float = Field(ge=0, le=1)
    criterion_results: list[CriterionResult] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Rollout(_Model):
    """One execution of a policy snapshot on a case. ``error`` set: the rollout failed
    (recorded, never raised); its evaluation then says so."""

    case: Case
    messages: list[Message] = Field(default_factory=list)
    policy_snapshot_id: str
    evaluation: RubricEvaluation | None = None
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # listing mode ([agent] skills = "listing"): the skills its <available_skills> listing
    # showed, and those the agent loaded with the Skill tool (each once, in order); None
    # (left out of the JSON): the agent was given its experiences by retrieval
    skills_listed: list[str] | None = Field(default=None, exclude_if=lambda v: v is None)
    skills_loaded: list[str] | None = Field(default=None, exclude_if=lambda v: v is None)


# --------------------------------------------------------------------- analysis, gradients
class Trajectory(_Model):
    name: str
    uri: str  # "<branch>:<path>" on the trajectories branch
    content: str
    outcome: Literal["success", "failure", "partial"]
    retrieval_anchor: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class RolloutAnalysis(_Model):
    rollout: Rollout
    evaluation: RubricEvaluation
    trajectory: Trajectory | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExperienceFile(_Model):
    name: str
    content: str


class SemanticGradient(_Model):
    """A proposed edit of one experience. ``before`` None: create; ``after`` None: delete.
    ``gradient_id`` is set once it is committed as a gradient branch."""

    target_experience_name: str
    before: ExperienceFile | None = None
    after: ExperienceFile | None = None
    base_version: int = 0
    base_blob: str | None = None
    rationale: str
    evidence_trajectory_uris: list[str] = Field(default_factory=list)
    confidence: float = Field(default=0.5, ge=0, le=1)
    gradient_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------------------------------ plans, results
class PolicyPlanItem(_Model):
    kind: Literal["upsert_experience", "delete_experience"]
    target_experience_name: str
    before_content: str | None = None
    after_content: str | None = None
    base_version: int | None = None
    confidence: float | None = None
    rationale: str = ""
    evidence_trajectory_uris: list[str] = Field(default_factory=list)
    gradient_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class PolicyUpdatePlan(_Model):
    items: list[PolicyPlanItem] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExperienceSetRef(_Model):
    """Which policy a result refers to: a commit of the repository and its snapshot id."""

    commit: str
    snapshot_id: str


class PolicyApplyResult(_Model):
    updated_policy_set: ExperienceSetRef
    proposal_id: str | None = None
    applied_commit: str | None = None
    written: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class GroupStats(_Model):
    """Training groups (``[train] group_size`` > 1): how many, how many got a reflect
    call, how many were skipped (every finished run got the same evaluation, or fewer
    than two finished), and the runs that failed with an error."""

    size: int = 1
    groups: int = 0
    reflected: int = 0
    skipped: int = 0
    errors: int = 0

    def add(self, other: GroupStats) -> None:
        self.size = other.size
        self.groups += other.groups
        self.reflected += other.reflected
        self.skipped += other.skipped
        self.errors += other.errors


class RolloutTrainingResult(_Model):
    analyses: list[RolloutAnalysis] = Field(default_factory=list)
    gradients: list[SemanticGradient] = Field(default_factory=list)
    plan: PolicyUpdatePlan | None = None
    apply_result: PolicyApplyResult | None = None
    errors: list[str] = Field(default_factory=list)
    groups: GroupStats | None = None  # trained in groups: their figures
