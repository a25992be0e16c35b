"""``expgit sessions status``: counts of sessions and segments from the manifests (each
manifest's part kept by blob id in the derived-data cache)."""

from __future__ import annotations

import contextlib
from collections import Counter

from pydantic import BaseModel, Field, ValidationError

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


_CACHE_FORMAT = "session-status-1"


class _Summary(BaseModel):
    """What the status needs of one manifest: a function of its blob, kept by blob id
    in the derived-data cache (:mod:`expgit.store.derived`), so a status of 100,000
    sessions parses only the manifests that changed since the last one."""

    line: SessionLine
    superseded: int
    memory_eligible: int
    sft_eligible: int
    invalidations: list[str]


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
        raw = stored.get(entry.sha)
        if raw is not None:
            with contextlib.suppress(ValidationError):
                known[entry.sha] = _Summary.model_validate(raw)
    missing = [e for e in entries if e.sha not in known]
    blobs = repo.git.read_blobs(e.sha for e in missing)
    for entry in missing:
        known[entry.sha] = _summary(store.parse(entry.name, blobs[entry.sha]))
    if missing or len(stored) != len(known):
        write_cache(cache, _CACHE_FORMAT, {sha: s.model_dump() for sha, s in known.items()})
    return [known[e.sha] for e in entries]


def sessions_status(repo: ExperienceRepository) -> SessionsStatus:
    store = SessionStore(repo)
    status = SessionsStatus(branch=store.branch.branch)
    by_status: Counter[str] = Counter()
    for summary in _summaries(repo, store):
        line = summary.line
        status.details.append(line)
        if line.status == "pending":
            status.pending.append(line)
        by_status[line.status] += 1
        status.sessions += 1
        status.segments += line.segments
        status.superseded += summary.superseded
        status.labelled += line.labelled
        status.memory_eligible += summary.memory_eligible
        status.sft_eligible += summary.sft_eligible
        status.trained += line.trained
        status.invalidation_proposals += summary.invalidations
    status.by_status = dict(sorted(by_status.items()))
    status.invalidation_proposals = list(dict.fromkeys(status.invalidation_proposals))
    return status
