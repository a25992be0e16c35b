"""OpenAI chat rows: ``{"role", "content", "tool_calls", "tool_call_id", "name",
"reasoning_content"}``; ``content`` is a string or a list of parts (``text``,
``input_text``, ``output_text``, ``refusal``; images, audio and files become a
placeholder). ``developer`` counts as ``system``. ``reasoning_content`` is dropped and
counted (see :mod:`expgit.sessions.formats.parse`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from expgit.core.domain import Part
from expgit.sessions.formats.base import Claim, Row, parse_arguments, placeholder
from expgit.sessions.formats.transcript_builder import Role, TranscriptBuilder

_TEXT_TYPES = {"text", "input_text", "output_text"}
_OPENAI_PART_TYPES = {"image_url", "input_text", "output_text", "refusal", "input_audio",
                      "input_image", "input_file", "file"}


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str = ""
    type: str = "function"
    function: _Function


class OpenAIRow(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a content string or list of parts (non-text parts as placeholders)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        kind = str(part.get("type", ""))
        if kind in _TEXT_TYPES and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            texts.append(placeholder(kind.removeprefix("input_") or "content"))
    return "\n".join(texts)


class OpenAIFormat:
    """Reads OpenAI chat rows; a ``tool`` row's result goes into its call's ToolPart."""

    name = "openai"

    def claims(self, row: Row) -> Claim:
        if "role" not in row:
            return "no"
        if row.get("type") == "message":  # a Responses API item: chat rows have no type
            return "maybe"
        if ("tool_calls" in row or "tool_call_id" in row or "reasoning_content" in row
                or row.get("role") in ("tool", "developer")):
            return "yes"
        content = row.get("content")
        if isinstance(content, list):
            kinds = {p.get("type") for p in content if isinstance(p, dict)}
            if kinds & _OPENAI_PART_TYPES:
                return "yes"
            if kinds - {"text"}:
                return "no"
        return "maybe"

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool:
        try:
            parsed = OpenAIRow.model_validate(row)
        except ValidationError:
            return False
        if parsed.reasoning_content:
            builder.reasoning_dropped += 1
        text = content_text(parsed.content)
        if parsed.role == "tool":
            builder.result(parsed.tool_call_id or "", text, line, name=parsed.name)
            return True
        role: Role = "system" if parsed.role == "developer" else parsed.role
        parts: list[Part] = builder.text(text)
        for call in parsed.tool_calls or []:
            parts.append(builder.call(call.id, call.function.name,
                                      parse_arguments(call.function.arguments)))
        builder.add(role, parts, line)
        return True
