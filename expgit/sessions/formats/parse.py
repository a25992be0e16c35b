"""Parsing ``.jsonl`` agent sessions into the normalised messages of
docs/design.md ("Cases and rollouts"); the row shapes read (one module each, behind
:data:`FORMATS`) and what is kept, skipped and counted are in docs/sessions.md.

``auto`` picks the format per file: the first row only one format claims decides; a
file of plain ``{"role", "content"}`` rows (which both OpenAI and Anthropic write) is
read as ``openai``, which gives the same messages. Not said there:

* a tool call's ToolPart is ``pending`` until its result is seen, then ``completed`` or
  ``error``; a result whose call is unknown is a ``tool`` message;
* reasoning is dropped because it is the model's scratchpad, not something the
  conversation showed or that chat fine-tuning trains on; some providers only return
  it redacted or signed, and leaving it out keeps fingerprints independent of it;
* images, audio and files become placeholders such as ``[image omitted]``;
  ``message_models[i]``: the model that wrote ``messages[i]``; rows that give no part
  add no message (``skipped_rows["empty"]``); ``invalid_lines`` are 1-based;
* feedback rows (``_type: feedback``, :mod:`expgit.sessions.formats.feedback`) are never
  messages: they become the session's ``signals``; a malformed one IS fatal
  (InvalidInputError naming its line).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.core.domain import Message
from expgit.core.jsonl import loads_untrusted
from expgit.core.redaction.text import redact_text
from expgit.errors import InvalidInputError, NotFoundError
from expgit.outcomes.signals import SessionSignals
from expgit.sessions.formats.anthropic import AnthropicFormat
from expgit.sessions.formats.base import Row, RowFormat
from expgit.sessions.formats.claude_code import (
    ClaudeCodeFormat,
    session_id_of,
    split_sidechains,
    task_agents,
)
from expgit.sessions.formats.codex import CodexFormat, codex_session_id
from expgit.sessions.formats.feedback import is_feedback_row, session_signals_of
from expgit.sessions.formats.openai import OpenAIFormat
from expgit.sessions.formats.responses import ResponsesFormat
from expgit.sessions.formats.skill_loads import SkillLoad, message_times, skill_loads, time_span
from expgit.sessions.formats.transcript_builder import TranscriptBuilder
from expgit.store.format.files import read_regular_file

SessionFormat = Literal["auto", "openai", "anthropic", "claude_code", "responses", "codex"]
DetectedFormat = Literal["openai", "anthropic", "claude_code", "responses", "codex"]

# one reader per file (a reader may keep state across the rows of its file)
FORMATS: dict[DetectedFormat, Callable[[], RowFormat]] = {
    "claude_code": ClaudeCodeFormat,
    "codex": CodexFormat,
    "responses": ResponsesFormat,
    "anthropic": AnthropicFormat,
    "openai": OpenAIFormat,
}
FORMAT_NAMES: tuple[str, ...] = ("auto", *FORMATS)
EXCERPT_CHARS = 80  # of an offending line, in an error


class ParsedSession(BaseModel):
    """One session file, parsed. ``message_lines[i]``: the 1-based source line at which
    ``messages[i]`` starts."""

    model_config = ConfigDict(extra="forbid")

    format: DetectedFormat
    messages: list[Message] = Field(default_factory=list)
    message_lines: list[int] = Field(default_factory=list)
    session_id: str | None = None
    line_count: int = 0
    blank_lines: int = 0
    invalid_lines: list[int] = Field(default_factory=list)
    skipped_metadata: int = 0
    skipped_rows: dict[str, int] = Field(default_factory=dict)
    reasoning_dropped: int = 0
    signals: SessionSignals | None = None  # only for a file with feedback rows
    message_models: list[str | None] = Field(default_factory=list)
    unrecognized: str | None = None  # no row of a known shape: "line N: <excerpt>"
    truncated_line: int | None = None  # a last line still being written: left out
    # Claude Code sub-agents: each sub-agent's conversation in the file, a session of
    # its own (``agent_id``; ``parent_tool_id``: the parent's Task call, when the file
    # holds it); ``task_agents``: the sub-agent each Task call of this session started
    subagents: list[ParsedSession] = Field(default_factory=list)
    agent_id: str | None = None
    parent_tool_id: str | None = None
    task_agents: dict[str, str] = Field(default_factory=dict)
    # the skills the agent loaded (:mod:`expgit.sessions.formats.skill_loads`), and the times of
    # the first and last message (their rows' ``timestamp``; None: the log has none)
    skill_loads: list[SkillLoad] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def timed(self, rows: list[tuple[int, Row]]) -> ParsedSession:
        """This session with its skill loads and time span, read from its ``rows``."""
        times = message_times(self.message_lines, rows)
        self.skill_loads = skill_loads(self.messages, times)
        self.started_at, self.ended_at = time_span(times)
        return self


def detect_format(rows: Iterable[Row]) -> DetectedFormat:
    """The format of a file's rows: the first row exactly one format claims with
    ``yes`` decides; ``openai`` when none does."""
    readers = {name: make() for name, make in FORMATS.items()}
    for row in rows:
        sure = [name for name, fmt in readers.items() if fmt.claims(row) == "yes"]
        if len(sure) == 1:
            return sure[0]
    return "openai"


def _decode(raw: str | bytes) -> str | None:
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return raw


def parse_session_lines(lines: Iterable[str | bytes],
                        session_format: SessionFormat = "auto") -> ParsedSession:
    """Parse the lines of one session (bad lines are reported, never raised; a
    malformed feedback row is an InvalidInputError)."""
    if session_format != "auto" and session_format not in FORMATS:
        raise InvalidInputError(f"unknown session format {session_format!r}",
                                hint="use one of " + ", ".join(FORMAT_NAMES))
    rows: list[tuple[int, Row]] = []
    texts: dict[int, str] = {}  # of the lines that are not rows: the first is quoted
    feedback: list[tuple[int, Row]] = []
    line_count = blank = metadata = 0
    invalid: list[int] = []
    session_id: str | None = None
    for number, raw in enumerate(lines, start=1):
        line_count = number
        text = _decode(raw)
        if text is not None and not text.strip():
            blank += 1
            continue
        try:
            row = loads_untrusted(text) if text is not None else None
        except ValueError:
            row = None
        if not isinstance(row, dict):
            invalid.append(number)
            texts.setdefault(number, text if text is not None else "(not UTF-8)")
            continue
        if is_feedback_row(row):  # its session_id (a /feedback event's) is not the key
            feedback.append((number, row))
            continue
        session_id = session_id or session_id_of(row) or codex_session_id(row)
        if row.get("_type") == "metadata":
            metadata += 1
            continue
        rows.append((number, row))
    name: DetectedFormat = (detect_format(r for _, r in rows) if session_format == "auto"
                            else session_format)
    fmt = FORMATS[name]()
    builder = TranscriptBuilder()
    read = 0
    for number, row in rows:
        if fmt.add_row(row, number, builder):
            read += 1
        else:
            invalid.append(number)
            texts.setdefault(number, json.dumps(row, ensure_ascii=False))
    messages, starts = builder.messages()
    signals = session_signals_of(messages, starts, rows, feedback)
    unrecognized = None
    if invalid and not (read or metadata or feedback):
        first = min(invalid)
        unrecognized = f"line {first}: {_excerpt(texts[first])}"
    parsed = ParsedSession(
        format=name, messages=messages, message_lines=starts, session_id=session_id,
        line_count=line_count, blank_lines=blank, invalid_lines=sorted(invalid),
        skipped_metadata=metadata, skipped_rows=dict(sorted(builder.skipped.items())),
        reasoning_dropped=builder.reasoning_dropped + builder.unkept_reasoning(),
        signals=signals, message_models=builder.models(), unrecognized=unrecognized
    ).timed(rows)
    if name == "claude_code":
        _add_subagents(parsed, rows)
    return parsed


def _add_subagents(parsed: ParsedSession, rows: list[tuple[int, Row]]) -> None:
    """``parsed``'s sub-agent sessions (its sidechain rows) and Task links."""
    main, groups = split_sidechains(rows)
    agents, prompts = task_agents(main)
    parsed.task_agents = agents
    by_agent = {agent: tool for tool, agent in agents.items()}
    by_prompt = {prompt.strip(): tool for tool, prompt in prompts.items() if prompt.strip()}
    for agent, group in groups.items():
        reader, builder = ClaudeCodeFormat(sidechain=True), TranscriptBuilder()
        for number, row in group:
            reader.add_row(row, number, builder)
        messages, starts = builder.messages()
        if not messages:
            continue
        first_user = next((m.plain_text.strip() for m in messages if m.role == "user"), "")
        parsed.subagents.append(ParsedSession(
            format="claude_code", messages=messages, message_lines=starts,
            session_id=parsed.session_id, line_count=len(group),
            skipped_rows=dict(sorted(builder.skipped.items())),
            reasoning_dropped=builder.reasoning_dropped + builder.unkept_reasoning(),
            message_models=builder.models(), agent_id=agent,
            parent_tool_id=by_agent.get(agent) or by_prompt.get(first_user)).timed(group))


