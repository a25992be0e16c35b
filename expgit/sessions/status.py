"""``expgit sessions status``: counts of sessions and segments from the manifests (each
manifest's part kept by blob id in the derived-data cache; the whole status, as a
:class:`~expgit.sessions.status_ledger.Ledger`, by the manifests folder's tree id, and
moved forward from the manifests a change touched).

``details`` holds the first :data:`DETAILS_LIMIT` sessions by key (``details_truncated``
says when there are more); ``all_details`` (``--all``) lists every one, which at 100,000
sessions is a 24 MB answer."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from expgit.errors import ConflictError, GitError
from expgit.sessions import status_checkpoint
from expgit.sessions.manifest import SessionManifest
from expgit.sessions.status_ledger import (
    Ledger,
    SessionLine,
    SessionsStatus,
    Summary,
    Usage,
    advance,
)
from expgit.sessions.store import KIND_TRAILER, MANIFESTS, SessionStore
from expgit.store.derived import keyed_cache_file, read_cache, write_cache
from expgit.store.repository import ExperienceRepository

__all__ = ["DETAILS_LIMIT", "SessionLine", "SessionsStatus", "Usage", "refresh_checkpoint",
           "sessions_ledger", "sessions_status", "sessions_usage"]

DETAILS_LIMIT = 100  # sessions listed in ``details`` unless all are asked for
_TOTALS_FORMAT = "session-totals-3"
_CACHE_FORMAT = "session-status-3"
# past this many changed manifests a status is counted whole (and the per-manifest
# rows brought up to date) rather than moved forward one change at a time
_ADVANCE_LIMIT = 5000


def _summary(manifest: SessionManifest) -> Summary:
    active = manifest.active()
    line = SessionLine(
        session=manifest.session_key, agent=manifest.agent, format=manifest.format,
        messages=manifest.message_count, status=manifest.status,
        status_reason=manifest.status_reason, segments=len(active),
        labelled=sum(1 for s in active if s.labelled),
        trained=sum(1 for s in active if s.trained)).model_dump()
    return Summary(
        line=line, superseded=sum(1 for s in manifest.segments if s.status == "superseded"),
        memory_eligible=sum(1 for s in active if s.memory_eligible),
        sft_eligible=sum(1 for s in active if s.sft_eligible),
        invalidations=[s.invalidation.proposal_id for s in manifest.segments
                       if s.invalidation is not None and s.invalidation.proposal_id],
        loads=[[load.loaded, load.at.isoformat() if load.at is not None else ""]
               for load in manifest.skill_loads if load.loaded is not None],
        started=_day(manifest.started_at), ended=_day(manifest.ended_at))


def _day(at: datetime | None) -> str | None:
    return at.date().isoformat() if at is not None else None


def _named_summaries(repo: ExperienceRepository, store: SessionStore
                     ) -> list[tuple[str, Summary]]:
    """``(file name, summary)`` of every manifest at the tip, by name."""
    entries = store.branch.fanned_entries(MANIFESTS, suffix=".json")
    cache = keyed_cache_file(repo.git.common_dir, "session-status-", store.branch.ref)
    stored = read_cache(cache, _CACHE_FORMAT) or {}
    known: dict[str, Summary] = {}
    for entry in entries:
        summary = Summary.from_row(stored.get(entry.sha))
        if summary is not None:
            known[entry.sha] = summary
    missing = [e for e in entries if e.sha not in known]
    blobs = repo.git.read_blobs(e.sha for e in missing)
    for entry in missing:
        known[entry.sha] = _summary(store.parse(entry.name, blobs[entry.sha]))
    if missing or len(stored) != len(known):
        write_cache(cache, _CACHE_FORMAT, {sha: s.row() for sha, s in known.items()})
    return [(e.name, known[e.sha]) for e in entries]


def _line(fields: dict[str, Any]) -> SessionLine:
    return SessionLine.model_construct(**fields)


def _compute(repo: ExperienceRepository, store: SessionStore, tree: str | None, *,
             all_details: bool) -> Ledger:
    named = _named_summaries(repo, store)
    summaries = [s for _, s in named]
    lines = [s.line for s in summaries]
    by_status = Counter(line["status"] for line in lines)
    shown = named if all_details else named[:DETAILS_LIMIT]
    pending = [(name, s.line) for name, s in named if s.line["status"] == "pending"]
    status = SessionsStatus.model_construct(
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
        pending=[_line(line) for _, line in pending],
        details=[_line(s.line) for _, s in shown], details_truncated=len(shown) < len(lines))
    return Ledger.model_construct(tree=tree or "", status=status,
                                  detail_names=[name for name, _ in shown],
                                  pending_names=[name for name, _ in pending],
                                  usage=Usage.of(summaries))


def _advance(repo: ExperienceRepository, store: SessionStore, kept: Ledger, tree: str
             ) -> Ledger | None:
    """The ledger of the manifests folder ``tree``, from the ``kept`` one of an earlier
    folder and the manifests that differ between the two (a tree diff of the changed
    fan subtrees: what changed is read, the rest never is); None when it cannot be
    (the old tree is gone, a change too large to be worth it, or one that touches an
    invalidation, whose order only a full count keeps)."""
    try:
        changes = store.branch.fanned_changes(kept.tree, tree, suffix=".json")
    except GitError:
        return None
    if len(changes) > _ADVANCE_LIMIT:
        return None
    blobs = repo.git.read_blobs(sha for _, *shas in changes for sha in shas if sha)

    def summary(name: str, sha: str | None) -> Summary | None:
        return None if sha is None else _summary(store.parse(name, blobs[sha]))

    steps = [(name, summary(name, old), summary(name, new)) for name, old, new in changes]
    if any(s is not None and s.invalidations for _, *sides in steps for s in sides):
        return None
    return advance(kept, steps, tree, limit=DETAILS_LIMIT)


def _folder_tree(repo: ExperienceRepository, store: SessionStore, tip: str | None = None
                 ) -> str | None:
    """The manifests folder's tree id at the branch tip (or ``tip``): the whole status is
    a function of it (None: no sessions yet)."""
    tree = store.branch.tree(tip)
    entry = repo.git.path_entry(tree, MANIFESTS) if tree is not None else None
    return entry.sha if entry is not None and entry.is_tree else None


def _listed(ledger: Ledger | None) -> Ledger | None:
    """``ledger`` if it lists as many sessions as this expgit does (:data:`DETAILS_LIMIT`:
    another version's checkpoint may list more or fewer), else None."""
    if ledger is None or len(ledger.status.details) != min(DETAILS_LIMIT,
                                                          ledger.status.sessions):
        return None
    return ledger


def _current(repo: ExperienceRepository, store: SessionStore, tree: str) -> Ledger:
    """The ledger of the manifests folder ``tree``: the kept one if it is of that tree,
    else the kept one or the branch's checkpoint moved forward, else a whole count; kept
    for the next status."""
    cache = keyed_cache_file(repo.git.common_dir, "session-totals-", store.branch.ref)
    kept = _listed(Ledger.from_cache(read_cache(cache, _TOTALS_FORMAT)))
    if kept is not None and kept.tree == tree:
        return kept
    ledger = None
    for start in (kept, _listed(status_checkpoint.read(store))):
        if start is not None:
            ledger = start if start.tree == tree else _advance(repo, store, start, tree)
        if ledger is not None:
            break
    else:
        ledger = _compute(repo, store, tree, all_details=False)
    write_cache(cache, _TOTALS_FORMAT, ledger.model_dump(mode="json"))
    return ledger


def sessions_status(repo: ExperienceRepository, *, all_details: bool = False
                    ) -> SessionsStatus:
    """The counts, pending sessions and (the first :data:`DETAILS_LIMIT`, or with
    ``all_details`` every) session's line. Unless every line is asked for, the status is
    kept in the derived-data cache with the manifests folder's tree id: read whole while
    the folder is the same, and moved forward by the manifests that changed since
    (:func:`_advance`), from the kept one or from the branch's checkpoint
    (:mod:`expgit.sessions.status_checkpoint`), so its cost follows the change, not the
    number of sessions."""
    store = SessionStore(repo)
    tree = None if all_details else _folder_tree(repo, store)
    if tree is None:
        return _compute(repo, store, None, all_details=all_details).status
    return _current(repo, store, tree).status


def sessions_ledger(repo: ExperienceRepository) -> Ledger:
    """The kept status ledger (:func:`sessions_status` without ``all_details``), with the
    skill usage of the sessions: for a caller that needs both, read once."""
    store = SessionStore(repo)
    tree = _folder_tree(repo, store)
    if tree is None:
        return _compute(repo, store, None, all_details=False)
    return _current(repo, store, tree)


def sessions_usage(repo: ExperienceRepository) -> Usage:
    """The skill loads of the ingested sessions, by skill and day, and the days they
    span: kept with the status ledger (moved forward by the manifests that changed)."""
    return sessions_ledger(repo).usage


def refresh_checkpoint(repo: ExperienceRepository) -> str | None:
    """Write the branch's status checkpoint when it is due (see
    :mod:`expgit.sessions.status_checkpoint`): the commit it made, or None. Never fails
    the command that wrote the sessions: a checkpoint that loses a race is left to the
    next writer."""
    store = SessionStore(repo)
    tip = store.branch.tip()
    tree = _folder_tree(repo, store, tip) if tip is not None else None
    if tip is None or tree is None:
        return None
    last = status_checkpoint.read(store, tip=tip)
    if last is not None and last.tree == tree:
        return None
    ledger = _current(repo, store, tree)
    if ledger.status.sessions < status_checkpoint.EVERY:
        return None
    if last is not None:
        try:
            changes = store.branch.fanned_changes(last.tree, tree, suffix=".json")
        except GitError:
            changes = None
        if changes is not None and len(changes) < status_checkpoint.EVERY:
            return None
    data = status_checkpoint.encode(ledger)
    if data is None:
        return None
    try:
        return store.branch.write({status_checkpoint.PATH: data},
                                  f"sessions: status checkpoint of {ledger.status.sessions} "
                                  "sessions", trailers=(KIND_TRAILER,))
    except ConflictError:
        return None
