"""The trajectory scorer with the strict scripted LLM: one call, repair, failure."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import ROOT

from expgit.core.domain import Message, ToolPart
from expgit.llm.port import ChatMessages, LLMOutputError, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.sessions.formats.parse import parse_session_file
from expgit.sessions.metrics import (
    NO_TOOLS_REASON,
    LLMTrajectoryScorer,
    MetricScore,
    SegmentMetrics,
    combine,
    normalise_task_type,
)
from expgit.sessions.score_output import score_output
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import worst_case_chars

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


def reply(goal: float = 0.9, tools: float = 0.8, eff: float = 0.7, sat: float = 1.0,
          task_type: str = "Debugging") -> str:
    def metric(score: float) -> dict[str, Any]:
        return {"score": score, "reason": f"scored {score}"}

    return json.dumps({"task_type": task_type, "goal_completion": metric(goal),
                       "tool_use_correctness": metric(tools), "efficiency": metric(eff),
                       "user_satisfaction": metric(sat)})


def scorer_with(repo: ExperienceRepository, *replies: str, **kwargs: Any
                ) -> tuple[LLMTrajectoryScorer, ScriptedChatModel, UsageMeter]:
    model = ScriptedChatModel([Step("score", r) for r in replies])
    meter = UsageMeter()
    return (LLMTrajectoryScorer(StructuredLLM(model, meter), repo, **kwargs), model, meter)


def claude_code_messages() -> list[Message]:
    return parse_session_file(FIXTURES / "claude_code.jsonl").messages


def test_one_call_scores_a_segment_with_tools(seeded_repo: ExperienceRepository) -> None:
    scorer, model, meter = scorer_with(seeded_repo, reply())
    metrics = asyncio.run(scorer.score(claude_code_messages(), "Fix the date parser"))
    model.assert_done()
    assert meter.by_stage()["score"].calls == 1
    assert metrics.task_type == "debugging"
    assert set(metrics.metrics) == {"goal_completion", "tool_use_correctness",
                                    "efficiency", "user_satisfaction"}
    assert metrics.metrics["efficiency"] == MetricScore(score=0.7, reason="scored 0.7")
    # weighted mean: 0.4*0.9 + 0.2*0.8 + 0.15*0.7 + 0.25*1.0
    assert metrics.overall_score == 0.875
    _, messages, response_format = model.calls[0]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "goal_completion" in system and "Fix the date parser" in user
    assert "[tool call Edit id=toolu_edit1 status=completed]" in user
    assert "score 1 and say so" not in system  # the segment has tool calls
    assert response_format is not None


def test_without_tool_calls_tool_use_is_not_weighed(seeded_repo: ExperienceRepository
                                                    ) -> None:
    scorer, model, _ = scorer_with(seeded_repo, reply(goal=1.0, tools=0.0, eff=0.6, sat=0.8))
    messages = parse_session_file(FIXTURES / "plain_two_tasks.jsonl").messages[:2]
    metrics = asyncio.run(scorer.score(messages, "Read a CSV in Python"))
    assert metrics.metrics["tool_use_correctness"] == MetricScore(score=1.0,
                                                                  reason=NO_TOOLS_REASON)
    assert metrics.overall_score == round((0.4 * 1.0 + 0.15 * 0.6 + 0.25 * 0.8) / 0.8, 4)
    assert "score 1 and say so" in model.calls[0][1][0]["content"]


def test_garbage_then_repair(seeded_repo: ExperienceRepository) -> None:
    scorer, model, meter = scorer_with(seeded_repo, "I think it went well!",
                                       reply(goal=1.7, task_type="  Data Analysis!! "))
    metrics = asyncio.run(scorer.score(claude_code_messages(), "topic"))
    model.assert_done()
    assert meter.by_stage()["score"].calls == 2
    assert metrics.metrics["goal_completion"].score == 1.0  # clamped, not repaired
    assert metrics.task_type == "data-analysis"
    assert "That reply was invalid" in model.calls[1][1][-1]["content"]


def test_garbage_twice_is_an_error(seeded_repo: ExperienceRepository) -> None:
    scorer, model, _ = scorer_with(seeded_repo, "{}", '{"task_type": "code"}')
    with pytest.raises(LLMOutputError, match="score: invalid reply after one repair round"):
        asyncio.run(scorer.score(claude_code_messages(), "topic"))
    model.assert_done()


def test_empty_segment_makes_no_call(seeded_repo: ExperienceRepository) -> None:
    scorer, model, meter = scorer_with(seeded_repo)
    metrics = asyncio.run(scorer.score([Message.text("assistant", "  ")], "nothing"))
    assert model.calls == [] and meter.total().calls == 0
    assert metrics.overall_score == 0.0 and metrics.task_type == "empty"


def test_prompt_is_redacted_and_tool_output_truncated(seeded_repo: ExperienceRepository
                                                      ) -> None:
    huge = "x" * 10_000 + " PGPASSWORD=OldBackupPass2023 " + "y" * 10_000
    messages = [Message.text("user", "why does my backup fail? I'm bob@example.com"),
                Message(role="assistant", parts=[ToolPart(
                    tool_id="t", tool_name="cat", tool_input={"password": "hunter22"},
                    tool_output=huge)])]
    seen: list[ChatMessages] = []

    def capture(chat: ChatMessages) -> str:
        seen.append(chat)
        return reply()

    model = ScriptedChatModel([Step("score", capture)])
    scorer = LLMTrajectoryScorer(StructuredLLM(model, UsageMeter()), seeded_repo)
    asyncio.run(scorer.score(messages, "backup of bob@example.com"))
    prompt = json.dumps(seen)
    for secret in ("bob@example.com", "hunter22", "OldBackupPass2023"):
        assert secret not in prompt
    assert "chars truncated]" in prompt
    assert len(seen[0][1]["content"]) < 6000  # [train] tool_output_chars = 2000


def test_prompt_budget_truncates_harder(seeded_repo: ExperienceRepository) -> None:
    messages = [Message.text("user", "q " * 3000), Message.text("assistant", "a " * 3000)]
    sizes = []
    for budget in (None, 1500):
        seen: list[ChatMessages] = []

        def capture(chat: ChatMessages, seen: list[ChatMessages] = seen) -> str:
            seen.append(chat)
            return reply()

        model = ScriptedChatModel([Step("score", capture)])
        scorer = LLMTrajectoryScorer(StructuredLLM(model, UsageMeter()), seeded_repo,
                                     prompt_tokens=budget)
        asyncio.run(scorer.score(messages, "t"))
        sizes.append(len(seen[0][1]["content"]))
    assert sizes[1] < sizes[0] / 2


def test_reply_model_is_bounded_and_metrics_validate() -> None:
    assert worst_case_chars(score_output().model_json_schema()) < 2000
    with pytest.raises(ValueError):
        SegmentMetrics(overall_score=1.2, task_type="code")
    assert normalise_task_type("") == "other"
    assert combine("Code", {n: MetricScore(score=0.7) for n in (
        "goal_completion", "tool_use_correctness", "efficiency", "user_satisfaction")},
        tools_used=True).overall_score == 0.7
