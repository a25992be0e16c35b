"""What ``expgit sessions ingest`` reports, and the sessions one file holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from expgit.sessions.fingerprint import hash_id
from expgit.sessions.formats.parse import ParsedSession, SessionFormat, parse_session_file

FileOutcome = Literal["new", "unchanged", "changed", "empty", "incomplete", "unrecognized",
                      "not_regular"]


class SegmentOutcome(BaseModel):
    """What segmenting one session did."""

    segments: int = 0  # active segments afterwards
    added: list[str] = Field(default_factory=list)  # fingerprints
    kept: int = 0
    superseded: list[str] = Field(default_factory=list)
    invalidation_proposals: list[str] = Field(default_factory=list)
    llm_prompts: int = 0
    pending_reason: str | None = None


class FileReport(BaseModel):
    file: str  # as given on the command line (never stored)
    session: str  # the session key (a hash)
    parent_session: str | None = None  # a sub-agent's session: its parent's key
    format: str
    # empty (no message), incomplete (still being written, found by --from),
    # unrecognized (no row of a known format, found by --from) and not_regular (a named
    # pipe, socket or device: never read): skipped, not stored
    outcome: FileOutcome
    messages: int
    lines: int
    blank_lines: int
    invalid_lines: list[int] = Field(default_factory=list)
    skipped_metadata: int = 0
    redactions: dict[str, int] = Field(default_factory=dict)
    status: str
    status_reason: str | None = None
    segmentation: SegmentOutcome | None = None
    truncated_line: int | None = None  # a last line still being written: not read
    # skill loads the session shows; those naming no skill on main (or none at all)
    skill_loads: int = 0
    unknown_skill_loads: int = 0
    failed_skill_loads: int = 0  # Skill calls whose result was an error: nothing loaded


class IngestReport(BaseModel):
    files: list[FileReport] = Field(default_factory=list)
    commit: str | None = None  # on the sessions branch; None: nothing changed
    branch: str
    redactions: dict[str, int] = Field(default_factory=dict)
    invalid_lines: int = 0
    empty: list[str] = Field(default_factory=list)  # files with no message: never stored
    invalidation_proposals: list[str] = Field(default_factory=list)
    # files found with --from: left for the next ingest (a last line still being
    # written), of no known format (never stored), and not read (size and modification
    # time as the last ingest recorded them)
    incomplete: list[str] = Field(default_factory=list)
    unrecognized: list[str] = Field(default_factory=list)
    not_read: int = 0
    skill_loads: int = 0  # of the files read (docs/skill-usage.md)
    unknown_skill_loads: int = 0  # of those, naming no skill on main, or no name at all
    failed_skill_loads: int = 0  # of those, calls whose result was an error
    source: str | None = None  # --from
    folder: str | None = None  # the folder searched
    notes: list[str] = Field(default_factory=list)


def session_key(path: Path, session_id: str | None, agent_id: str | None = None) -> str:
    """A session's key: the hash of its session id, else of its file's absolute path;
    a sub-agent's: of that and its agent id."""
    base = f"session:{session_id}" if session_id else str(path.resolve())
    return hash_id(f"{base}/agent:{agent_id}" if agent_id is not None else base)


@dataclass
class SessionUnit:
    """One session a file holds: the file's own, or one of its sub-agents'."""

    path: Path
    parsed: ParsedSession
    key: str
    parent: str | None = None  # a sub-agent's: its parent session's key
    subagents: dict[str, str] = field(default_factory=dict)  # Task call id -> key
    stat: tuple[int, int] | None = None  # the file's (size, mtime_ns) before it was read


@dataclass
class SourceFile:
    """A session file as read: parsed, and its (size, mtime_ns) taken before reading
    (so a write during the read makes the next ingest read it again)."""

    path: Path
    parsed: ParsedSession
    stat: tuple[int, int] | None


def read_source(path: Path, session_format: SessionFormat) -> SourceFile:
    """Stat, then parse, one session file (NotFoundError / InvalidInputError)."""
    try:
        info = path.stat()
        stat: tuple[int, int] | None = (info.st_size, info.st_mtime_ns)
    except OSError:
        stat = None  # parse_session_file says why
    return SourceFile(path, parse_session_file(path, session_format), stat)


def left_out(source: SourceFile, discovered: bool) -> FileReport | None:
    """The report of a file that is not ingested: found by ``--from`` (``discovered``) and
    still being written, or of no known format. None: ingest it."""
    parsed = source.parsed
    if not discovered or (parsed.truncated_line is None and parsed.unrecognized is None):
        return None
    if parsed.unrecognized is not None:
        outcome: FileOutcome = "unrecognized"
        reason = f"no known session format: {parsed.unrecognized}; nothing stored"
    else:
        outcome = "incomplete"
        reason = (f"line {parsed.truncated_line} is still being written: left for the "
                  "next ingest")
    return FileReport(
        file=str(source.path), session="", format=parsed.format, outcome=outcome,
        messages=0, lines=parsed.line_count, blank_lines=parsed.blank_lines,
        invalid_lines=parsed.invalid_lines, status="skipped", status_reason=reason,
        truncated_line=parsed.truncated_line)


def not_regular(path: Path, kind: str) -> FileReport:
    """The report of a path that is not a regular file (``kind``: "a named pipe"),
    skipped without reading it."""
    return FileReport(file=str(path), session="", format="", outcome="not_regular",
                      messages=0, lines=0, blank_lines=0, status="skipped",
                      status_reason=f"{kind}, not a regular file: skipped, not read")


def session_units(path: Path, parsed: ParsedSession) -> list[SessionUnit]:
    """The sessions of a parsed file: its own (unless it only holds sub-agents, as a
    ``subagents/agent-*.jsonl`` file does) and each sub-agent's."""
    key = session_key(path, parsed.session_id)
    subs = [SessionUnit(path, sub, session_key(path, sub.session_id, sub.agent_id),
                        parent=key) for sub in parsed.subagents]
    links = {tool: session_key(path, parsed.session_id, agent)
             for tool, agent in parsed.task_agents.items()}
    links.update({u.parsed.parent_tool_id: u.key for u in subs if u.parsed.parent_tool_id})
    own = [] if subs and not parsed.messages else [
        SessionUnit(path, parsed, key, subagents=dict(sorted(links.items())))]
    return own + subs