def _excerpt(text: str) -> str:
    """An offending line as an error quotes it: redacted, one line, clipped."""
    redacted, _ = redact_text(" ".join(text.split()))
    return redacted if len(redacted) <= EXCERPT_CHARS else redacted[:EXCERPT_CHARS] + "…"


def _split_truncated(data: bytes) -> tuple[list[bytes], int | None]:
    """The lines of ``data``, without a last line that is still being written (no
    newline after it, and not a JSON object), and that line's number (None: none)."""
    lines = data.splitlines()
    if not lines or data.endswith((b"\n", b"\r")):
        return lines, None
    try:
        complete = isinstance(loads_untrusted(lines[-1]), dict)
    except ValueError:
        complete = False
    return (lines, None) if complete else (lines[:-1], len(lines))


def parse_session_file(path: Path, session_format: SessionFormat = "auto") -> ParsedSession:
    """Parse one ``.jsonl`` session file (see the module docstring)."""
    try:
        data = read_regular_file(path)
    except FileNotFoundError:
        raise NotFoundError(f"session file {path} does not exist") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read session file {path}: {exc.strerror}") from None
    lines, truncated = _split_truncated(data)
    try:
        parsed = parse_session_lines(lines, session_format)
    except InvalidInputError as exc:
        raise InvalidInputError(f"session file {path}: {exc.message}", hint=exc.hint) from None
    if truncated is not None:
        parsed.truncated_line = truncated
        parsed.line_count = truncated
    return parsed
