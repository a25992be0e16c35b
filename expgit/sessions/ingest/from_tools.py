"""``expgit sessions ingest --from claude-code|codex``: the sessions a tool wrote, found
where it keeps them (:mod:`expgit.sessions.ingest.discovery`), ingested incrementally.

Only files changed since the last ingest are read: each manifest records its source
file's size and modification time (hashed path, on the sessions branch: git is the
record, no side file), and a file found with both unchanged is not opened. A changed
one is read, and its messages' fingerprint decides whether anything changed. A file
still being written (its last line incomplete) is left for the next ingest; one of no
known format is reported and never stored. A missing folder is a note, not an error.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

from expgit.llm.structured import StructuredLLM
from expgit.sessions.fingerprint import hash_id
from expgit.sessions.formats.parse import SessionFormat
from expgit.sessions.ingest.command import ingest, manifest_stat
from expgit.sessions.ingest.discovery import TOOLS, Tool, default_folder, find_session_files
from expgit.sessions.ingest.report import IngestReport
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository


def recorded_stats(store: SessionStore) -> dict[str, set[tuple[int, int] | None]]:
    """By source hash: the (size, mtime_ns) its sessions' manifests recorded."""
    stats: dict[str, set[tuple[int, int] | None]] = {}
    for manifest in store.manifests():
        stats.setdefault(manifest.source_hash, set()).add(manifest_stat(manifest))
    return stats


def changed_files(files: list[Path], stats: dict[str, set[tuple[int, int] | None]]
                  ) -> list[Path]:
    """The files whose size or modification time differ from what was recorded."""
    changed: list[Path] = []
    for path in files:
        info = path.stat()
        if stats.get(hash_id(str(path.resolve()))) != {(info.st_size, info.st_mtime_ns)}:
            changed.append(path)
    return changed


async def ingest_from(repo: ExperienceRepository, tool: Tool, *, path: Path | None = None,
                      since: datetime | None = None, agent: str | None = None,
                      llm: StructuredLLM | None = None,
                      session_format: SessionFormat = "auto") -> IngestReport:
    """Ingest the sessions ``tool`` wrote (below ``path``, else its default folder)
    that changed since the last ingest (and were modified at or after ``since``)."""
    explicit = path is not None
    folder = path if path is not None else default_folder(tool)
    label = TOOLS[tool].label
    if not folder.is_dir():
        store = SessionStore(repo)
        why = "does not exist" if not folder.exists() else "is not a folder"
        hint = "" if explicit else " (--path names another folder)"
        return IngestReport(branch=store.branch.branch, source=tool, folder=str(folder),
                            notes=[f"no {label} sessions: {folder} {why}{hint}"])
    files = await asyncio.to_thread(find_session_files, tool, folder, since)
    stats = await asyncio.to_thread(recorded_stats, SessionStore(repo))
    changed = await asyncio.to_thread(changed_files, files, stats)
    report = await ingest(repo, changed, agent=agent, llm=llm,
                          session_format=session_format, discovered=True)
    report.source, report.folder = tool, str(folder)
    report.not_read = len(files) - len(changed)
    if not files:
        report.notes.append(f"no {label} session files in {folder}"
                            + (f" modified since {since.isoformat()}" if since else ""))
    return report
