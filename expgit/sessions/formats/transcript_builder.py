"""TranscriptBuilder: the shared assembly of normalised messages for every row format.

A tool call becomes a :class:`~expgit.core.domain.ToolPart` (status ``pending``) in the
message that made it; its result, found later by id, fills ``tool_output`` of that same
part (status ``completed``, or ``error``) instead of becoming a message of its own. A
result whose call is unknown (or already answered) stays a ``tool`` message with one
ToolPart. A row that gives no part (only reasoning, say) adds no message.

``model``: the model name in force (a format sets it from its rows); each assistant
message records the model in force when it began (:meth:`TranscriptBuilder.models`).
A reasoning summary (:meth:`TranscriptBuilder.reason`) goes to the assistant message of
the same merge key, made or to come.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from expgit.core.domain import Message, Part, TextPart, ToolPart

Role = Literal["system", "user", "assistant", "tool"]
PENDING = "pending"


@dataclass
class _Draft:
    role: Role
    parts: list[Part]
    line: int
    merge_key: str | None
    model: str | None = None
    reasoning: list[str] = field(default_factory=list)


@dataclass
class TranscriptBuilder:
    """Collects messages row by row; :meth:`messages` gives the normalised result."""

    drafts: list[_Draft] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    reasoning_dropped: int = 0
    model: str | None = None
    _calls: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, role: Role, parts: list[Part], line: int,
            merge_key: str | None = None, *, answered: int = 0) -> None:
        """Append a message of ``parts`` (read from source ``line``). With a
        ``merge_key`` equal to the previous message's (and the same role), the parts
        extend that message instead (a response streamed over several rows). A row with
        no parts adds nothing; it is counted as ``empty`` unless it ``answered`` tool
        calls (its results went into their calls)."""
        if not parts:
            if not answered:
                self.skipped["empty"] += 1
            return
        draft = self._draft(role, line, merge_key)
        for part in parts:
            if isinstance(part, ToolPart) and part.tool_id and part.tool_output is None:
                self._calls.setdefault(part.tool_id,
                                       (len(self.drafts) - 1, len(draft.parts)))
            draft.parts.append(part)

    def _draft(self, role: Role, line: int, merge_key: str | None) -> _Draft:
        last = self.drafts[-1] if self.drafts else None
        if (merge_key is not None and last is not None and last.merge_key == merge_key
                and last.role == role):
            return last
        draft = _Draft(role, [], line, merge_key,
                       self.model if role == "assistant" else None)
        self.drafts.append(draft)
        return draft

    def reason(self, summary: str, line: int, merge_key: str | None) -> None:
        """A reasoning summary of the assistant message with ``merge_key`` (the last
        one if it has that key, else a new one its next parts will fill; one that gets
        no part is not kept). Blank summaries are ignored."""
        if summary.strip():
            self._draft("assistant", line, merge_key).reasoning.append(summary.strip())

    def call(self, tool_id: str, name: str, tool_input: dict[str, object]) -> ToolPart:
        """A tool call part, waiting for its result."""
        return ToolPart(tool_id=tool_id, tool_name=name or "unknown",
                        tool_input=dict(tool_input), tool_status=PENDING)

    def result(self, tool_id: str, output: str, line: int, *, name: str | None = None,
               is_error: bool = False) -> None:
        """The result of call ``tool_id``: stored in the call's part when the call is
        known and unanswered, else kept as a ``tool`` message."""
        status = "error" if is_error else "completed"
        where = self._calls.pop(tool_id, None) if tool_id else None
        if where is not None:
            draft = self.drafts[where[0]]
            part = draft.parts[where[1]]
            assert isinstance(part, ToolPart)
            draft.parts[where[1]] = part.model_copy(
                update={"tool_output": output, "tool_status": status})
            return
        orphan = ToolPart(tool_id=tool_id, tool_name=name or "unknown", tool_output=output,
                          tool_status=status)
        self.drafts.append(_Draft("tool", [orphan], line, None))

    def text(self, text: str) -> list[Part]:
        """A text part, or none for blank text."""
        return [TextPart(text=text)] if text.strip() else []

    def messages(self) -> tuple[list[Message], list[int]]:
        """The messages with parts, and the source line each one starts at."""
        kept = [d for d in self.drafts if d.parts]
        return ([Message(role=d.role, parts=d.parts,
                         reasoning="\n\n".join(d.reasoning) if d.reasoning else None)
                 for d in kept], [d.line for d in kept])

    def unkept_reasoning(self) -> int:
        """Reasoning summaries of assistant messages that got no part (not kept)."""
        return sum(len(d.reasoning) for d in self.drafts if d.reasoning and not d.parts)

    def models(self) -> list[str | None]:
        """The model of each message :meth:`messages` gives (None: not an assistant
        message, or no model known)."""
        return [d.model for d in self.drafts if d.parts]
