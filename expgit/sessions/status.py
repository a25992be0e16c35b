"""``expgit sessions status``: counts of sessions and segments from the manifests."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from expgit.sessions.store import SessionStore
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


def sessions_status(repo: ExperienceRepository) -> SessionsStatus:
    store = SessionStore(repo)
    status = SessionsStatus(branch=store.branch.branch)
    by_status: Counter[str] = Counter()
    for manifest in store.manifests():
        active = manifest.active()
        line = SessionLine(
            session=manifest.session_key, agent=manifest.agent, format=manifest.format,
            messages=manifest.message_count, status=manifest.status,
            status_reason=manifest.status_reason, segments=len(active),
            labelled=sum(1 for s in active if s.labelled),
            trained=sum(1 for s in active if s.trained))
        status.details.append(line)
        if manifest.status == "pending":
            status.pending.append(line)
        by_status[manifest.status] += 1
        status.sessions += 1
        status.segments += len(active)
        status.superseded += sum(1 for s in manifest.segments if s.status == "superseded")
        status.labelled += line.labelled
        status.memory_eligible += sum(1 for s in active if s.memory_eligible)
        status.sft_eligible += sum(1 for s in active if s.sft_eligible)
        status.trained += line.trained
        status.invalidation_proposals += [
            s.invalidation.proposal_id for s in manifest.segments
            if s.invalidation is not None and s.invalidation.proposal_id]
    status.by_status = dict(sorted(by_status.items()))
    status.invalidation_proposals = list(dict.fromkeys(status.invalidation_proposals))
    return status
