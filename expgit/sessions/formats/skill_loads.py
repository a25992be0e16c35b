"""The skill loads a session shows: when the agent read an Agent Skill, found in the
normalised messages of every format (docs/skill-usage.md says which signal counts where).

Two signals, both tool calls (a :class:`~expgit.core.domain.ToolPart`):

* ``skill_tool``: a call of the tool named ``Skill`` (Claude Code's; any format whose log
  holds such a call); ``input.skill`` names the skill (``plugin:name`` for a plugin's).
  A call without a usable name is still a load, of no skill (``skill`` None): counted as
  unknown, never fatal. A call whose result is an error (Claude Code's answer to a skill
  it does not have) is kept with ``failed`` true: it loaded nothing, so no usage count
  or track record takes it;
* ``skill_file``: a call whose input names a path ``.../skills/<name>/SKILL.md`` (a
  ``Read`` of it, a shell ``cat``/``sed`` of it: Codex, Gemini CLI, Copilot and the others
  that read skills as files). A tool that writes files (``Write``, ``Edit``,
  ``apply_patch``, ...) is not a load. Paging through one SKILL.md with several reads in
  one turn of the user is one load: reads of the same skill count once per user turn.

Each load keeps the index of the message that made the call and that message's time
(the ``timestamp`` of the row it starts at: Claude Code and Codex write one on every
row). Names are untrusted: a name that is not a skill name (``[a-z0-9-]``, at most 64
characters, optionally after a ``plugin:`` prefix) or that the redactor would change is
kept as None.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.domain import Message, ToolPart
from expgit.core.redaction.text import redact_text
from expgit.sessions.formats.feedback import row_time

SKILL_TOOL = "Skill"
# tools that write a file: naming a SKILL.md there edits the skill, it does not load it
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch",
                         "write_file", "edit_file", "replace", "str_replace_based_edit_tool"})
_NAME = re.compile(r"(?:[a-z0-9][a-z0-9_.-]{0,63}:)?[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
_SKILL_FILE = re.compile(
    r"(?:^|[\s/\"'=:(])skills/([a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?)/SKILL\.md(?![\w.])")
_MAX_STRINGS = 64  # of one call's input: the strings searched for a SKILL.md path
_MAX_CHARS = 20_000  # of one string searched


class SkillLoad(BaseModel):
    """One load of a skill in a session: which skill (None: the call named none that can
    be read), when (None: the log has no time), the message that made the call, and the
    signal that showed it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    skill: str | None
    at: datetime | None = None
    message_index: int = Field(ge=0)
    via: Literal["skill_tool", "skill_file"] = "skill_tool"
    # the call's result was an error: nothing was loaded (left out of the JSON if not)
    failed: bool = Field(default=False, exclude_if=lambda value: not value)

    @property
    def loaded(self) -> str | None:
        """The skill this load put in the agent's context: None for a failed call or
        one that named no skill."""
        return None if self.failed else self.skill


def skill_name(value: object) -> str | None:
    """``value`` as a skill name, None if it is not one (or holds something to redact)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value.strip()):
        return None
    name = value.strip()
    redacted, _ = redact_text(name)
    return name if redacted == name else None


def message_times(starts: Sequence[int], rows: Sequence[tuple[int, dict[str, Any]]]
                  ) -> list[datetime | None]:
    """The time of each message (``starts[i]``: the source line it starts at): the
    ``timestamp`` of that row, in UTC; None where the row has none."""
    at_line = {line: row.get("timestamp") for line, row in rows if "timestamp" in row}
    times: list[datetime | None] = []
    for line in starts:
        at = row_time(at_line.get(line))
        times.append(None if at is None else
                     at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC))
    return times


def _strings(value: object, depth: int = 0) -> Iterator[str]:
    if isinstance(value, str):
        yield value[:_MAX_CHARS]
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif depth < 4 and isinstance(value, list):
        for item in value:
            yield from _strings(item, depth + 1)


def _read_skills(part: ToolPart) -> list[str]:
    """The skills whose SKILL.md the call's input names (in order, each once)."""
    if part.tool_name in WRITE_TOOLS:
        return []
    found: dict[str, None] = {}
    for count, text in enumerate(_strings(part.tool_input)):
        if count >= _MAX_STRINGS:
            break
        if "SKILL.md" in text:
            found.update((m.group(1), None) for m in _SKILL_FILE.finditer(text))
    return list(found)


def skill_loads(messages: Sequence[Message], times: Sequence[datetime | None]
                ) -> list[SkillLoad]:
    """The skill loads of a session's messages (``times[i]``: of ``messages[i]``)."""
    loads: list[SkillLoad] = []
    read_this_turn: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "user":
            read_this_turn.clear()
        at = times[index] if index < len(times) else None
        for part in message.parts:
            if not isinstance(part, ToolPart):
                continue
            if part.tool_name == SKILL_TOOL:
                loads.append(SkillLoad(skill=skill_name(part.tool_input.get("skill")), at=at,
                                       message_index=index,
                                       failed=part.tool_status == "error"))
                continue
            for name in _read_skills(part):
                if name not in read_this_turn:
                    read_this_turn.add(name)
                    loads.append(SkillLoad(skill=name, at=at, message_index=index,
                                           via="skill_file"))
    return loads


def time_span(times: Sequence[datetime | None]) -> tuple[datetime | None, datetime | None]:
    """The first and last time among a session's message times."""
    known = [t for t in times if t is not None]
    return (min(known), max(known)) if known else (None, None)
