"""RubricRolloutEvaluator: a rollout judged by its case's rubric.

Texts a check looks at (``check.target``): ``final_answer`` = the plain text of the last
assistant message ("" if there is none); ``transcript`` = every message rendered as
``role: text`` with tool calls as ``[tool NAME(INPUT) -> STATUS: OUTPUT]``. The action
checks look at the rollout's completed tool calls and at ``metadata.final_state`` (the
tool environment's state at the end, recorded by the tool-calling executor);
``tau2_reward`` at the whole conversation (:func:`expgit.train.tau2.reward.tau2_result`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.checks import (
    DbStateCheck,
    LLMJudgeCheck,
    Tau2RewardCheck,
    ToolCalledCheck,
    ToolNotCalledCheck,
    run_action_check,
    run_check,
)
from expgit.core.domain import (
    Case,
    CriterionResult,
    Message,
    Rollout,
    RubricCriterion,
    RubricEvaluation,
    TextPart,
    ToolPart,
)
from expgit.llm.structured import StructuredLLM
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.context import PipelineContext
from expgit.train.tau2.reward import tau2_result

NO_CHECK = "no check; the environment must evaluate"
NO_JUDGE = "llm_judge criterion, but no LLM judge is configured"


class JudgeVerdict(BaseModel):
    """The judge's reply for one ``llm_judge`` criterion."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    score: float = Field(ge=0, le=1)
    reason: str


def final_answer(messages: Sequence[Message]) -> str:
    """The plain text of the last assistant message, or "" if there is none."""
    for message in reversed(messages):
        if message.role == "assistant":
            return message.plain_text
    return ""


def render_transcript(messages: Sequence[Message]) -> str:
    """Every message as ``role: text``; tool parts rendered inline."""
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                lines.append(f"{message.role}: {part.text}")
            else:
                args = json.dumps(part.tool_input, ensure_ascii=False, sort_keys=True)
                output = "" if part.tool_output is None else part.tool_output
                lines.append(f"{message.role}: [tool {part.tool_name}({args}) -> "
                             f"{part.tool_status}: {output}]")
    return "\n".join(lines)


def user_turn(case: Case) -> str:
    """The case input as the user's message: ``user_query`` if present, else the JSON."""
    query = case.input.get("user_query")
    if query is not None:
        return query if isinstance(query, str) else json.dumps(query, ensure_ascii=False)
    return json.dumps(case.input, ensure_ascii=False, indent=2, sort_keys=True)


def aggregate(results: list[CriterionResult], criteria: Sequence[RubricCriterion],
              extra_feedback: Sequence[str] = ()) -> RubricEvaluation:
    """passed = every required criterion passed; score = weight-weighted mean (0 if the
    total weight is 0); feedback = the failing criteria's feedback."""
    total = sum(c.weight for c in criteria)
    score = sum(c.weight * r.score for c, r in zip(criteria, results, strict=True)) / total \
        if total > 0 else 0.0
    passed = all(r.passed for c, r in zip(criteria, results, strict=True) if c.required)
    feedback = [*extra_feedback, *(f"{r.criterion_name}: {line}" for r in results
                                   if not r.passed for line in r.feedback)]
    return RubricEvaluation(passed=passed, score=min(1.0, max(0.0, score)),
                            criterion_results=results, feedback=feedback)


def failed_evaluation(case: Case, reason: str) -> RubricEvaluation:
    """A failed evaluation (score 0) of a rollout that did not run: every criterion failed."""
    results = [CriterionResult(criterion_name=c.name, passed=False, score=0.0,
                               feedback=["not evaluated: the rollout failed"])
               for c in case.rubric.criteria]
    return RubricEvaluation(passed=False, score=0.0, criterion_results=results,
                            feedback=[f"rollout failed: {reason}"],
                            metadata={"rollout_error": True})


def local_results(rollout: Rollout) -> tuple[dict[int, CriterionResult], dict[str, str]]:
    """The results of every criterion of the rollout's rubric but the ``llm_judge`` ones,
    by position, and the texts the checks look at (by target). Blocking: CPU only."""
    texts = {"final_answer": final_answer(rollout.messages),
             "transcript": render_transcript(rollout.messages)}
    results: dict[int, CriterionResult] = {}
    for index, criterion in enumerate(rollout.case.rubric.criteria):
        check = criterion.check
        if check is None:
            results[index] = CriterionResult(criterion_name=criterion.name, passed=False,
                                             score=0.0, feedback=[NO_CHECK])
            continue
        if isinstance(check, LLMJudgeCheck):
            continue
        if isinstance(check, Tau2RewardCheck):
            results[index] = tau2_result(criterion.name, check, rollout)
            continue
        if isinstance(check, DbStateCheck | ToolCalledCheck | ToolNotCalledCheck):
            calls = [(p.tool_name, p.tool_input) for m in rollout.messages for p in m.parts
                     if isinstance(p, ToolPart) and p.tool_status == "completed"]
            state = rollout.metadata.get("final_state")
            passed, line = run_action_check(check, calls,
                                            state if isinstance(state, dict) else None)
        else:
            passed, line = run_check(check, texts[check.target])
        results[index] = CriterionResult(criterion_name=criterion.name, passed=passed,
                                         score=1.0 if passed else 0.0, feedback=[line],
                                         metadata={"check": check.type})
    return results, texts


class RubricRolloutEvaluator:
    """Evaluates a rollout with its case's rubric.

    Non-LLM checks run locally on the final answer or the transcript; each ``llm_judge``
    criterion is one ``judge`` call (prompt ``prompts/judge.md.j2``, reply
    :class:`JudgeVerdict`); a criterion without a check fails (the environment should have
    evaluated it). A rollout with ``error`` gets a failed evaluation without any call.
    Without an LLM, ``llm_judge`` criteria fail with a feedback saying so.
    """

    def __init__(self, llm: StructuredLLM | None, *,
                 repo: ExperienceRepository | None = None) -> None:
        self.llm = llm
        self.repo = repo

    async def evaluate(self, rollout: Rollout, context: PipelineContext) -> RubricEvaluation:
        case = rollout.case
        if rollout.error is not None:
            return failed_evaluation(case, rollout.error)
        # the local checks run in a worker thread: a long transcript or a costly rubric
        # never holds a service's event loop (its /health answers meanwhile)
        local, texts = await asyncio.to_thread(local_results, rollout)
        results: list[CriterionResult] = []
        for index, criterion in enumerate(case.rubric.criteria):
            check = criterion.check
            results.append(await self._judge(case, criterion, check, texts[check.target])
                           if isinstance(check, LLMJudgeCheck) else local[index])
        return aggregate(results, case.rubric.criteria)

    async def _judge(self, case: Case, criterion: RubricCriterion, check: LLMJudgeCheck,
                     text: str) -> CriterionResult:
        if self.llm is None:
            return CriterionResult(criterion_name=criterion.name, passed=False, score=0.0,
                                   feedback=[NO_JUDGE], metadata={"check": check.type})
        system, user = render_prompt(
            "judge", self.repo, criterion=criterion, instructions=check.instructions,
            target=check.target, user_input=user_turn(case), answer=text)
        verdict = await self.llm.generate("judge", system, user, JudgeVerdict)
        return CriterionResult(criterion_name=criterion.name, passed=verdict.passed,
                               score=verdict.score, feedback=[verdict.reason],
                               metadata={"check": check.type})
