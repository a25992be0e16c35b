"""The replies of the training LLM stages, as pydantic models with bounded fields.

Each ``*_output(limits)`` function returns the model for one set of limits (cached): the
bounds are in its fields and so in its JSON Schema, which a grammar-constrained model
cannot break (see :mod:`expgit.train.components.llm_fields`). The base classes give the
shapes and field order; the class names (``AnalyzeOutput``, ``EstimateOutput``,
``MergeOutput``, ``CompressOutput``, ``ReflectOutput``) are the schema titles. Every
field is required (one fixed order for a grammar; OpenAI's strict mode wants it too).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from expgit.train.components.llm_fields import (
    AnalysisLimits,
    Confidence,
    EditLimits,
    body_field,
    name_field,
    soft_list,
    soft_text,
    strip_titles,
    summary_field,
)

GRADIENT_ID_CHARS = 16  # a gradient id is 12 hex digits; an unsaved one "local-N"


class _Output(BaseModel):
    model_config = ConfigDict(json_schema_extra=strip_titles)


class EstimatedEdit(_Output):
    """One proposed edit; the bounds come from :func:`estimate_output`."""

    name: str
    action: Literal["create", "update", "delete"]
    rationale: str
    summary: str
    tags: list[str]
    body: str
    confidence: Confidence


class EstimateOutput(_Output):
    """The estimator's reply: the proposed edits (possibly none)."""

    edits: list[EstimatedEdit]


class MergeItem(_Output):
    """One file the merge changes; the bounds come from :func:`merge_output`."""

    name: str
    action: Literal["upsert", "delete"]
    gradient_ids: list[str]
    rationale: str
    summary: str
    tags: list[str]
    body: str
    confidence: Confidence


class MergeOutput(_Output):
    """The merger's reply for one chunk: the files that change."""

    items: list[MergeItem]


class CompressedFile(_Output):
    name: str
    summary: str
    body: str


class CompressOutput(_Output):
    items: list[CompressedFile]


class AnalyzeOutput(_Output):
    """The analyst's reply for one rollout; the bounds come from :func:`analyze_output`."""

    title: str
    outcome: Literal["success", "failure", "partial"]
    summary: str
    key_steps: list[str]
    mistakes: list[str]
    lessons: list[str]
    retrieval_anchor: str


class ReflectOutput(AnalyzeOutput):
    """The one-call reply for one rollout: its analysis (the fields of
    :class:`AnalyzeOutput`, first, so the model reasons before it edits), then the
    proposed edits; the bounds come from :func:`reflect_output`."""

    edits: list[EstimatedEdit]

    def analysis(self, limits: AnalysisLimits) -> AnalyzeOutput:
        """The analysis part, as the analyzer's own reply model."""
        return analyze_output(limits).model_validate(self.model_dump(exclude={"edits"}))


@lru_cache(maxsize=32)
def estimate_output(limits: EditLimits) -> type[EstimateOutput]:
    """The estimate reply model with ``limits`` in its fields (and JSON Schema)."""
    actions: Any = Literal["create", "update", "delete"] if limits.allow_delete \
        else Literal["create", "update"]
    edit = create_model(
        "EstimatedEdit", __base__=EstimatedEdit, name=(name_field(limits), ...),
        action=(actions, ...),
        rationale=(soft_text(limits.rationale_chars, min_length=1), ...),
        summary=summary_field(limits),
        tags=(soft_list(limits.tag_chars, limits.max_tags), ...),
        body=(body_field(limits.body_chars), ...))
    return create_model("EstimateOutput", __base__=EstimateOutput,
                        edits=(list[edit], Field(max_length=limits.max_edits)))  # type: ignore[valid-type]


@lru_cache(maxsize=32)
def merge_output(limits: EditLimits, max_ids: int) -> type[MergeOutput]:
    """The merge reply model with ``limits`` in its fields (and JSON Schema); at most
    ``max_ids`` (the chunk's size) and ``limits.max_ids`` cited gradient ids per item."""
    actions: Any = Literal["upsert", "delete"] if limits.allow_delete else Literal["upsert"]
    item = create_model(
        "MergeItem", __base__=MergeItem, name=(name_field(limits), ...),
        action=(actions, ...),
        gradient_ids=(soft_list(GRADIENT_ID_CHARS, min(max_ids, limits.max_ids)), ...),
        rationale=(soft_text(limits.rationale_chars), ...),
        summary=summary_field(limits),
        tags=(soft_list(limits.tag_chars, limits.max_tags), ...),
        body=(body_field(limits.body_chars), ...))
    return create_model("MergeOutput", __base__=MergeOutput,
                        items=(list[item], Field(max_length=limits.max_items)))  # type: ignore[valid-type]


@lru_cache(maxsize=32)
def compress_output(limits: EditLimits) -> type[CompressOutput]:
    """The compress reply model with ``limits`` in its fields (and JSON Schema)."""
    item = create_model(
        "CompressedFile", __base__=CompressedFile, name=(name_field(limits), ...),
        summary=summary_field(limits),
        body=(body_field(limits.body_chars), ...))
    return create_model("CompressOutput", __base__=CompressOutput,
                        items=(list[item], Field(max_length=limits.max_items)))  # type: ignore[valid-type]


@lru_cache(maxsize=32)
def analyze_output(limits: AnalysisLimits) -> type[AnalyzeOutput]:
    """The analyze reply model with ``limits`` in its fields (and JSON Schema)."""
    item = limits.item_chars
    return create_model(
        "AnalyzeOutput", __base__=AnalyzeOutput,
        title=(soft_text(limits.title_chars, min_length=1), ...),
        summary=(soft_text(limits.summary_chars), ...),
        key_steps=(soft_list(item, limits.max_key_steps), ...),
        mistakes=(soft_list(item, limits.max_mistakes), ...),
        lessons=(soft_list(item, limits.max_lessons), ...),
        retrieval_anchor=(soft_text(limits.anchor_chars, min_length=1), ...))


@lru_cache(maxsize=32)
def reflect_output(analysis: AnalysisLimits, edits: EditLimits) -> type[ReflectOutput]:
    """The one-call reply model: the analysis fields of :func:`analyze_output`, then the
    edits of :func:`estimate_output`, with both sets of bounds."""
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in
        analyze_output(analysis).model_fields.items()}
    fields["edits"] = (estimate_output(edits).model_fields["edits"].annotation,
                       estimate_output(edits).model_fields["edits"])
    return create_model("ReflectOutput", __base__=ReflectOutput, **fields)
