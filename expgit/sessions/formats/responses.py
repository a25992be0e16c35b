"""OpenAI Responses API items, one a line: ``{"type": "message", "role", "content"}``
(parts ``input_text`` / ``output_text`` / ``refusal``; images and files become
placeholders), ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` (a
ToolPart, by ``call_id``), ``function_call_output`` / ``custom_tool_call_output`` (fill
their call's ToolPart), ``web_search_call`` (a ToolPart with no output) and
``reasoning``.

The assistant items between two inputs (a user message, a tool output) are one
response, so they become ONE assistant message. A ``reasoning`` item's ``summary`` texts
are kept as that message's ``reasoning``; its ``encrypted_content`` is never read, and
its raw ``content`` (reasoning text, when a provider returns it) is dropped and counted,
like reasoning in the other formats. Items of another type are skipped and counted
(``skipped_rows["responses:<type>"]``), never fatal. The Codex CLI rollout envelope
(:mod:`expgit.sessions.formats.codex`) carries these items as its payloads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from expgit.core.jsonl import loads_untrusted
from expgit.sessions.formats.base import Claim, Row, parse_arguments
from expgit.sessions.formats.openai import content_text
from expgit.sessions.formats.transcript_builder import Role, TranscriptBuilder

ITEM_TYPES = {"message", "function_call", "function_call_output", "custom_tool_call",
              "custom_tool_call_output", "reasoning", "local_shell_call",
              "web_search_call", "item_reference"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}


class _MessageItem(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]] | None = None


class _CallItem(BaseModel):
    call_id: str = ""
    name: str = ""
    arguments: str | dict[str, Any] | None = None  # function_call
    input: str | None = None  # custom_tool_call: free text (a patch, a script)


class _OutputItem(BaseModel):
    call_id: str = ""
    output: str | dict[str, Any] | list[Any] | None = None


class _ReasoningItem(BaseModel):
    summary: list[dict[str, Any]] | None = None
    content: list[dict[str, Any]] | None = None


def output_text(output: str | dict[str, Any] | list[Any] | None) -> tuple[str, bool]:
    """A tool output as text, and whether it reports a failure (``success: false``)."""
    if output is None:
        return "", False
    if isinstance(output, str):
        return _shell_output(output)
    if isinstance(output, list):
        return content_text([p for p in output if isinstance(p, dict)]), False
    failed = output.get("success") is False
    for key in ("content", "output"):
        if isinstance(output.get(key), str):
            return output[key], failed
    return json.dumps(output, ensure_ascii=False, sort_keys=True), failed


def _shell_output(text: str) -> tuple[str, bool]:
    """Codex records a shell call's output as ``{"output", "metadata": {"exit_code"}}``
    JSON text: its output, failed when the exit code is not 0. Other text as it is."""
    if not text.startswith("{") or '"metadata"' not in text:
        return text, False
    try:
        value = loads_untrusted(text)
    except ValueError:
        return text, False
    if not isinstance(value, dict) or not isinstance(value.get("output"), str):
        return text, False
    metadata = value.get("metadata")
    code = metadata.get("exit_code") if isinstance(metadata, dict) else None
    return value["output"], isinstance(code, int) and code != 0


@dataclass
class ResponsesReader:
    """Adds Responses items to a builder; ``turn`` counts the inputs seen, so the
    assistant items of one response share a merge key."""

    turn: int = 0

    def _key(self) -> str:
        return f"responses-turn-{self.turn}"

    def add_item(self, item: Row, line: int, builder: TranscriptBuilder) -> bool:
        """Add one item; False (nothing added) when it is not a valid item."""
        kind = item.get("type")
        if not isinstance(kind, str):
            return False
        try:
            return self._add(kind, item, line, builder)
        except ValidationError:
            return False

    def _add(self, kind: str, item: Row, line: int, builder: TranscriptBuilder) -> bool:
        if kind == "message":
            message = _MessageItem.model_validate(item)
            text = content_text(message.content)
            if message.role == "assistant":
                builder.add("assistant", builder.text(text), line, self._key())
            else:
                self.turn += 1
                role: Role = "user" if message.role == "user" else "system"
                builder.add(role, builder.text(text), line)
        elif kind in ("function_call", "custom_tool_call"):
            call = _CallItem.model_validate(item)
            arguments: dict[str, object] = (
                {"input": call.input or ""} if kind == "custom_tool_call"
                else parse_arguments(call.arguments))
            builder.add("assistant", [builder.call(call.call_id, call.name, arguments)],
                        line, self._key())
        elif kind == "local_shell_call":
            action = item.get("action")
            builder.add("assistant", [builder.call(
                str(item.get("call_id") or item.get("id") or ""), "local_shell",
                action if isinstance(action, dict) else {})], line, self._key())
        elif kind == "web_search_call":
            action = item.get("action")
            search = builder.call("", "web_search",
                                  action if isinstance(action, dict) else {})
            builder.add("assistant", [search.model_copy(update={"tool_status": "completed"})],
                        line, self._key())
        elif kind in _OUTPUTS:
            result = _OutputItem.model_validate(item)
            text, failed = output_text(result.output)
            self.turn += 1
            builder.result(result.call_id, text, line, is_error=failed)
        elif kind == "reasoning":
            reasoning = _ReasoningItem.model_validate(item)
            for summary in reasoning.summary or []:
                if isinstance(summary.get("text"), str):
                    builder.reason(summary["text"], line, self._key())
            if reasoning.content:
                builder.reasoning_dropped += 1
        else:
            builder.skipped[f"responses:{kind}"] += 1
        return True


class ResponsesFormat:
    """Reads Responses API items, one a line (see the module docstring); one instance
    per file (it counts the file's inputs)."""

    name = "responses"

    def __init__(self) -> None:
        self.reader = ResponsesReader()

    def claims(self, row: Row) -> Claim:
        kind = row.get("type")
        if kind not in ITEM_TYPES or "payload" in row:
            return "no"
        if kind == "message":
            return "yes" if "role" in row and "message" not in row else "no"
        return "yes"

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool:
        return self.reader.add_item(row, line, builder)
