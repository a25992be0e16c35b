"""``expgit sessions status``: counts of sessions and segments from the manifests (each
manifest's part kept by blob id in the derived-data cache)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, Field

from expgit.sessions.manifest import SessionManifest
from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived import keyed_cache_file, read_cache, write_cache
from expgit.store.repository import ExperienceRepository


class SessionLine(BaseModel):
    session: str  # the session key (a hash)
    agent: str | None
    format: str
    messages: int
    status: str
    status_reason: str | None = None
    segments: int
    labelled: int
    trained: int


class SessionsStatus(BaseModel):
    branch: str
    sessions: int = 0
    by_status: dict[str, int] = Field(default_factory=dict)
    segments: int = 0  # active
    superseded: int = 0
    labelled: int = 0
    memory_eligible: int = 0
    sft_eligible: int = 0
    trained: int = 0
    invalidation_proposals: list[str] = Field(default_factory=list)
    pending: list[SessionLine] = Field(default_factory=list)
    details: list[SessionLine] = Field(default_factory=list)


_CACHE_FORMAT = "session-status-2"
_INTS = ("messages", "segments", "labelled", "trained")
_STRS = ("session", "format", "status")


_LINE_FIELDS = frozenset(SessionLine.model_fields)


@dataclass(frozen=True)
class _Summary:
    """What the status needs of one manifest: a function of its blob, kept by blob id
    in the derived-data cache (:mod:`expgit.store.derived`), so a status of 100,000
    sessions parses only the manifests that changed since the last one."""

    line: SessionLine
    superseded: int
    memory_eligible: int
    sft_eligible: int
    invalidations: list[str]

    def row(self) -> list[object]:
        return [self.line.model_dump(), self.superseded, self.memory_eligible,
                self.sft_eligible, self.invalidations]

    @classmethod
    def from_row(cls, row: object) -> _Summary | None:
        """The summary a cache row holds, None if it is not one (checked field by field:
        cheaper than a model validation, 100,000 times)."""
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[0], dict)
                and all(isinstance(n, int) for n in row[1:4]) and isinstance(row[4], list)):
            return None
        line = row[0]
        if (line.keys() != _LINE_FIELDS
                or not all(isinstance(line[k], int) for k in _INTS)
                or not all(isinstance(line[k], str) for k in _STRS)
                or not all(line[k] is None or isinstance(line[k], str)
                           for k in ("agent", "status_reason"))
                or not all(isinstance(i, str) for i in row[4])):
            return None
        return cls(SessionLine.model_construct(**line), row[1], row[2], row[3], row[4])


def _summary(manifest: SessionManifest) -> _Summary:
    active = manifest.active()
    line = SessionLine(
        session=manifest.session_key, agent=manifest.agent, format=manifest.format,
        messages=manifest.message_count, status=manifest.status,
        status_reason=manifest.status_reason, segments=len(active),
        labelled=sum(1 for s in active if s.labelled),
        trained=sum(1 for s in active if s.trained))
    return _Summary(
        line=line, superseded=sum(1 for s in manifest.segments if s.status == "superseded"),
        memory_eligible=sum(1 for s in active if s.memory_eligible),
        sft_eligible=sum(1 for s in active if s.sft_eligible),
        invalidations=[s.invalidation.proposal_id for s in manifest.segments
                       if s.invalidation is not None and s.invalidation.proposal_id])


def _summaries(repo: ExperienceRepository, store: SessionStore) -> list[_Summary]:
    """The summary of every manifest at the tip, by session key."""
    entries = store.branch.fanned_entries(MANIFESTS, suffix=".json")
    cache = keyed_cache_file(repo.git.common_dir, "session-status-", store.branch.ref)
    stored = read_cache(cache, _CACHE_FORMAT) or {}
    known: dict[str, _Summary] = {}
    for entry in entries:
        summary = _Summary.from_row(stored.get(entry.sha))
        if summary is not None:
            known[entry.sha] = summary
    missing = [e for e in entries if e.sha not in known]
    blobs = repo.git.read_blobs(e.sha for e in missing)
    for entry in missing:
        known[entry.sha] = _summary(store.parse(entry.name, blobs[entry.sha]))
    if missing or len(stored) != len(known):
        write_cache(cache, _CACHE_FORMAT, {sha: s.row() for sha, s in known.items()})
    return [known[e.sha] for e in entries]


def sessions_status(repo: ExperienceRepository) -> SessionsStatus:
    store = SessionStore(repo)
    summaries = _summaries(repo, store)
    lines = [s.line for s in summaries]
    by_status = Counter(line.status for line in lines)
    return SessionsStatus.model_construct(
        branch=store.branch.branch, sessions=len(lines),
        by_status=dict(sorted(by_status.items())),
        segments=sum(line.segments for line in lines),
        superseded=sum(s.superseded for s in summaries),
        labelled=sum(line.labelled for line in lines),
        memory_eligible=sum(s.memory_eligible for s in summaries),
        sft_eligible=sum(s.sft_eligible for s in summaries),
        trained=sum(line.trained for line in lines),
        invalidation_proposals=list(dict.fromkeys(
            i for s in summaries for i in s.invalidations)),
        pending=[line for line in lines if line.status == "pending"], details=lines)
