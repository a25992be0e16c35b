"""Where agents keep their sessions: the files an ingest reads.

A Claude Code session ``<project>/<session>.jsonl`` may have sub-agents in files of
their own beside it, ``<project>/<session>/subagents/agent-<agentId>.jsonl``; naming
the session names them too (:func:`with_subagent_files`). ``agent-acompact-*`` files
(Claude Code's own compaction runs, not a task of the session) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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
