"""Trajectory metrics of a task segment, and the scorer contract.

:class:`SegmentMetrics`: ``overall_score`` in [0, 1], ``task_type`` (a lowercase slug:
``code``, ``debugging``, ``data-analysis``, ...) and four per-metric scores with their
reasons (:data:`METRIC_NAMES`). The overall score is computed by expgit, not by the
model: the weighted mean of the metrics (:data:`WEIGHTS`), rounded to 4 decimals;
``tool_use_correctness`` is left out of it when the segment made no tool call.

:class:`LLMTrajectoryScorer` is the scorer: one ``score`` call per segment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.domain import Message, ToolPart
from expgit.core.redaction.messages import redact_messages
from expgit.llm.structured import StructuredLLM
from expgit.sessions.score_output import ScoreOutput, score_output
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import fits
from expgit.train.components.trajectory_analyzer import transcript_view

METRIC_NAMES = ("goal_completion", "tool_use_correctness", "efficiency", "user_satisfaction")
WEIGHTS: Mapping[str, float] = {"goal_completion": 0.4, "tool_use_correctness": 0.2,
                                "efficiency": 0.15, "user_satisfaction": 0.25}
NO_TOOLS_REASON = "no tool calls in this segment (not weighed)"
TASK_TYPE_CHARS = 40


class MetricScore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0, le=1)
    reason: str = ""


class SegmentMetrics(BaseModel):
    """The trajectory metrics of one segment (stored in its manifest)."""

    model_config = ConfigDict(extra="forbid")

    overall_score: float = Field(ge=0, le=1)
    task_type: str
    metrics: dict[str, MetricScore] = Field(default_factory=dict)


class TrajectoryScorer(Protocol):
    """Scores one task segment.

    May assume: ``messages`` are one task's normalised messages (possibly already
    redacted); ``topic`` is the segmenter's one-line description of the task.
    Must: return :class:`SegmentMetrics` with ``overall_score`` in [0, 1], a non-empty
    lowercase ``task_type`` and a score with a reason for each of :data:`METRIC_NAMES`;
    make at most one model call per segment (plus the structured-output repair round)
    and none for a segment with nothing to judge; send no secret to the model (redact).
    Raises :class:`~expgit.llm.port.LLMError` when the model fails or keeps answering
    invalidly; the caller leaves the segment unlabelled and retries later.
    """

    async def score(self, messages: Sequence[Message], topic: str) -> SegmentMetrics: ...


def has_tool_calls(messages: Sequence[Message]) -> bool:
    return any(isinstance(p, ToolPart) for m in messages for p in m.parts)


def normalise_task_type(value: str) -> str:
    """A task type as a lowercase slug of at most 40 characters (``other`` if empty)."""
    slug = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:TASK_TYPE_CHARS].strip("-")
    return slug or "other"


def combine(task_type: str, scores: Mapping[str, MetricScore], *, tools_used: bool
            ) -> SegmentMetrics:
    """The segment's metrics from the four scores: the overall score is their weighted
    mean (``tool_use_correctness`` replaced by 1.0 and not weighed without tool calls)."""
    metrics = {name: scores[name] for name in METRIC_NAMES}
    if not tools_used:
        metrics["tool_use_correctness"] = MetricScore(score=1.0, reason=NO_TOOLS_REASON)
    weighed = [n for n in METRIC_NAMES if tools_used or n != "tool_use_correctness"]
    total = sum(WEIGHTS[n] for n in weighed)
    overall = sum(WEIGHTS[n] * metrics[n].score for n in weighed) / total
    return SegmentMetrics(overall_score=round(min(1.0, max(0.0, overall)), 4),
                          task_type=normalise_task_type(task_type), metrics=metrics)


def empty_metrics() -> SegmentMetrics:
    """The metrics of a segment with nothing to judge (no model call is made)."""
    zero = MetricScore(score=0.0, reason="empty segment: nothing to judge")
    return SegmentMetrics(overall_score=0.0, task_type="empty",
                          metrics={name: zero for name in METRIC_NAMES})


MIN_PART_CHARS = 200


class LLMTrajectoryScorer:
    """Scores a segment with one ``score`` call (template ``prompts/score.md.j2``; reply
    :func:`~expgit.sessions.score_output.score_output`, validated, one repair round by
    StructuredLLM). The messages are redacted first; tool inputs and outputs are cut to
    ``[train] tool_output_chars`` (:func:`transcript_view`, as the trajectory analyzer
    does), and with ``prompt_tokens`` set, every part is cut harder (halving, down to
    200 characters) until the prompt fits. An empty segment gets :func:`empty_metrics`
    with no call."""

    def __init__(self, structured: StructuredLLM, repo: ExperienceRepository, *,
                 prompt_tokens: int | None = None, reason_chars: int = 300) -> None:
        self.llm = structured
        self.repo = repo
        self.prompt_tokens = prompt_tokens
        self.reason_chars = reason_chars
        self.output = score_output(reason_chars, TASK_TYPE_CHARS)

    async def score(self, messages: Sequence[Message], topic: str) -> SegmentMetrics:
        redacted, _ = redact_messages(messages)
        topic = redact_messages([Message.text("user", topic)])[0][0].plain_text
        limit = self.repo.settings.train.tool_output_chars
        view = transcript_view(redacted, limit)
        if not view:
            return empty_metrics()
        system, user = self._prompt(redacted, view, topic)
        out: ScoreOutput = await self.llm.generate("score", system, user, self.output)
        tools = has_tool_calls(messages)
        scores = {name: MetricScore(score=getattr(out, name).score,
                                    reason=getattr(out, name).reason)
                  for name in METRIC_NAMES}
        return combine(out.task_type, scores, tools_used=tools)

    def _prompt(self, messages: Sequence[Message], view: list[dict[str, Any]], topic: str
                ) -> tuple[str, str]:
        limit = max((len(v) for m in view for p in m["parts"] for k, v in p.items()
                     if k in ("text", "input", "output")), default=0)
        while True:
            system, user = render_prompt(
                "score", self.repo, topic=topic, messages=view,
                tools_used=has_tool_calls(messages), reason_chars=self.reason_chars,
                task_type_chars=TASK_TYPE_CHARS)
            if limit <= MIN_PART_CHARS or fits(self.prompt_tokens, self.output, system, user):
                return system, user
            limit = max(MIN_PART_CHARS, limit // 2)
            view = transcript_view(messages, limit, limit)
