"""FeedbackOutcomeEvaluator: production signals (thumbs, ratings, re-asks, silence) turned
into one outcome label per response, and into a RubricEvaluation the pipeline can use.

Signals ride on the rollout (:mod:`expgit.outcomes.signals`). The rules, first that
holds wins, and the label -> score table (:data:`LABEL_SCORES`) are in docs/outcomes.md
("Feedback outcomes"). Not said there: the re-ask window is inclusive, a user turn stamped before
the response counts as 0 s, an unstamped one is never a re-ask; a record's ``evidence``
is never empty; ``clarification_turns`` counts the re-asks within the window;
``resolved_in_one_turn`` is true iff there was no re-ask and the label is not
``negative_feedback``. Feedback naming no response is listed in the evaluation's
feedback and ignored. A rollout without any response id goes to the ``fallback``
evaluator, or is an InvalidInputError without one. Never writes anything; no LLM call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.domain import CriterionResult, Message, Rollout, RubricEvaluation
from expgit.errors import InvalidInputError
from expgit.outcomes.signals import STAMPS_KEY, FeedbackEvent, SessionSignals, session_signals
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext
from expgit.train.interfaces import RolloutEvaluator

OutcomeLabel = Literal["positive_feedback", "negative_feedback", "reasked", "resolved",
                       "follow_up_without_feedback", "follow_up"]

LABEL_SCORES: dict[OutcomeLabel, tuple[bool, float]] = {
    "positive_feedback": (True, 1.0),
    "resolved": (True, 0.8),
    "follow_up": (True, 0.5),
    "follow_up_without_feedback": (False, 0.4),
    "reasked": (False, 0.2),
    "negative_feedback": (False, 0.0),
}
EVALUATOR_NAME = "feedback_outcome"


class ResponseOutcome(BaseModel):
    """The outcome of one response (the seed's ``response_outcomes[<id>]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    response_id: str
    resolved_in_one_turn: bool
    reask_within_10m: bool
    clarification_turns: int = Field(ge=0)
    follow_up_without_feedback: bool
    outcome_label: OutcomeLabel
    evaluated_at: datetime
    evidence: list[str] = Field(min_length=1)  # why: every label has a reason

    @property
    def passed(self) -> bool:
        return LABEL_SCORES[self.outcome_label][0]

    @property
    def score(self) -> float:
        return LABEL_SCORES[self.outcome_label][1]


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}s"


def evaluate_responses(messages: list[Message], signals: SessionSignals, *,
                       reask_window_seconds: float, now: datetime) -> list[ResponseOutcome]:
    """The outcome of every response in ``messages``, in message order (pure rules)."""
    window = timedelta(seconds=reask_window_seconds)
    stamps = signals.stamp_of()
    responses = sorted((s for s in signals.message_stamps if s.response_id is not None),
                       key=lambda s: s.index)
    outcomes: list[ResponseOutcome] = []
    for n, response in enumerate(responses):
        assert response.response_id is not None
        following = responses[n + 1].index if n + 1 < len(responses) else len(messages)
        later_users = [i for i in range(response.index + 1, len(messages))
                       if messages[i].role == "user"]
        evidence: list[str] = []
        reasks = 0
        for i in later_users:
            if i >= following:
                break
            stamp = stamps.get(i)
            if stamp is None or stamp.at is None or response.at is None:
                whose = "the response" if response.at is None else f"user turn #{i}"
                evidence.append(f"{whose} has no time: user turn #{i} not counted as a "
                                "re-ask")
                continue
            delta = max(stamp.at - response.at, timedelta(0))
            within = delta <= window
            reasks += within
            evidence.append(f"user turn #{i} {_seconds(delta)} after the response "
                            f"({'within' if within else 'outside'} the "
                            f"{_seconds(window)} re-ask window)")
        events = [e for e in signals.feedback_events if e.response_id == response.response_id]
        label = _label(events, reasked=reasks > 0, later_turn=bool(later_users))
        if not later_users:
            evidence.append("no user turn after the response")
        elif later_users[0] >= following:  # the user spoke again only after the next reply
            evidence.append(f"the next user turn (#{later_users[0]}) came after the next "
                            f"response (#{following}), so it is not a re-ask of this one")
        if label == "follow_up_without_feedback":
            evidence.append("no feedback event on this response")
        evidence += [_describe(e) for e in events]  # last: explicit feedback decides first
        outcomes.append(ResponseOutcome(
            response_id=response.response_id,
            resolved_in_one_turn=reasks == 0 and label != "negative_feedback",
            reask_within_10m=reasks > 0, clarification_turns=reasks,
            follow_up_without_feedback=label == "follow_up_without_feedback",
            outcome_label=label, evaluated_at=now, evidence=evidence))
    return outcomes


