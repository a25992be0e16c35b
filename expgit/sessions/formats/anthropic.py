"""Anthropic Messages rows: ``{"role", "content"}`` with ``content`` a string or a list
of blocks: ``text``, ``thinking`` / ``redacted_thinking`` (dropped and counted),
``tool_use`` / ``server_tool_use`` (a ToolPart), ``tool_result`` (fills its call's
ToolPart; ``is_error`` -> status ``error``), ``image`` / ``document`` (placeholders)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from expgit.core.domain import Part
from expgit.sessions.formats.base import Claim, Row, parse_arguments, placeholder
from expgit.sessions.formats.transcript_builder import Role, TranscriptBuilder

_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking",
                     "server_tool_use", "document"}
_REASONING = {"thinking", "redacted_thinking"}


class AnthropicRow(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str | list[dict[str, Any]]


def result_text(content: object) -> str:
    """A tool result's content (a string or a list of blocks) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                texts.append(placeholder(str(block.get("type") or "content")))
            else:
                texts.append(str(block))
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def add_blocks(role: Role, content: str | list[dict[str, Any]], line: int,
               builder: TranscriptBuilder, merge_key: str | None = None) -> None:
    """Add one Anthropic message (``content`` a string or blocks) to ``builder``."""
    if isinstance(content, str):
        builder.add(role, builder.text(content), line, merge_key)
        return
    parts: list[Part] = []
    answered = 0
    for block in content:
        kind = str(block.get("type", ""))
        if kind == "text":
            parts += builder.text(str(block.get("text") or ""))
        elif kind in _REASONING:
            builder.reasoning_dropped += 1
        elif kind in ("tool_use", "server_tool_use"):
            parts.append(builder.call(str(block.get("id") or ""), str(block.get("name") or ""),
                                      parse_arguments(block.get("input"))))
        elif kind == "tool_result" or (kind.endswith("_tool_result") and "tool_use_id" in block):
            builder.result(str(block.get("tool_use_id") or ""),
                           result_text(block.get("content")), line,
                           is_error=bool(block.get("is_error")))
            answered += 1
        else:
            parts.append(builder.text(placeholder(kind or "content"))[0])
    builder.add(role, parts, line, merge_key, answered=answered)


class AnthropicFormat:
    """Reads Anthropic Messages rows; tool results fill their calls' ToolParts."""

    name = "anthropic"

    def claims(self, row: Row) -> Claim:
        if "role" not in row or "tool_calls" in row or "tool_call_id" in row:
            return "no"
        content = row.get("content")
        if isinstance(content, list):
            kinds = {b.get("type") for b in content if isinstance(b, dict)}
            if kinds & _ANTHROPIC_BLOCKS or any(
                    isinstance(b, dict) and b.get("type") == "image" and "source" in b
                    for b in content):
                return "yes"
        return "maybe" if row.get("role") in ("system", "user", "assistant") else "no"

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool:
        try:
            parsed = AnthropicRow.model_validate(row)
        except ValidationError:
            return False
        add_blocks(parsed.role, parsed.content, line, builder)
        return True
