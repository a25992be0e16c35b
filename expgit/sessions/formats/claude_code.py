"""Claude Code transcripts (``~/.claude/projects/*/<session>.jsonl``): one JSON object a
line, ``{"type": "user" | "assistant", "message": {"role", "content"}, "sessionId",
"uuid", "parentUuid", "timestamp", ...}``; ``message.content`` holds Anthropic blocks.

Claude Code writes one assistant response as several lines (one per content block) with
the same ``message.id``; they are merged back into one message. The model of an
assistant message is its row's ``message.model``.

* ``isSidechain`` lines are a sub-agent's own conversation (a ``Task`` call's): they are
  not part of the session's messages; :func:`split_sidechains` groups them (by
  ``agentId``, else by the chain of ``parentUuid``) into sub-agent sessions of their own.
  The ``Task`` call and its result stay in the parent; :func:`task_agents` links each
  call to the sub-agent it started (its result's ``toolUseResult.agentId`` or the
  ``agentId: ...`` line of its text). Newer versions write a sub-agent to a file of its
  own, ``<session>/subagents/agent-<agentId>.jsonl``: its lines are all sidechain.
* a compaction summary (``isCompactSummary``: the earlier conversation, summarised when
  the context filled up) is a ``system`` message: context, not a user turn;
* ``<system-reminder>`` blocks Claude Code adds to user turns are taken out (counted as
  ``system_reminder``): they are not the user's words, and a turn of only reminders adds
  no message, so it can never start a task;
* skipped, and counted in ``skipped_rows``: other line types (``summary``, ``system``,
  ``file-history-snapshot``, ...) and ``isMeta`` lines (caveats Claude Code injects)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from expgit.sessions.formats.anthropic import add_blocks, result_text
from expgit.sessions.formats.base import Claim, Row
from expgit.sessions.formats.transcript_builder import TranscriptBuilder

_OTHER_TYPES = {"summary", "system", "file-history-snapshot", "queue-operation",
                "progress", "attachment"}
TASK_TOOLS = {"Task", "Agent"}
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.DOTALL)
_AGENT_ID = re.compile(r"\bagent_?[iI]d:\s*([\w@.-]+)")
SYNTHETIC_MODEL = "<synthetic>"  # what Claude Code writes for messages no model wrote


class _InnerMessage(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    model: str | None = None


class ClaudeCodeLine(BaseModel):
    type: Literal["user", "assistant"]
    message: _InnerMessage
    sessionId: str | None = None  # Claude Code's keys
    isMeta: bool = False
    isSidechain: bool = False
    isCompactSummary: bool = False


class ClaudeCodeFormat:
    """Reads Claude Code transcript lines (user/assistant; other line types skipped).
    ``sidechain``: read a sub-agent's lines (else they are skipped: they are read as
    sub-agent sessions of their own)."""

    name = "claude_code"

    def __init__(self, sidechain: bool = False) -> None:
        self.sidechain = sidechain

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
        if parsed.isMeta or parsed.isSidechain != self.sidechain:
            builder.skipped["meta" if parsed.isMeta else "sidechain"] += 1
            return True
        message = parsed.message
        if parsed.isCompactSummary:
            builder.add("system", builder.text(result_text(message.content)), line)
            return True
        content = message.content
        if parsed.type == "user":
            content = _without_reminders(content, builder)
        elif message.model and message.model != SYNTHETIC_MODEL:
            builder.model = message.model
        merge_key = message.id if parsed.type == "assistant" else None
        add_blocks(message.role, content, line, builder, merge_key)
        return True


def _without_reminders(content: str | list[dict[str, Any]], builder: TranscriptBuilder
                       ) -> str | list[dict[str, Any]]:
    """A user turn's content without its ``<system-reminder>`` blocks (counted)."""
    def strip(text: str) -> str:
        found = len(_REMINDER.findall(text))
        if not found:
            return text
        builder.skipped["system_reminder"] += found
        return _REMINDER.sub("\n", text).strip()

    if isinstance(content, str):
        return strip(content)
    return [{**block, "text": strip(block["text"])}
            if block.get("type") == "text" and isinstance(block.get("text"), str) else block
            for block in content]


def split_sidechains(rows: list[tuple[int, Row]]
                     ) -> tuple[list[tuple[int, Row]], dict[str, list[tuple[int, Row]]]]:
    """The rows of the session itself, and each sub-agent's rows by its id (its
    ``agentId``; else the ``uuid`` its chain of ``parentUuid`` starts from)."""
    main: list[tuple[int, Row]] = []
    groups: dict[str, list[tuple[int, Row]]] = {}
    root_of: dict[str, str] = {}
    for number, row in rows:
        if row.get("isSidechain") is not True:
            main.append((number, row))
            continue
        uuid, parent = row.get("uuid"), row.get("parentUuid")
        agent = row.get("agentId")
        if isinstance(agent, str) and agent:
            key = agent
        else:
            key = root_of.get(parent, "") if isinstance(parent, str) else ""
            key = key or (uuid if isinstance(uuid, str) and uuid else f"line-{number}")
        if isinstance(uuid, str):
            root_of[uuid] = key
        groups.setdefault(key, []).append((number, row))
    return main, groups


def task_agents(rows: list[tuple[int, Row]]) -> tuple[dict[str, str], dict[str, str]]:
    """Of a session's ``Task`` calls: the sub-agent id each one's result names, and the
    prompt each one gave (by tool id)."""
    prompts: dict[str, str] = {}
    agents: dict[str, str] = {}
    for _, row in rows:
        message = row.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and block.get("name") in TASK_TOOLS:
                task_input = block.get("input")
                prompt = task_input.get("prompt") if isinstance(task_input, dict) else None
                prompts[str(block.get("id") or "")] = prompt if isinstance(prompt, str) else ""
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in prompts:
                agent = _agent_of(row, block)
                if agent:
                    agents[str(block["tool_use_id"])] = agent
    return agents, prompts


def _agent_of(row: Row, block: dict[str, Any]) -> str | None:
    result = row.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("agentId"), str):
        return str(result["agentId"])
    match = _AGENT_ID.search(result_text(block.get("content")))
    return match.group(1) if match else None


def session_id_of(row: Row) -> str | None:
    """The session id a row carries (``sessionId`` or ``session_id``), if any."""
    for key in ("sessionId", "session_id"):
        value = row.get(key)
        if isinstance(value, str) and value:
            return value
    return None
