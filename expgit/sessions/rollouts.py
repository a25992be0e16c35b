"""A labelled session segment as a Rollout for ``train_from_rollouts``.

* case: ``session-<fingerprint>``, task signature ``session:<task_type>``, input the
  topic and the first user turn; its rubric names the trajectory metrics (weighted as in
  the overall score);
* messages: the segment's redacted messages;
* evaluation from the metrics: passed = overall score >= ``[sessions] memory_threshold``,
  score = the overall score, one criterion result per metric (with its reason);
* metadata: ``source: session``, the segment fingerprint, the session key, the agent.

A segment labelled by its feedback (:mod:`expgit.sessions.formats.feedback`) instead: task
signature ``session:feedback``, one rubric criterion per response, the evaluation of
the feedback evaluator (:func:`~expgit.outcomes.feedback.outcome_evaluation`: a criterion
result per response with the evidence of its label, the outcome records in
``metadata.response_outcomes``) and its signals in the metadata (``message_stamps``,
``feedback_events``), as ``train-rollouts --evaluator feedback`` reads them.

The skills the session loaded within the segment (:mod:`expgit.sessions.formats.skill_loads`)
are its ``experiences_used`` (reason ``loaded in the session``; none: the key is left
out), so its outcome counts in each such skill's track record (``list --stats``, what
``review`` shows), as a run's does for the experiences in its context.

The rollout is a pure function of the segment record and its messages, so its
trajectory id (the content address on the trajectories branch) and thus the evidence
URI its gradients cite are too (:func:`evidence_uri`).
"""

from __future__ import annotations

from collections.abc import Sequence

from expgit.core.domain import (
    Case,
    CriterionResult,
    FreeMetadata,
    Message,
    Rollout,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
)
from expgit.outcomes.feedback import outcome_evaluation
from expgit.retrieval.usage import KEY as USED_KEY
from expgit.retrieval.usage import UsedExperience, usage_records
from expgit.sessions.formats.feedback import segment_signals
from expgit.sessions.manifest import SegmentRecord, SessionManifest
from expgit.sessions.metrics import WEIGHTS, SegmentMetrics
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore, rollout_id

REQUEST_CHARS = 2000


def case_name(fingerprint: str) -> str:
    return f"session-{fingerprint}"


def first_user_turn(messages: Sequence[Message]) -> str:
    text = next((m.plain_text for m in messages if m.role == "user" and m.plain_text.strip()),
                "")
    return text if len(text) <= REQUEST_CHARS else text[:REQUEST_CHARS - 1] + "…"


def evaluation_of(metrics: SegmentMetrics, threshold: float) -> RubricEvaluation:
    return RubricEvaluation(
        passed=metrics.overall_score >= threshold, score=metrics.overall_score,
        criterion_results=[
            CriterionResult(criterion_name=name, passed=m.score >= threshold, score=m.score,
                            feedback=[m.reason] if m.reason else [])
            for name, m in metrics.metrics.items()],
        feedback=[f"trajectory metrics of a recorded session: overall "
                  f"{metrics.overall_score:.2f} (task type {metrics.task_type}; "
                  f"memory threshold {threshold:.2f})"],
        metadata={"source": "session-metrics"})


def loaded_skills(manifest: SessionManifest, segment: SegmentRecord) -> FreeMetadata:
    """The ``experiences_used`` metadata of a segment: the skills loaded in it (each
    once, in order); empty without loads, so a rollout without any is as it was."""
    names = dict.fromkeys(load.loaded for load in manifest.loads_in(segment.start, segment.end)
                          if load.loaded is not None)
    if not names:
        return {}
    return {USED_KEY: usage_records([UsedExperience(name=name, reason="loaded in the session")
                                     for name in names])}


def segment_rollout(manifest: SessionManifest, segment: SegmentRecord,
                    messages: Sequence[Message], threshold: float) -> Rollout:
    """The rollout of a labelled segment: by its feedback when it has some, else by its
    trajectory metrics (ValueError if it has neither)."""
    signals: FreeMetadata = {}
    if segment.feedback is not None:
        rubric = Rubric(
            name="session-feedback",
            description="What the users' feedback says of each response of a task segment "
                        "of a recorded agent session",
            criteria=[RubricCriterion(name=f"response {o.response_id}")
                      for o in segment.feedback.outcomes])
        signature = "session:feedback"
        evaluation = outcome_evaluation(segment.feedback.outcomes)
        evaluation = evaluation.model_copy(update={"metadata": {
            **evaluation.metadata, "source": "session-feedback"}})
        found = segment_signals(manifest.signals, segment.start, segment.end)
        signals = found.model_dump(mode="json", exclude_none=True) if found else {}
    elif segment.metrics is not None:
        rubric = Rubric(
            name="session-trajectory-metrics",
            description="Trajectory metrics of a task segment of a recorded agent session",
            criteria=[RubricCriterion(name=name, required=False, weight=WEIGHTS.get(name, 1.0))
                      for name in segment.metrics.metrics])
        signature = f"session:{segment.metrics.task_type}"
        evaluation = evaluation_of(segment.metrics, threshold)
    else:
        raise ValueError(f"segment {segment.fingerprint} has no metrics yet")
    case = Case(name=case_name(segment.fingerprint), task_signature=signature,
                input={"topic": segment.topic, "request": first_user_turn(messages)},
                rubric=rubric)
    return Rollout(
        case=case, messages=list(messages),
        policy_snapshot_id=f"session:{manifest.agent or 'unknown-agent'}",
        evaluation=evaluation,
        metadata={"source": "session", "segment_fingerprint": segment.fingerprint,
                  "session": manifest.session_key, "agent": manifest.agent,
                  **({"agent_model": segment.agent_model} if segment.agent_model else {}),
                  **loaded_skills(manifest, segment), **signals})


def evidence_uri(repo: ExperienceRepository, rollout: Rollout) -> str:
    """The trajectory URI the gradients estimated from ``rollout`` cite as evidence."""
    return TrajectoryStore(repo).uri_of(rollout_id(rollout))
