"""What a run's phases measured (docs/design.md, "What a run reports"): each phase's
metrics and batch records as the report writes them, the pipeline's results, and how a
trained batch or an eval's rollouts are accounted into them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field

from expgit.core.domain import (
    GroupStats,
    PolicyApplyResult,
    Rollout,
    RolloutTrainingResult,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.errors import InvalidInputError
from expgit.retrieval.usage import KEY as USAGE_KEY
from expgit.retrieval.usage import read_usage
from expgit.store.format.experience import Experience, parse_experience
from expgit.store.format.layout import SKILL_FILE
from expgit.train.measurement.candidate import CandidateReport, EvalSummary, summarize
from expgit.train.measurement.candidate_stage import Reviewed
from expgit.train.measurement.skill_reach import SkillReach, skill_reach


class RolloutSummary(BaseModel):
    case: str
    passed: bool | None
    score: float | None
    error: str | None = None
    policy_snapshot_id: str
    experiences_shown: int | None = None  # the experiences in its context, when recorded
    context_tokens: int | None = None  # their estimated tokens, when recorded
    # listing mode: the skills its listing showed and those it loaded (Skill tool)
    skills_listed: list[str] | None = None
    skills_loaded: list[str] | None = None


class BatchRecord(BaseModel):
    """One batch of a phase: the policy it ran against and what it produced."""

    batch: int
    cases: int
    policy_commit: str
    policy_snapshot_id: str
    gradients: int = 0
    proposals: list[str] = Field(default_factory=list)
    applied_commits: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class PhaseMetrics(BaseModel):
    """``commits``: proposals made (propose mode) or commits applied to main (apply)."""

    phase: str
    epoch: int
    cases: int = 0
    passed: int = 0
    accuracy: float = 0.0
    average_reward: float = 0.0
    gradients: int = 0
    commits: int = 0
    proposals: list[str] = Field(default_factory=list)
    applied_commits: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    rejected_edits: list[str] = Field(default_factory=list)  # the estimator's, with reasons
    batches: list[BatchRecord] = Field(default_factory=list)
    rollouts: list[RolloutSummary] = Field(default_factory=list)
    context_experiences: float | None = None  # mean experiences shown per rollout
    context_tokens: float | None = None  # mean estimated tokens of those experiences
    summary: EvalSummary | None = None  # an eval phase's: pass^k, interval (--trials)
    groups: GroupStats | None = None  # a training phase's in groups ([train] group_size)
    # listing mode: each skill's reach (loaded in how many rollouts, pass rates)
    skill_reach: list[SkillReach] | None = None
    # training: the edits that changed only a skill's description (its trigger)
    description_edits: int = 0
    reused: str | None = None  # the phase that ran these rollouts (same tree): none ran
    seconds: float = 0.0


class PipelineEvaluationResult(BaseModel):
    metrics: PhaseMetrics
    rollouts: list[Rollout] = Field(default_factory=list)


class PipelineResult(BaseModel):
    mode: str
    main_before: str
    main_after: str
    baseline: PipelineEvaluationResult | None = None
    epochs: list[PhaseMetrics] = Field(default_factory=list)
    final: PipelineEvaluationResult | None = None
    candidate_phases: list[PhaseMetrics] = Field(default_factory=list)  # candidate_eval
    candidates: list[CandidateReport] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def phases(self) -> list[PhaseMetrics]:
        evals = [r.metrics for r in (self.baseline, self.final) if r is not None]
        return (([evals.pop(0)] if self.baseline else []) + self.epochs
                + self.candidate_phases + evals)


def _parsed(content: str, name: str) -> Experience:
    try:
        return parse_experience(content, f"{name}/{SKILL_FILE}")
    except InvalidInputError:
        return parse_experience(content, f"{name}.md")


def description_only(gradient: SemanticGradient) -> bool:
    """Whether an edit changes only its experience's description (summary): the body
    and the other fields are the same (a lesson aimed at a skill's trigger)."""
    if gradient.before is None or gradient.after is None:
        return False
    try:  # a skill's SKILL.md, or a flat experience file
        old, new = (_parsed(f.content, f.name) for f in (gradient.before, gradient.after))
    except InvalidInputError:
        return False
    return (old.front_matter.summary != new.front_matter.summary
            and old.body.strip() == new.body.strip()
            and old.front_matter.model_copy(update={"summary": ""})
            == new.front_matter.model_copy(update={"summary": ""}))


def apply_results_of(result: RolloutTrainingResult) -> list[PolicyApplyResult]:
    """Every apply result of a training call (a streaming call may span batches)."""
    if result.apply_result is None:
        return []
    return result.apply_result.metadata.batches or [result.apply_result]


def combined_apply_result(batches: Sequence[PolicyApplyResult]) -> PolicyApplyResult | None:
    """Several batches' apply results as one (the last batch's policy, every file written
    or deleted, every error); ``metadata.batches`` keeps each, for
    :func:`apply_results_of`. None for no batch."""
    if not batches:
        return None
    last = batches[-1]
    return last.model_copy(update={
        "written": sorted({n for a in batches for n in a.written}),
        "deleted": sorted({n for a in batches for n in a.deleted}),
        "errors": [m for a in batches for m in a.errors],
        "metadata": last.metadata.model_copy(update={"batches": list(batches)})})


def _evaluation(rollout: Rollout, result: RolloutTrainingResult | None
                ) -> RubricEvaluation | None:
    if rollout.evaluation is not None or result is None:
        return rollout.evaluation
    return next((a.evaluation for a in result.analyses if a.rollout == rollout), None)


def rollout_summary(rollout: Rollout, evaluation: RubricEvaluation | None) -> RolloutSummary:
    tokens = rollout.metadata.get("context_tokens")
    return RolloutSummary(case=rollout.case.name, error=rollout.error,
                          passed=evaluation.passed if evaluation else None,
                          score=evaluation.score if evaluation else None,
                          policy_snapshot_id=rollout.policy_snapshot_id,
                          experiences_shown=len(read_usage(rollout.metadata))
                          if USAGE_KEY in rollout.metadata else None,
                          context_tokens=tokens if isinstance(tokens, int) else None,
                          skills_listed=rollout.skills_listed,
                          skills_loaded=rollout.skills_loaded)


def _mean(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 3) if known else None


def score(metrics: PhaseMetrics) -> None:
    """Fill cases, passed, accuracy and average reward from ``metrics.rollouts``."""
    judged = metrics.rollouts
    metrics.cases = len(judged)
    metrics.passed = sum(1 for r in judged if r.passed)
    metrics.accuracy = metrics.passed / metrics.cases if metrics.cases else 0.0
    metrics.average_reward = (sum(r.score or 0.0 for r in judged) / metrics.cases
                              if metrics.cases else 0.0)
    metrics.context_experiences = _mean([r.experiences_shown for r in judged])
    metrics.context_tokens = _mean([r.context_tokens for r in judged])
    metrics.skill_reach = skill_reach(judged)


def score_eval(metrics: PhaseMetrics, rollouts: Sequence[Rollout]) -> None:
    """:func:`score` an eval phase, and its summary (pass^k, interval)."""
    score(metrics)
    runs = Counter(r.case.name for r in rollouts)
    metrics.summary = summarize(rollouts, max(runs.values(), default=1))


def add_training(metrics: PhaseMetrics, record: BatchRecord, rollouts: Sequence[Rollout],
                 result: RolloutTrainingResult, mode: str) -> None:
    """Account one trained batch in ``metrics`` (and fill ``record``)."""
    applied = apply_results_of(result)
    record.gradients = len(result.gradients)
    record.proposals = [a.proposal_id for a in applied if a.proposal_id]
    record.applied_commits = [a.applied_commit for a in applied if a.applied_commit]
    record.errors = list(result.errors)
    metrics.rollouts += [rollout_summary(r, _evaluation(r, result)) for r in rollouts]
    metrics.errors += [f"case {r.case.name}: rollout failed: {r.error}"
                       for r in rollouts if r.error] + record.errors
    metrics.rejected_edits += [f"case {a.rollout.case.name}: {reason}"
                               for a in result.analyses
                               for reason in a.metadata.rejected_edits or []]
    if result.plan is not None:
        metrics.rejected_edits += [f"merge: {reason}"
                                   for reason in result.plan.metadata.rejected_items or []]
    if result.groups is not None:
        metrics.groups = metrics.groups or GroupStats(size=result.groups.size)
        metrics.groups.add(result.groups)
    metrics.gradients += record.gradients
    metrics.description_edits += sum(1 for g in result.gradients if description_only(g))
    metrics.proposals += record.proposals
    metrics.applied_commits += record.applied_commits
    metrics.commits = len(metrics.applied_commits if mode == "apply" else metrics.proposals)
    metrics.batches.append(record)
    score(metrics)


def add_reviewed(metrics: PhaseMetrics, record: BatchRecord, reviewed: Sequence[Reviewed],
                 mode: str) -> None:
    """Account the candidate stage's outcome of a batch's proposals: their final ids
    (the description now carries the figures), what it applied, what it could not."""
    renamed = dict(zip(record.proposals, (r.proposal for r in reviewed), strict=True))
    record.proposals = [renamed[p] for p in record.proposals]
    metrics.proposals = [renamed.get(p, p) for p in metrics.proposals]
    record.applied_commits += [r.applied_commit for r in reviewed if r.applied_commit]
    metrics.applied_commits += [r.applied_commit for r in reviewed if r.applied_commit]
    errors = [r.error for r in reviewed if r.error]
    record.errors += errors
    metrics.errors += errors
    metrics.commits = len(metrics.applied_commits if mode == "apply" else metrics.proposals)
