"""Where agents keep their sessions: the files an ingest reads.

``--from claude-code``: ``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``),
one folder per project, ``<session>.jsonl`` in each. ``--from codex``:
``$CODEX_HOME/sessions`` (default ``~/.codex/sessions``), ``YYYY/MM/DD/rollout-*.jsonl``.
Every ``.jsonl`` below the folder is a candidate (:func:`find_session_files`), or only
those modified since ``--since``.

A Claude Code session ``<project>/<session>.jsonl`` may have sub-agents in files of
their own beside it, ``<project>/<session>/subagents/agent-<agentId>.jsonl``; naming
the session names them too (:func:`with_subagent_files`). ``agent-acompact-*`` files
(Claude Code's own compaction runs, not a task of the session) are left out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

Tool = Literal["claude-code", "codex"]

SUBAGENTS = "subagents"
COMPACTION_AGENT = "agent-acompact-"


def subagent_files(session: Path) -> list[Path]:
    """The sub-agent files beside a Claude Code session file (sorted; none: [])."""
    folder = session.parent / session.stem / SUBAGENTS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("agent-*.jsonl")
                  if p.is_file() and not p.name.startswith(COMPACTION_AGENT))


def with_subagent_files(files: Sequence[Path]) -> list[Path]:
    """``files`` with the sub-agent files beside each, each file once (first place)."""
    seen: set[Path] = set()
    out: list[Path] = []
    for path in files:
        for candidate in (path, *subagent_files(path)):
            resolved = candidate.resolve()
            if resolved not in seen:
                seen.add(resolved)
                out.append(candidate)
    return out


@dataclass(frozen=True)
class ToolFolder:
    """Where a tool keeps its sessions: ``<env var or home default>/<below>``."""

    label: str
    env: str
    home: str
    below: str
    pattern: str


TOOLS: dict[Tool, ToolFolder] = {
    "claude-code": ToolFolder("Claude Code", "CLAUDE_CONFIG_DIR", ".claude", "projects",
                              "*.jsonl"),
    "codex": ToolFolder("Codex", "CODEX_HOME", ".codex", "sessions", "*.jsonl"),
}


def default_folder(tool: Tool, env: Mapping[str, str] | None = None) -> Path:
    """The folder ``tool`` writes its sessions to (its environment variable honoured)."""
    where = TOOLS[tool]
    environ = os.environ if env is None else env
    base = environ.get(where.env)
    root = Path(base).expanduser() if base else Path.home() / where.home
    return root / where.below


def find_session_files(tool: Tool, folder: Path, since: datetime | None = None
                       ) -> list[Path]:
    """The session files below ``folder`` (sorted), modified at or after ``since``.
    A named pipe (or socket, device) of a session file's name is listed too, so that
    the ingest reports it as skipped (it never reads one); folders are not listed."""
    cutoff = since.timestamp() if since is not None else None
    found: list[Path] = []
    for path in folder.rglob(TOOLS[tool].pattern):
        if (path.name.startswith(COMPACTION_AGENT) or not path.exists()
                or path.is_dir()):
            continue
        if cutoff is not None and path.stat().st_mtime < cutoff:
            continue
        found.append(path)
    return sorted(found)
