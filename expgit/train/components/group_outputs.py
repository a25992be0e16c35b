"""The reply of a group's ``group_reflect`` call, as a pydantic model with bounded fields.

The fields of a trajectory (:class:`~expgit.train.components.llm_outputs.AnalyzeOutput`)
but its outcome, which follows from the group's worst run, with the ``difference`` that
decided the outcome after the summary (the model says what differed before it edits),
then the edits of :func:`~expgit.train.components.llm_outputs.estimate_output`. The class
name (``GroupReflectOutput``) is the schema title.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from expgit.train.components.llm_fields import (
    AnalysisLimits,
    EditLimits,
    soft_text,
    strip_titles,
)
from expgit.train.components.llm_outputs import (
    AnalyzeOutput,
    EstimatedEdit,
    analyze_output,
    estimate_output,
)

Outcome = Literal["success", "failure", "partial"]


class GroupReflectOutput(BaseModel):
    """The one-call reply for one group; the bounds come from
    :func:`group_reflect_output`."""

    model_config = ConfigDict(json_schema_extra=strip_titles)

    title: str
    summary: str
    difference: str
    key_steps: list[str]
    mistakes: list[str]
    lessons: list[str]
    retrieval_anchor: str
    edits: list[EstimatedEdit]

    def analysis(self, limits: AnalysisLimits, outcome: Outcome) -> AnalyzeOutput:
        """The trajectory part, as the analyzer's own reply model, with ``outcome``."""
        fields = self.model_dump(exclude={"edits", "difference"})
        return analyze_output(limits).model_validate({**fields, "outcome": outcome})


@lru_cache(maxsize=32)
def group_reflect_output(analysis: AnalysisLimits, edits: EditLimits
                         ) -> type[GroupReflectOutput]:
    """The group reply model: the analysis fields of :func:`analyze_output` (no
    outcome), the ``difference`` (at most a summary's characters), then the edits of
    :func:`estimate_output`, with both sets of bounds."""
    analyzed = analyze_output(analysis).model_fields
    fields: dict[str, Any] = {}
    for name in GroupReflectOutput.model_fields:
        if name == "difference":
            fields[name] = (soft_text(analysis.summary_chars, min_length=1), ...)
        elif name == "edits":
            edit_field = estimate_output(edits).model_fields["edits"]
            fields[name] = (edit_field.annotation, edit_field)
        else:
            fields[name] = (analyzed[name].annotation, analyzed[name])
    return create_model("GroupReflectOutput", __base__=GroupReflectOutput, **fields)
