"""TranscriptBuilder: the shared assembly of normalised messages for every row format.

A tool call becomes a :class:`~expgit.train.domain.ToolPart` (status ``pending``) in the
message that made it; its result, found later by id, fills ``tool_output`` of that same
part (status ``completed``, or ``error``) instead of becoming a message of its own. A
result whose call is unknown (or already answered) stays a ``tool`` message with one
ToolPart. A row that gives no part (only reasoning, say) adds no message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from expgit.train.domain import Message, Part, TextPart, ToolPart

Role = Literal["system", "user", "assistant", "tool"]
PENDING = "pending"


@dataclass
class _Draft:
    role: Role
    parts: list[Part]
    line: int
    merge_key: str | None


@dataclass
class TranscriptBuilder:
    """Collects messages row by row; :meth:`messages` gives the normalised result."""

    drafts: list[_Draft] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    reasoning_dropped: int = 0
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
        last = self.drafts[-1] if self.drafts else None
        if (merge_key is not None and last is not None and last.merge_key == merge_key
                and last.role == role):
            draft = last
        else:
            draft = _Draft(role, [], line, merge_key)
            self.drafts.append(draft)
        for part in parts:
            if isinstance(part, ToolPart) and part.tool_id and part.tool_output is None:
                self._calls.setdefault(part.tool_id,
                                       (len(self.drafts) - 1, len(draft.parts)))
            draft.parts.append(part)

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
        return ([Message(role=d.role, parts=d.parts) for d in kept], [d.line for d in kept])
