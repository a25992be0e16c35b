"""The reply of the ``score`` stage, as a pydantic model with bounded fields."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, create_model

from expgit.train.components.llm_fields import Confidence, soft_text, strip_titles


class _Output(BaseModel):
    model_config = ConfigDict(json_schema_extra=strip_titles)


class MetricVerdict(_Output):
    """One metric: a score in [0, 1] (out-of-range numbers are clamped) and why."""

    score: Confidence
    reason: str


class ScoreOutput(_Output):
    """The scorer's reply; the bounds come from :func:`score_output`."""

    task_type: str
    goal_completion: MetricVerdict
    tool_use_correctness: MetricVerdict
    efficiency: MetricVerdict
    user_satisfaction: MetricVerdict


@lru_cache(maxsize=8)
def score_output(reason_chars: int = 300, task_type_chars: int = 40) -> type[ScoreOutput]:
    """The score reply model with its bounds in its fields (and JSON Schema)."""
    verdict = create_model("MetricVerdict", __base__=MetricVerdict,
                           reason=(soft_text(reason_chars), ...))
    return create_model(
        "ScoreOutput", __base__=ScoreOutput, task_type=(soft_text(task_type_chars), ...),
        goal_completion=(verdict, ...), tool_use_correctness=(verdict, ...),
        efficiency=(verdict, ...), user_satisfaction=(verdict, ...))
