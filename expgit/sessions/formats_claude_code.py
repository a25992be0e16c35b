"""Claude Code transcripts (``~/.claude/projects/*/<session>.jsonl``): one JSON object a
line, ``{"type": "user" | "assistant", "message": {"role", "content"}, "sessionId",
"uuid", "parentUuid", "timestamp", ...}``; ``message.content`` holds Anthropic blocks.

Claude Code writes one assistant response as several lines (one per content block) with
the same ``message.id``; they are merged back into one message. Skipped, and counted in
``skipped_rows``: other line types (``summary``, ``system``, ``file-history-snapshot``,
...), ``isMeta`` lines (caveats Claude Code injects, not the user's words) and
``isSidechain`` lines (a sub-agent's own conversation)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from expgit.sessions.formats_anthropic import add_blocks
from expgit.sessions.formats_base import Claim, Row
from expgit.sessions.transcript_builder import TranscriptBuilder

_OTHER_TYPES = {"summary", "system", "file-history-snapshot", "queue-operation",
                "progress", "attachment"}


class _InnerMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]
    id: str | None = None


class ClaudeCodeLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["user", "assistant"]
    message: _InnerMessage
    sessionId: str | None = None  # Claude Code's keys
    isMeta: bool = False
    isSidechain: bool = False


class ClaudeCodeFormat:
    """Reads Claude Code transcript lines (user/assistant; other line types skipped)."""

    name = "claude_code"

    def claims(self, row: Row) -> Claim:
        if "role" in row or not isinstance(row.get("type"), str):
            return "no"
        if isinstance(row.get("message"), dict) or row["type"] in _OTHER_TYPES:
            return "yes"
        return "no"

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool:
        kind = row.get("type")
        if isinstance(kind, str) and kind not in ("user", "assistant") and "role" not in row:
            builder.skipped[f"claude_code:{kind}"] += 1
            return True
        try:
            parsed = ClaudeCodeLine.model_validate(row)
        except ValidationError:
            return False
        if parsed.isMeta or parsed.isSidechain:
            builder.skipped["meta" if parsed.isMeta else "sidechain"] += 1
            return True
        merge_key = parsed.message.id if parsed.type == "assistant" else None
        add_blocks(parsed.message.role, parsed.message.content, line, builder, merge_key)
        return True


def session_id_of(row: Row) -> str | None:
    """The session id a row carries (``sessionId`` or ``session_id``), if any."""
    for key in ("sessionId", "session_id"):
        value = row.get(key)
        if isinstance(value, str) and value:
            return value
    return None
