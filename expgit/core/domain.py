"""The training domain of docs/design.md ("The objects"), as pydantic models (they cross
files, HTTP and LLMs).

Case -> Rollout (messages of Parts, optional evaluation) -> RolloutAnalysis (with a
Trajectory) -> SemanticGradient (a before/after edit of one experience, committed as a
gradient) -> PolicyUpdatePlan -> PolicyApplyResult (a proposal or an applied commit).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic_core import PydanticSerializationError, to_jsonable_python

from expgit.core.checks import CriterionCheck


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _as_json(value: object) -> object:
    """A YAML date or a tuple in free metadata: its JSON form, as the wire carries it."""
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise ValueError(str(exc)) from None


# Free-form metadata at a boundary: what a case file, an environment service or an
# ingested session says about itself, passed through. Keys expgit itself sets and reads
# between components are named fields of the ``*Notes`` models below.
FreeMetadata = Annotated[dict[str, JsonValue], BeforeValidator(_as_json)]


def _free(what: str) -> Any:
    return Field(default_factory=dict, description=f"free-form metadata of {what} (JSON)")


class _Notes(_Model):
    """Notes a component leaves for the next; a field that is None is left out of the
    JSON, so the wire and stored shapes are those of the dicts these models replaced."""

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


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
    metadata: FreeMetadata = _free("the criterion, from the case file")


class Rubric(_Model):
    name: str
    description: str = ""
    criteria: list[RubricCriterion] = Field(default_factory=list)
    metadata: FreeMetadata = _free("the rubric, from the case file")


class Case(_Model):
    name: str
    task_signature: str
    input: dict[str, Any] = Field(default_factory=dict)
    rubric: Rubric
    metadata: FreeMetadata = _free(
        "the case: the case file's own keys, and those an environment binds (e.g. "
        "``environment``, ``group_run``)")


class CriterionResult(_Model):
    criterion_name: str
    passed: bool
    score: float = Field(ge=0, le=1)
    feedback: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    metadata: FreeMetadata = _free("the result, as its evaluator reports it")


class RubricEvaluation(_Model):
    passed: bool
    score: float = Field(ge=0, le=1)
    criterion_results: list[CriterionResult] = Field(default_factory=list)
    feedback: list[str] = Field(default_factory=list)
    metadata: FreeMetadata = _free("the evaluation, as its evaluator reports it")


class Rollout(_Model):
    """One execution of a policy snapshot on a case. ``error`` set: the rollout failed
    (recorded, never raised); its evaluation then says so."""

    case: Case
    messages: list[Message] = Field(default_factory=list)
    policy_snapshot_id: str
    evaluation: RubricEvaluation | None = None
    error: str | None = None
    metadata: FreeMetadata = _free(
        "the run, as its executor, environment service or session source reports it")
    # listing mode ([agent] skills = "listing"): the skills its <available_skills> listing
    # showed, and those the agent loaded with the Skill tool (each once, in order); None
    # (left out of the JSON): the agent was given its experiences by retrieval
    skills_listed: list[str] | None = Field(default=None, exclude_if=lambda v: v is None)
    skills_loaded: list[str] | None = Field(default=None, exclude_if=lambda v: v is None)


# --------------------------------------------------------------------- analysis, gradients
EvaluationSource = Literal["rollout", "evaluator", "fallback", "stored"]


class TrajectoryNotes(_Notes):
    title: str | None = None
    case: str | None = None
    evaluation_source: str | None = None  # EvaluationSource, or what a stored one says


class GroupNote(_Model):
    """A group's figures (``[train] group_size`` > 1): runs, how many finished, passed."""

    runs: int
    finished: int
    passed: int


class AnalysisNotes(_Notes):
    """What the analysis of a rollout noted: the trajectory's id, whether a stored one was
    reused, where the evaluation came from; why no trajectory was stored (``skipped``);
    the model's edits that were dropped, with their reasons (``rejected_edits``, set by
    the estimator or reflector); unreadable statistics (``stats_error``); a group's
    figures; the training service's job (set by its client)."""

    trajectory_id: str | None = None
    reused: bool | None = None
    evaluation_source: EvaluationSource | None = None
    skipped: str | None = None
    rejected_edits: list[str] | None = None
    stats_error: str | None = None
    group: GroupNote | None = None
    job_id: str | None = None


class GradientNotes(_Notes):
    commit: str | None = None  # the gradient's commit on its branch
    operation: Literal["create", "update", "delete", "rename"] | None = None


class Trajectory(_Model):
    name: str
    uri: str  # "<branch>:<path>" on the trajectories branch
    content: str
    outcome: Literal["success", "failure", "partial"]
    retrieval_anchor: str
    metadata: TrajectoryNotes = Field(default_factory=lambda: TrajectoryNotes())


class RolloutAnalysis(_Model):
    rollout: Rollout
    evaluation: RubricEvaluation
    trajectory: Trajectory | None = None
    metadata: AnalysisNotes = Field(default_factory=lambda: AnalysisNotes())


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
    metadata: GradientNotes = Field(default_factory=lambda: GradientNotes())


# ------------------------------------------------------------------------ plans, results
class PlanItemNotes(_Notes):
    base_blob: str | None = None  # the blob of the experience the item was planned on


class PlanNotes(_Notes):
    """The merger's figures: chunks merged, rejected items (reasons), compressed
    experiences, the gradients no item cites, the policy's tokens before and after;
    ``batches``: a plan that joins several batches' plans, how many."""

    chunks: int | None = None
    rejected_items: list[str] | None = None
    compressed: list[str] | None = None
    dropped_gradient_ids: list[str] | None = None
    total_tokens_before: int | None = None
    total_tokens_after: int | None = None
    batches: int | None = None


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
    metadata: PlanItemNotes = Field(default_factory=lambda: PlanItemNotes())


class PolicyUpdatePlan(_Model):
    items: list[PolicyPlanItem] = Field(default_factory=list)
    metadata: PlanNotes = Field(default_factory=lambda: PlanNotes())


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
    metadata: ApplyNotes = Field(default_factory=lambda: ApplyNotes())


class ApplyNotes(_Notes):
    """The proposal an update made and the mode; in apply mode, whether it was rebased
    and its warnings; ``batches``: a result that joins several batches' results, each."""

    proposal_commit: str | None = None
    proposal_ref: str | None = None
    mode: Literal["propose", "apply"] | None = None
    rebased: bool | None = None
    warnings: list[str] | None = None
    batches: list[PolicyApplyResult] | None = None


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
