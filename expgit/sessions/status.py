"""``expgit sessions status``: counts of sessions and segments from the manifests (each
manifest's part kept by blob id in the derived-data cache, the whole status by the
manifests folder's tree id).

``details`` holds the first :data:`DETAILS_LIMIT` sessions by key (``details_truncated``
says when there are more); ``all_details`` (``--all``) lists every one, which at 100,000
sessions is a 24 MB answer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

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
    details_truncated: bool = False  # more sessions than details (see ``all_details``)


DETAILS_LIMIT = 100  # sessions listed in ``details`` unless all are asked for
_TOTALS_FORMAT = "session-totals-1"


_CACHE_FORMAT = "session-status-2"


_LINE_FIELDS = frozenset(SessionLine.model_fields)


@dataclass(frozen=True)
class _Summary:
    """What the status needs of one manifest: a function of its blob, kept by blob id
    in the derived-data cache (:mod:`expgit.store.derived`), so a status of 100,000
    sessions parses only the manifests that changed since the last one."""

    line: dict[str, Any]  # the fields of its SessionLine, checked (made one only if shown)
    superseded: int
    memory_eligible: int
    sft_eligible: int
    invalidations: list[str]

    def row(self) -> list[object]:
        return [self.line, self.superseded, self.memory_eligible,
                self.sft_eligible, self.invalidations]

    @classmethod
    def from_row(cls, row: object) -> _Summary | None:
        """The summary a cache row holds, None if it is not one (checked field by field:
        cheaper than a model validation, 100,000 times)."""
        # plain type tests, no generator: 100,000 rows a status (bool is not an int here)
        if not (type(row) is list and len(row) == 5 and type(row[0]) is dict
                and type(row[1]) is int and type(row[2]) is int and type(row[3]) is int
                and type(row[4]) is list):
            return None
        line, invalidations = row[0], row[4]
        if not (line.keys() == _LINE_FIELDS
                and type(line["messages"]) is int and type(line["segments"]) is int
                and type(line["labelled"]) is int and type(line["trained"]) is int
                and type(line["session"]) is str and type(line["format"]) is str
                and type(line["status"]) is str
                and (line["agent"] is None or type(line["agent"]) is str)
                and (line["status_reason"] is None or type(line["status_reason"]) is str)
                and (not invalidations or all(type(i) is str for i in invalidations))):
            return None
        return cls(line, row[1], row[2], row[3], row[4])


def _summary(manifest: SessionManifest) -> _Summary:
    active = manifest.active()
    line = SessionLine(
        session=manifest.session_key, agent=manifest.agent, format=manifest.format,
        messages=manifest.message_count, status=manifest.status,
        status_reason=manifest.status_reason, segments=len(active),
        labelled=sum(1 for s in active if s.labelled),
        trained=sum(1 for s in active if s.trained)).model_dump()
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


def _line(fields: dict[str, Any]) -> SessionLine:
    return SessionLine.model_construct(**fields)


def _compute(repo: ExperienceRepository, store: SessionStore, *, all_details: bool
             ) -> SessionsStatus:
    summaries = _summaries(repo, store)
    lines = [s.line for s in summaries]
    by_status = Counter(line["status"] for line in lines)
    shown = lines if all_details else lines[:DETAILS_LIMIT]
    return SessionsStatus.model_construct(
        branch=store.branch.branch, sessions=len(lines),
        by_status=dict(sorted(by_status.items())),
        segments=sum(line["segments"] for line in lines),
        superseded=sum(s.superseded for s in summaries),
        labelled=sum(line["labelled"] for line in lines),
        memory_eligible=sum(s.memory_eligible for s in summaries),
        sft_eligible=sum(s.sft_eligible for s in summaries),
        trained=sum(line["trained"] for line in lines),
        invalidation_proposals=list(dict.fromkeys(
            i for s in summaries for i in s.invalidations)),
        pending=[_line(line) for line in lines if line["status"] == "pending"],
        details=[_line(line) for line in shown], details_truncated=len(shown) < len(lines))


def _folder_tree(repo: ExperienceRepository, store: SessionStore) -> str | None:
    """The manifests folder's tree id at the branch tip: the whole status is a function
    of it (None: no sessions yet)."""
    tree = store.branch.tree()
    entry = repo.git.path_entry(tree, MANIFESTS) if tree is not None else None
    return entry.sha if entry is not None and entry.is_tree else None


def sessions_status(repo: ExperienceRepository, *, all_details: bool = False
                    ) -> SessionsStatus:
    """The counts, pending sessions and (the first :data:`DETAILS_LIMIT`, or with
    ``all_details`` every) session's line. Unless every line is asked for, a status of
    a manifests folder seen before (same tree id) is read from the derived-data cache
    whole: no manifest, no per-session row."""
    store = SessionStore(repo)
    tree = None if all_details else _folder_tree(repo, store)
    cache = keyed_cache_file(repo.git.common_dir, "session-totals-", store.branch.ref)
    if tree is not None:
        stored = read_cache(cache, _TOTALS_FORMAT)
        if stored is not None and stored.get("tree") == tree:
            try:
                return SessionsStatus.model_validate(stored.get("status"))
            except ValueError:
                pass  # another shape: computed again
    status = _compute(repo, store, all_details=all_details)
    if tree is not None:
        write_cache(cache, _TOTALS_FORMAT, {"tree": tree,
                                            "status": status.model_dump(mode="json")})
    return status
