"""The feedback outcome evaluator on constructed sessions: every label, ties, the window."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from json_value import dig, items, obj

from expgit.core.domain import Case, Message, Rollout, Rubric, RubricEvaluation
from expgit.errors import InvalidInputError
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.outcomes.feedback import LABEL_SCORES, FeedbackOutcomeEvaluator
from expgit.outcomes.records import OutcomeRequest
from expgit.outcomes.store import OutcomeStore
from expgit.store.repository import ExperienceRepository
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import rollout_id

T0 = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
NOW = datetime(2026, 5, 2, tzinfo=UTC)

Turn = tuple[str, float | None] | tuple[str, float | None, str]


def session(turns: list[Turn], feedback: list[dict[str, Any]] = ()) -> Rollout:  # type: ignore[assignment]
    """``turns``: (role, seconds after T0 or None for unstamped[, response id])."""
    messages: list[Message] = []
    stamps: list[dict[str, Any]] = []
    for index, turn in enumerate(turns):
        role, offset = turn[0], turn[1]
        messages.append(Message.text(role, f"{role} {index}"))  # type: ignore[arg-type]
        if offset is not None:
            stamp: dict[str, Any] = {"index": index,
                                     "at": (T0 + timedelta(seconds=offset)).isoformat()}
            if len(turn) == 3:
                stamp["response_id"] = turn[2]
            stamps.append(stamp)
    return Rollout(case=Case(name="chat", task_signature="chat", rubric=Rubric(name="r")),
                   messages=messages, policy_snapshot_id="s",
                   metadata={"message_stamps": [*stamps], "feedback_events": [*feedback]})


def evaluate(rollout: Rollout, evaluator: FeedbackOutcomeEvaluator | None = None
             ) -> RubricEvaluation:
    evaluator = evaluator or FeedbackOutcomeEvaluator(clock=lambda: NOW)
    return asyncio.run(evaluator.evaluate(rollout, PipelineContext()))


def outcome(evaluation: RubricEvaluation, rid: str = "r1") -> dict[str, Any]:
    found: dict[str, Any] = obj(evaluation.metadata, "response_outcomes", rid)
    return found


def thumb(kind: str, rid: str = "r1", **extra: Any) -> dict[str, Any]:
    return {"response_id": rid, "kind": kind, **extra}


ASK = ("user", 0.0)
ANSWER = ("assistant", 5.0, "r1")


@pytest.mark.parametrize(("turns", "feedback", "label"), [
    ([ASK, ANSWER], [thumb("thumb_down")], "negative_feedback"),
    ([ASK, ANSWER], [thumb("rating", rating=-2)], "negative_feedback"),
    ([ASK, ANSWER], [thumb("thumb_up")], "positive_feedback"),
    ([ASK, ANSWER], [thumb("rating", rating=0.5)], "positive_feedback"),
    ([ASK, ANSWER, ("user", 60.0)], [], "reasked"),
    ([ASK, ANSWER], [], "resolved"),
    ([ASK, ANSWER], [thumb("rating", rating=0)], "resolved"),  # neutral, no later turn
    ([ASK, ANSWER, ("user", 3600.0)], [], "follow_up_without_feedback"),
    ([ASK, ANSWER, ("user", 3600.0)], [thumb("rating", rating=0)], "follow_up"),
    ([ASK, ANSWER, ("user", None)], [], "follow_up_without_feedback"),  # unknown time
])
def test_every_label(turns: list[Turn], feedback: list[dict[str, Any]], label: str) -> None:
    evaluation = evaluate(session(turns, feedback))
    record = outcome(evaluation)
    assert record["outcome_label"] == label
    passed, score = LABEL_SCORES[label]  # type: ignore[index]
    assert (evaluation.passed, evaluation.score) == (passed, score)
    assert [c.criterion_name for c in evaluation.criterion_results] == ["response r1"]
    assert record["evaluated_at"] == NOW.isoformat().replace("+00:00", "Z")
    assert record["follow_up_without_feedback"] == (label == "follow_up_without_feedback")
    assert record["evidence"] and all(record["evidence"]), "every label says why"


def test_a_follow_up_without_feedback_says_so() -> None:
    record = outcome(evaluate(session([ASK, ANSWER, ("user", 3600.0)])))
    assert record["evidence"] == [
        "user turn #2 3595s after the response (outside the 600s re-ask window)",
        "no feedback event on this response"]


def test_a_response_without_a_time() -> None:
    rollout = session([ASK, ("assistant", None), ("user", 30.0)])
    items(rollout.metadata, "message_stamps").append({"index": 1, "response_id": "r1"})
    record = outcome(evaluate(rollout))
    assert record["outcome_label"] == "follow_up_without_feedback"  # never a re-ask
    assert record["evidence"][0] == ("the response has no time: user turn #2 not counted "
                                     "as a re-ask")
    empty = session([ASK])
    items(empty.metadata, "message_stamps").append({"index": 0})
    with pytest.raises(InvalidInputError, match="needs a time"):
        evaluate(empty)


def test_documented_mapping() -> None:
    assert LABEL_SCORES == {
        "positive_feedback": (True, 1.0), "resolved": (True, 0.8), "follow_up": (True, 0.5),
        "follow_up_without_feedback": (False, 0.4), "reasked": (False, 0.2),
        "negative_feedback": (False, 0.0)}


def test_record_fields_of_a_reask() -> None:
    record = outcome(evaluate(session([ASK, ANSWER, ("user", 30.0), ("user", 40.0)])))
    assert record["outcome_label"] == "reasked"
    assert record["reask_within_10m"] is True and record["resolved_in_one_turn"] is False
    assert record["clarification_turns"] == 2
    assert record["follow_up_without_feedback"] is False
    assert any("within the 600s re-ask window" in line for line in record["evidence"])


def test_positive_record_resolved_in_one_turn() -> None:
    record = outcome(evaluate(session([ASK, ANSWER], [thumb("thumb_up", text="helpful")])))
    assert record["resolved_in_one_turn"] is True and record["reask_within_10m"] is False
    assert record["clarification_turns"] == 0
    assert "feedback thumb_up: helpful" in record["evidence"]


@pytest.mark.parametrize(("kind", "rating", "label"), [
    ("thumb_up", None, "positive_feedback"), ("thumb_down", None, "negative_feedback"),
    ("rating", 3, "positive_feedback"), ("rating", -1, "negative_feedback")])
def test_feedback_wins_over_a_reask(kind: str, rating: int | None, label: str) -> None:
    event = thumb(kind) if rating is None else thumb(kind, rating=rating)
    record = outcome(evaluate(session([ASK, ANSWER, ("user", 10.0)], [event])))
    assert record["outcome_label"] == label
    assert record["reask_within_10m"] is True  # the fact is kept
    assert record["resolved_in_one_turn"] is False


def test_thumb_down_wins_over_thumb_up() -> None:
    events = [thumb("thumb_up"), thumb("thumb_down"), thumb("thumb_up")]
    assert outcome(evaluate(session([ASK, ANSWER], events)))["outcome_label"] == \
        "negative_feedback"


@pytest.mark.parametrize(("seconds_after", "label"), [
    (600.0, "reasked"),  # exactly 10 minutes: still within
    (600.001, "follow_up_without_feedback"),  # just past it
    (599.999, "reasked"),
])
def test_ten_minute_boundary(seconds_after: float, label: str) -> None:
    record = outcome(evaluate(session([ASK, ANSWER, ("user", 5.0 + seconds_after)])))
    assert record["outcome_label"] == label
    assert record["reask_within_10m"] == (label == "reasked")


def test_window_comes_from_settings(seeded_repo: ExperienceRepository) -> None:
    evaluator = FeedbackOutcomeEvaluator.for_repo(seeded_repo)
    assert evaluator.reask_window_seconds == 600.0
    short = FeedbackOutcomeEvaluator(reask_window_seconds=30, clock=lambda: NOW)
    rollout = session([ASK, ANSWER, ("user", 60.0)])
    assert outcome(evaluate(rollout, short))["outcome_label"] == "follow_up_without_feedback"


def test_multi_response_session() -> None:
    # r1 re-asked at once; r2 answered, user comes back an hour later; r3 thumbed up
    rollout = session([ASK, ANSWER, ("user", 20.0), ("assistant", 25.0, "r2"),
                       ("user", 3700.0), ("assistant", 3705.0, "r3")],
                      [thumb("thumb_up", "r3"), thumb("thumb_down", "gone")])
    evaluation = evaluate(rollout)
    labels = {rid: dig(o, "outcome_label")
              for rid, o in obj(evaluation.metadata, "response_outcomes").items()}
    assert labels == {"r1": "reasked", "r2": "follow_up_without_feedback",
                      "r3": "positive_feedback"}
    assert [c.criterion_name for c in evaluation.criterion_results] == [
        "response r1", "response r2", "response r3"]
    assert evaluation.passed is False
    assert evaluation.score == pytest.approx((0.2 + 0.4 + 1.0) / 3)
    assert "feedback on unknown response 'gone' ignored" in evaluation.feedback
    # the re-ask of r2's follow-up is measured from r2, not r1
    assert outcome(evaluation, "r2")["clarification_turns"] == 0


def test_user_turn_after_a_later_response_is_not_a_reask() -> None:
    rollout = session([ASK, ANSWER, ("assistant", 6.0, "r2"), ("user", 30.0)])
    evaluation = evaluate(rollout)
    assert outcome(evaluation, "r1")["outcome_label"] == "follow_up_without_feedback"
    assert outcome(evaluation, "r2")["outcome_label"] == "reasked"


def test_no_responses_uses_fallback_or_fails() -> None:
    rollout = session([ASK, ("assistant", 5.0)])
    with pytest.raises(InvalidInputError, match="no response to evaluate"):
        evaluate(rollout)

    class Fixed:
        async def evaluate(self, rollout: Rollout, context: PipelineContext
                           ) -> RubricEvaluation:
            return RubricEvaluation(passed=True, score=0.7)

    evaluator = FeedbackOutcomeEvaluator(fallback=Fixed(), clock=lambda: NOW)
    assert evaluate(rollout, evaluator).score == 0.7


@pytest.mark.parametrize(("metadata", "message"), [
    ({"message_stamps": [{"index": 0, "at": "2026-05-01T10:00:00Z", "response_id": "x"}]},
     "is on a user message"),
    ({"message_stamps": [{"index": 9, "at": "2026-05-01T10:00:00Z"}]}, "out of range"),
    ({"message_stamps": [{"index": 1, "at": "2026-05-01T10:00:00Z", "response_id": "x"}],
      "feedback_events": [{"response_id": "x", "kind": "rating"}]}, "needs a rating"),
    ({"message_stamps": [{"index": 1, "at": "yesterday"}]}, "message_stamps.0.at"),
    ({"feedback_events": [{"response_id": "x", "kind": "smile"}]}, "feedback_events.0.kind"),
])
def test_bad_signals_are_clear_errors(metadata: dict[str, Any], message: str) -> None:
    rollout = session([ASK, ("assistant", None)]).model_copy(update={"metadata": metadata})
    with pytest.raises(InvalidInputError, match=message):
        evaluate(rollout)


def test_naive_times_are_utc() -> None:
    rollout = session([ASK, ANSWER, ("user", None)]).model_copy(update={"metadata": {
        "message_stamps": [{"index": 1, "at": "2026-05-01T10:00:00", "response_id": "r1"},
                           {"index": 2, "at": "2026-05-01T12:09:59+02:00"}]}})
    record = outcome(evaluate(rollout))
    assert record["outcome_label"] == "reasked"
    assert "user turn #2 599s after the response" in record["evidence"][0]


def test_analyzer_with_feedback_evaluator(seeded_repo: ExperienceRepository) -> None:
    """Wired as the analyzer's evaluator: the session's labels decide the trajectory's
    outcome, with one scripted LLM call; the rollout id then takes a typed outcome."""
    reply = {"title": "Baggage answer re-asked", "outcome": "success",
             "summary": "The user had to ask again.", "key_steps": ["Answered"],
             "mistakes": ["Vague"], "lessons": ["State the weight limit"],
             "retrieval_anchor": "baggage allowance weight"}
    model = ScriptedChatModel([Step("analyze", json.dumps(reply))])
    evaluator = FeedbackOutcomeEvaluator.for_repo(seeded_repo)
    analyzer = TrajectoryRolloutAnalyzer(seeded_repo, StructuredLLM(model, UsageMeter()),
                                         evaluator)
    rollout = session([ASK, ANSWER, ("user", 65.0)])
    analysis = asyncio.run(analyzer.analyze(rollout, PipelineContext()))
    model.assert_done()
    assert analysis.metadata.evaluation_source == "evaluator"
    assert dig(analysis.evaluation.metadata, "response_outcomes", "r1", "outcome_label") \
        == "reasked"
    assert analysis.trajectory is not None and analysis.trajectory.outcome == "failure"
    rid = rollout_id(rollout)
    record, created = OutcomeStore(seeded_repo).add(OutcomeRequest(
        target_kind="rollout", target_id=rid, verdict="fail", score=0.2,
        source="feedback_outcome"), f"feedback:{rid}:r1")
    assert created and record.target_id == rid