def _label(events: list[FeedbackEvent], *, reasked: bool, later_turn: bool) -> OutcomeLabel:
    if any(e.negative for e in events):
        return "negative_feedback"
    if any(e.positive for e in events):
        return "positive_feedback"
    if reasked:
        return "reasked"
    if not later_turn:
        return "resolved"
    if not events:
        return "follow_up_without_feedback"
    return "follow_up"


def _describe(event: FeedbackEvent) -> str:
    what = event.kind if event.kind != "rating" else f"rating {event.rating:g}"
    when = f" at {event.at.isoformat()}" if event.at else ""
    text = f": {event.text[:200]}" if event.text else ""
    return f"feedback {what}{when}{text}"


def outcome_evaluation(outcomes: list[ResponseOutcome],
                       unmatched: Sequence[FeedbackEvent] = ()) -> RubricEvaluation:
    """One CriterionResult per response; passed = all passed; score = mean."""
    results = [CriterionResult(
        criterion_name=f"response {o.response_id}", passed=o.passed, score=o.score,
        feedback=[] if o.passed else [o.outcome_label], evidence=list(o.evidence),
        metadata={"outcome_label": o.outcome_label}) for o in outcomes]
    # the label with why (its last piece of evidence: the feedback, or the re-ask)
    feedback = [f"response {o.response_id}: {o.outcome_label}"
                + (f" ({o.evidence[-1]})" if o.evidence else "") for o in outcomes
                if not o.passed]
    feedback += [f"feedback on unknown response {e.response_id!r} ignored" for e in unmatched]
    return RubricEvaluation(
        passed=all(o.passed for o in outcomes),
        score=sum(o.score for o in outcomes) / len(outcomes) if outcomes else 0.0,
        criterion_results=results, feedback=feedback,
        metadata={"evaluator": EVALUATOR_NAME,
                  "response_outcomes": {o.response_id: o.model_dump(mode="json")
                                        for o in outcomes}})


class FeedbackOutcomeEvaluator:
    """RolloutEvaluator for sessions with feedback: the rules of this module, per response.

    Rollouts with no response id in ``metadata.message_stamps`` go to ``fallback`` (for
    instance the rubric evaluator); without a fallback they are an InvalidInputError."""

    def __init__(self, *, reask_window_seconds: float = 600.0,
                 fallback: RolloutEvaluator | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        if reask_window_seconds <= 0:
            raise InvalidInputError("reask_window_seconds must be positive")
        self.reask_window_seconds = reask_window_seconds
        self.fallback = fallback
        self.clock = clock or (lambda: datetime.now(UTC))

    @classmethod
    def for_repo(cls, repo: ExperienceRepository, *,
                 fallback: RolloutEvaluator | None = None) -> FeedbackOutcomeEvaluator:
        """With the repository's ``[outcomes] reask_window_seconds``."""
        return cls(reask_window_seconds=repo.settings.outcomes.reask_window_seconds,
                   fallback=fallback)

    async def evaluate(self, rollout: Rollout, context: PipelineContext) -> RubricEvaluation:
        signals = session_signals(rollout)
        if not any(s.response_id for s in signals.message_stamps):
            if self.fallback is not None:
                return await self.fallback.evaluate(rollout, context)
            raise InvalidInputError(
                f"rollout of case {rollout.case.name!r} has no response to evaluate",
                hint=f"mark assistant messages with a response_id in metadata.{STAMPS_KEY}")
        outcomes = evaluate_responses(rollout.messages, signals, now=self.clock(),
                                      reask_window_seconds=self.reask_window_seconds)
        known = {o.response_id for o in outcomes}
        unmatched = [e for e in signals.feedback_events if e.response_id not in known]
        return outcome_evaluation(outcomes, unmatched)
