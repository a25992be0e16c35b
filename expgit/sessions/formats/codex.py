"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): one
``{"timestamp", "type", "payload"}`` envelope a line.

* ``session_meta``: the session (``payload.id`` is its id); nothing else is read;
* ``turn_context``: the turn's settings; ``payload.model`` is the model the following
  assistant messages are recorded with (the segment's agent model);
* ``response_item``: a Responses API item (:mod:`expgit.sessions.formats.responses`);
  a user message that is only Codex's injected context (``<environment_context>``,
  ``<user_instructions>``, an AGENTS.md preamble) is a ``system`` message: context, not
  a user turn;
* ``event_msg``: the UI's event stream; what it says (user and agent messages, reasoning,
  token counts) repeats the ``response_item`` rows, so it is skipped and counted
  (``skipped_rows["codex:event_msg"]``), never read twice;
* ``compacted``: a compaction summary (``payload.message``), kept as ``system`` context;
* any other type is skipped and counted (``skipped_rows["codex:<type>"]``), never fatal.
"""

from __future__ import annotations

import re

from expgit.sessions.formats.base import Claim, Row
from expgit.sessions.formats.openai import content_text
from expgit.sessions.formats.responses import ResponsesReader
from expgit.sessions.formats.transcript_builder import TranscriptBuilder

ENVELOPE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
_CONTEXT = re.compile(r"\A\s*(<(environment_context|user_instructions)>.*</\2>\s*)+\Z"
                      r"|\A\s*# AGENTS\.md instructions", re.DOTALL)


class CodexFormat:
    """Reads Codex CLI rollout envelopes; one instance per file."""

    name = "codex"

    def __init__(self) -> None:
        self.reader = ResponsesReader()

    def claims(self, row: Row) -> Claim:
        if "role" in row or not isinstance(row.get("payload"), dict):
            return "no"
        return "yes" if row.get("type") in ENVELOPE_TYPES else "maybe"

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool:
        kind, payload = row.get("type"), row.get("payload")
        if not isinstance(kind, str) or not isinstance(payload, dict):
            return False
        if kind == "response_item":
            return self.reader.add_item(_as_context(payload), line, builder)
        if kind == "turn_context":
            if isinstance(payload.get("model"), str) and payload["model"]:
                builder.model = payload["model"]
        elif kind == "compacted":
            summary = payload.get("message")
            builder.add("system", builder.text(summary if isinstance(summary, str) else ""),
                        line)
        elif kind != "session_meta":
            builder.skipped[f"codex:{kind}"] += 1
        return True


def _as_context(item: Row) -> Row:
    """A user message that is only Codex's injected context, as a system message."""
    if item.get("type") != "message" or item.get("role") != "user":
        return item
    content = item.get("content")
    parts = ([p for p in content if isinstance(p, dict)] if isinstance(content, list)
             else content if isinstance(content, str) else None)
    text = content_text(parts)
    return {**item, "role": "system"} if text and _CONTEXT.match(text) else item


def codex_session_id(row: Row) -> str | None:
    """The session id of a ``session_meta`` row (``payload.id``)."""
    payload = row.get("payload")
    if row.get("type") == "session_meta" and isinstance(payload, dict):
        value = payload.get("id")
        return value if isinstance(value, str) and value else None
    return None
