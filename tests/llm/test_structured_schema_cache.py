"""The JSON Schema of an output model is computed once per model class."""

from __future__ import annotations

import json

from pydantic import BaseModel

from expgit.llm.structured import output_schema


class Answer(BaseModel):
    text: str
    score: float


class Other(BaseModel):
    ok: bool


def test_output_schema_is_computed_once_per_model() -> None:
    first, text = output_schema(Answer)
    again, same_text = output_schema(Answer)
    assert first is again and text is same_text  # cached, not rebuilt
    assert first == Answer.model_json_schema()
    assert json.loads(text) == first and " " not in text  # compact
    assert output_schema(Other)[0] == Other.model_json_schema() != first
