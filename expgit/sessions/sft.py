"""Chat fine-tuning examples in the OpenAI JSONL format, from normalised messages.

One example is ``{"messages": [...]}``: ``system`` / ``user`` messages with a string
``content``; ``assistant`` messages with ``content`` and/or ``tool_calls`` (``id``,
``type: "function"``, ``function: {name, arguments}`` with the arguments as a JSON
string); after them one ``tool`` message per answered call (``tool_call_id``,
``content``). A ToolPart is a call and its result in one (see
:mod:`expgit.sessions.formats.parse`), so it becomes both. A call without a result is kept
only at the
very end of an example; elsewhere it is left out (the API requires every call to be
answered before the next message). A ``tool_status`` of ``error`` is not representable in this
format: the result's text is kept, the status is not. Texts are joined by newlines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from expgit.core.domain import Message, ToolPart
from expgit.errors import InvalidInputError
from expgit.sessions.formats.openai import OpenAIFormat
from expgit.sessions.formats.transcript_builder import TranscriptBuilder
from expgit.store.folder_files import write_file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SFTFunction(_Strict):
    name: str = Field(min_length=1)
    arguments: str

    @model_validator(mode="after")
    def _json_arguments(self) -> SFTFunction:
        try:
            json.loads(self.arguments)
        except ValueError:
            raise ValueError(f"arguments of {self.name} are not JSON") from None
        return self


class SFTToolCall(_Strict):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: SFTFunction


class SFTSystemMessage(_Strict):
    role: Literal["system"]
    content: str


class SFTUserMessage(_Strict):
    role: Literal["user"]
    content: str


class SFTAssistantMessage(_Strict):
    role: Literal["assistant"]
    content: str | None = None
    tool_calls: list[SFTToolCall] | None = None

    @model_validator(mode="after")
    def _says_something(self) -> SFTAssistantMessage:
        if not self.content and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self


class SFTToolMessage(_Strict):
    role: Literal["tool"]
    tool_call_id: str = Field(min_length=1)
    content: str


SFTMessage = Annotated[SFTSystemMessage | SFTUserMessage | SFTAssistantMessage
                       | SFTToolMessage, Field(discriminator="role")]


class SFTExample(_Strict):
    """One training example; every tool message answers an earlier, unanswered call."""

    messages: list[SFTMessage] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> SFTExample:
        if not any(isinstance(m, SFTAssistantMessage) for m in self.messages):
            raise ValueError("an example needs at least one assistant message")
        seen: set[str] = set()
        open_calls: set[str] = set()
        for message in self.messages:
            if open_calls and not isinstance(message, SFTToolMessage):
                raise ValueError(f"tool calls {sorted(open_calls)} are not answered before "
                                 "the next message")
            if isinstance(message, SFTAssistantMessage):
                for call in message.tool_calls or []:
                    if call.id in seen:
                        raise ValueError(f"tool call id {call.id} is used twice")
                    seen.add(call.id)
                    open_calls.add(call.id)
            elif isinstance(message, SFTToolMessage):
                if message.tool_call_id not in open_calls:
                    raise ValueError(f"tool message {message.tool_call_id} answers no "
                                     "earlier open tool call")
                open_calls.discard(message.tool_call_id)
        return self


def validate_sft_example(obj: object) -> SFTExample:
    """``obj`` as a validated example; InvalidInputError says what is wrong."""
    try:
        return SFTExample.model_validate(obj)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(map(str, problem["loc"])) or "example"
        raise InvalidInputError(f"invalid SFT example: {where}: {problem['msg']}") from None


def _dump(example: SFTExample) -> dict[str, Any]:
    return example.model_dump(mode="json", exclude_none=True)


def to_sft_example(messages: Sequence[Message]) -> dict[str, Any]:
    """One chat fine-tuning example (validated) of ``messages``. Messages with nothing
    to say are left out; raises InvalidInputError when no assistant message is left."""
    rows: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for message in messages:
        calls = [p for p in message.parts if isinstance(p, ToolPart)]
        text = message.plain_text
        if message.role == "assistant":
            ids = [c.tool_id or f"call_{len(rows)}_{i}" for i, c in enumerate(calls)]
            if text.strip() or calls:
                row: dict[str, Any] = {"role": "assistant", "content": text or None}
                if calls:
                    row["tool_calls"] = [
                        {"id": i, "type": "function",
                         "function": {"name": c.tool_name,
                                      "arguments": json.dumps(c.tool_input,
                                                              ensure_ascii=False)}}
                        for i, c in zip(ids, calls, strict=True)]
                rows.append(row)
            open_calls.update(ids)
            results = list(zip(ids, calls, strict=True))
        else:
            if text.strip():
                role = "user" if message.role == "tool" else message.role
                rows.append({"role": role, "content": text})
            results = [(c.tool_id, c) for c in calls]
        for call_id, call in results:
            if call.tool_output is not None and call_id in open_calls:
                rows.append({"role": "tool", "tool_call_id": call_id,
                             "content": call.tool_output})
                open_calls.discard(call_id)
    return _dump(validate_sft_example({"messages": _drop_unanswered(rows)}))


def _drop_unanswered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` without the tool calls that get no result before the next message (the
    transcript lost their results); calls at the very end are kept (the example ends
    with the model deciding to call)."""
    answered = {r["tool_call_id"] for r in rows if r["role"] == "tool"}
    out: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        calls = row.get("tool_calls")
        if calls and any(r["role"] != "tool" for r in rows[index + 1:]):
            kept = [c for c in calls if c["id"] in answered]
            row = {**row, "tool_calls": kept or None}
            if not kept and not row["content"]:
                continue
        out.append(row)
    return out


def from_sft_example(obj: object) -> list[Message]:
    """The normalised messages of an example (validated first): the inverse of
    :func:`to_sft_example` for messages it can represent."""
    example = validate_sft_example(obj)
    builder = TranscriptBuilder()
    reader = OpenAIFormat()
    for line, message in enumerate(_dump(example)["messages"], start=1):
        reader.add_row(message, line, builder)
    return builder.messages()[0]


def write_sft_jsonl(examples: Iterable[object], path: Path) -> int:
    """Write one example a line to ``path``: every example is validated before anything
    is written, then the file is written atomically (:func:`write_file`: an error leaves
    ``path`` as it was). Returns the number of examples written."""
    lines = []
    for index, example in enumerate(examples, start=1):
        try:
            valid = validate_sft_example(example)
        except InvalidInputError as exc:
            raise InvalidInputError(f"example {index}: {exc.message}",
                                    hint="nothing was written") from None
        lines.append(json.dumps(_dump(valid), ensure_ascii=False))
    directory = path.resolve().parent
    if not directory.is_dir():
        raise InvalidInputError(f"cannot write {path}: {directory} is not a directory")
    write_file(path, "".join(line + "\n" for line in lines).encode("utf-8"), "100644")
    return len(lines)
