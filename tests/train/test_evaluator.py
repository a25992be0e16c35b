"""RubricRolloutEvaluator: local checks, weighting, required vs optional, the LLM judge."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from expgit.core.domain import Case, Message, Rollout, RubricEvaluation, TextPart, ToolPart
from expgit.llm.port import LLMOutputError, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, ScriptError, Step
from expgit.llm.structured import StructuredLLM
from expgit.train.cases import parse_case
from expgit.train.components.evaluator import (
    NO_CHECK,
    NO_JUDGE,
    RubricRolloutEvaluator,
    final_answer,
    render_transcript,
)
from expgit.train.context import PipelineContext
from expgit.train.interfaces import RolloutEvaluator

CTX = PipelineContext()


def case(*criteria: dict[str, Any], query: str = "Can I cancel my basic economy ticket?"
         ) -> Case:
    return parse_case({"name": "c", "input": {"user_query": query},
                       "rubric": {"criteria": list(criteria)}}, "test")


def crit(name: str, check: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {"name": name, **({"check": check} if check else {}), **extra}


def rollout(c: Case, answer: str | None, *, error: str | None = None,
            extra: list[Message] | None = None) -> Rollout:
    messages = [Message.text("user", str(c.input["user_query"])), *(extra or [])]
    if answer is not None:
        messages.append(Message.text("assistant", answer))
    return Rollout(case=c, messages=messages, policy_snapshot_id="snap", error=error)


def evaluate(evaluator: RolloutEvaluator, r: Rollout) -> RubricEvaluation:
    return asyncio.run(evaluator.evaluate(r, CTX))


def scripted(*replies: str) -> tuple[ScriptedChatModel, StructuredLLM, UsageMeter]:
    model = ScriptedChatModel([Step("judge", reply) for reply in replies])
    meter = UsageMeter()
    return model, StructuredLLM(model, meter), meter


LOCAL: RolloutEvaluator = RubricRolloutEvaluator(None)


def test_all_pass() -> None:
    c = case(crit("refuses", {"type": "contains", "value": "cannot"}),
             crit("no-refund", {"type": "not_contains", "value": "refund to"}))
    ev = evaluate(LOCAL, rollout(c, "Sorry, you cannot cancel it."))
    assert ev.passed and ev.score == 1.0 and ev.feedback == []
    assert [r.criterion_name for r in ev.criterion_results] == ["refuses", "no-refund"]
    assert all(r.passed and r.score == 1.0 and r.feedback for r in ev.criterion_results)


def test_weighted_score() -> None:
    c = case(crit("a", {"type": "contains", "value": "alpha"}, weight=3),
             crit("b", {"type": "contains", "value": "beta"}, weight=1, required=False),
             crit("z", {"type": "contains", "value": "zeta"}, weight=0, required=False))
    assert evaluate(LOCAL, rollout(c, "alpha")).score == pytest.approx(0.75)
    assert evaluate(LOCAL, rollout(c, "beta")).score == pytest.approx(0.25)
    assert evaluate(LOCAL, rollout(c, "alpha beta")).score == 1.0
    # a weight-0 criterion does not move the score
    assert evaluate(LOCAL, rollout(c, "zeta")).score == 0.0


def test_total_weight_zero_scores_zero() -> None:
    c = case(crit("a", {"type": "contains", "value": "x"}, weight=0))
    ev = evaluate(LOCAL, rollout(c, "x"))
    assert ev.passed and ev.score == 0.0


def test_required_vs_optional() -> None:
    c = case(crit("must", {"type": "regex", "pattern": r"\bcannot\b"}),
             crit("nice", {"type": "contains", "value": "24 hours"}, required=False))
    optional_fails = evaluate(LOCAL, rollout(c, "You cannot cancel."))
    assert optional_fails.passed and optional_fails.score == pytest.approx(0.5)
    assert len(optional_fails.feedback) == 1 and optional_fails.feedback[0].startswith("nice:")
    required_fails = evaluate(LOCAL, rollout(c, "Within 24 hours you can."))
    assert not required_fails.passed and required_fails.score == pytest.approx(0.5)
    assert required_fails.feedback == ["must: pattern '\\\\bcannot\\\\b' did not match"]


def test_final_answer_vs_transcript() -> None:
    c = case(crit("answer", {"type": "contains", "value": "refund"}),
             crit("whole", {"type": "contains", "value": "refund", "target": "transcript"}),
             crit("tool", {"type": "contains", "value": "cancel_reservation(",
                           "target": "transcript"}),
             query="I want a refund")
    tool = Message(role="assistant", parts=[ToolPart(
        tool_id="t1", tool_name="cancel_reservation", tool_input={"id": "X1"},
        tool_output="ok")])
    ev = evaluate(LOCAL, rollout(c, "Done.", extra=[tool]))
    assert [r.passed for r in ev.criterion_results] == [False, True, True]
    assert not ev.passed


def test_no_assistant_message_is_an_empty_answer() -> None:
    c = case(crit("absent", {"type": "not_contains", "value": "x"}),
             crit("present", {"type": "contains", "value": "x"}, required=False))
    ev = evaluate(LOCAL, rollout(c, None))
    assert ev.passed and ev.score == pytest.approx(0.5)


def test_helpers_render_messages() -> None:
    msgs = [Message.text("user", "hi"),
            Message(role="assistant", parts=[TextPart(text="first"), ToolPart(
                tool_id="1", tool_name="get_user_details", tool_input={"user_id": "u"},
                tool_output=None, tool_status="error")]),
            Message.text("assistant", "last")]
    assert final_answer(msgs) == "last"
    assert final_answer(msgs[:1]) == ""
    assert render_transcript(msgs) == (
        'user: hi\nassistant: first\nassistant: [tool get_user_details({"user_id": "u"}) '
        '-> error: ]\nassistant: last')


def test_criterion_without_check_fails() -> None:
    c = case(crit("env", None), crit("ok", {"type": "contains", "value": "x"}))
    ev = evaluate(LOCAL, rollout(c, "x"))
    assert not ev.passed and ev.score == pytest.approx(0.5)
    assert ev.criterion_results[0].feedback == [NO_CHECK]
    assert ev.feedback == [f"env: {NO_CHECK}"]


def test_llm_judge() -> None:
    model, llm, meter = scripted(json.dumps({"passed": True, "score": 0.8,
                                             "reason": "Explains the 24h rule."}))
    c = case(crit("local", {"type": "contains", "value": "cannot"}),
             crit("judged", {"type": "llm_judge", "instructions": "Check the 24h rule."},
                  description="Policy explained"))
    ev = evaluate(RubricRolloutEvaluator(llm), rollout(c, "You cannot cancel (24h rule)."))
    model.assert_done()
    assert ev.passed and ev.score == pytest.approx(0.9)
    judged = ev.criterion_results[1]
    assert judged.passed and judged.score == 0.8
    assert judged.feedback == ["Explains the 24h rule."]
    stage, messages, fmt = model.calls[0]
    assert stage == "judge" and fmt is not None and fmt["type"] == "json_schema"
    system, user = messages[0]["content"], messages[1]["content"]
    assert "grader" in system
    for part in ("judged", "Policy explained", "Check the 24h rule.",
                 "Can I cancel my basic economy ticket?", "You cannot cancel (24h rule)."):
        assert part in user
    assert meter.by_stage()["judge"].calls == 1


def test_llm_judge_on_transcript_and_failing_verdict() -> None:
    model, llm, _ = scripted(json.dumps({"passed": False, "score": 0.1, "reason": "Rude."}))
    c = case(crit("tone", {"type": "llm_judge", "instructions": "Polite?",
                           "target": "transcript"}))
    ev = evaluate(RubricRolloutEvaluator(llm), rollout(c, "No."))
    model.assert_done()
    assert not ev.passed and ev.score == pytest.approx(0.1) and ev.feedback == ["tone: Rude."]
    user = model.calls[0][1][1]["content"]
    assert "whole conversation" in user and "assistant: No." in user


def test_invalid_judge_reply_is_repaired_once() -> None:
    model, llm, meter = scripted("I think it passes.",
                                 '```json\n{"passed": true, "score": 1, "reason": "ok"}\n```')
    c = case(crit("judged", {"type": "llm_judge", "instructions": "Fine?"}))
    ev = evaluate(RubricRolloutEvaluator(llm), rollout(c, "answer"))
    model.assert_done()
    assert ev.passed and ev.score == 1.0
    assert "invalid" in model.calls[1][1][-1]["content"]
    assert meter.by_stage()["judge"].calls == 2


def test_judge_reply_out_of_range_then_still_invalid_raises() -> None:
    model, llm, _ = scripted('{"passed": true, "score": 7, "reason": "x"}',
                             '{"passed": "maybe"}')
    c = case(crit("judged", {"type": "llm_judge", "instructions": "Fine?"}))
    with pytest.raises(LLMOutputError, match="judge: invalid reply after one repair"):
        evaluate(RubricRolloutEvaluator(llm), rollout(c, "answer"))
    model.assert_done()


def test_judge_without_llm_fails_the_criterion() -> None:
    c = case(crit("judged", {"type": "llm_judge", "instructions": "Fine?"}, required=False),
             crit("ok", {"type": "contains", "value": "x"}))
    ev = evaluate(LOCAL, rollout(c, "x"))
    assert ev.passed and ev.score == pytest.approx(0.5)
    assert ev.criterion_results[0].feedback == [NO_JUDGE]


def test_error_rollout_fails_without_any_call() -> None:
    model = ScriptedChatModel([])  # strict: any call raises ScriptError
    llm = StructuredLLM(model, UsageMeter())
    c = case(crit("judged", {"type": "llm_judge", "instructions": "Fine?"}),
             crit("ok", {"type": "not_contains", "value": "x"}))
    ev = evaluate(RubricRolloutEvaluator(llm), rollout(c, None, error="LLMError: timeout"))
    assert model.calls == []
    assert not ev.passed and ev.score == 0.0
    assert [r.criterion_name for r in ev.criterion_results] == ["judged", "ok"]
    assert not any(r.passed for r in ev.criterion_results)
    assert ev.feedback == ["rollout failed: LLMError: timeout"]
    # the strict fake really is strict: a judge call would have failed the test
    with pytest.raises(ScriptError):
        evaluate(RubricRolloutEvaluator(llm), rollout(c, "ok"))
