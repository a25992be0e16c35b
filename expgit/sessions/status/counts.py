"""``expgit sessions status``: counts of sessions and segments, as queries over one row per
manifest in the derived index: the table ``session_rows`` and the fold
``session_rows:<ref>``, relative to the branch's status checkpoint
(:mod:`expgit.sessions.status.checkpoint`) when there is one, signs and all, as
docs/design.md ("Derived caches") describes.

``details`` holds the first :data:`DETAILS_LIMIT` sessions by file name
(``details_truncated`` says when there are more); ``all_details`` (``--all``) lists every
one, which at 100,000 sessions is a 24 MB answer."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import datetime
from typing import Any

from expgit.errors import ConflictError, GitError
from expgit.git.objects import TreeEntry
from expgit.sessions.manifest import SessionManifest
from expgit.sessions.status import checkpoint as status_checkpoint
from expgit.sessions.status.ledger import Ledger, SessionLine, SessionsStatus, Usage
from expgit.sessions.store import KIND_TRAILER, MANIFESTS, SessionStore
from expgit.store.derived.cache import DerivedIndex, derive
from expgit.store.repository import ExperienceRepository

__all__ = ["DETAILS_LIMIT", "SessionLine", "SessionsStatus", "Usage", "refresh_checkpoint",
           "sessions_ledger", "sessions_status", "sessions_usage"]

DETAILS_LIMIT = 100  # sessions listed in ``details`` unless all are asked for
SCHEMA_VERSION = 1
LINE = ("session", "agent", "format", "messages", "status", "status_reason", "segments",
        "labelled", "trained")  # the columns of a SessionLine, in its order
COUNTS = ("segments", "superseded", "labelled", "memory_eligible", "sft_eligible", "trained")
TABLES = {
    "session_rows": """CREATE TABLE session_rows (
        ref TEXT NOT NULL, name TEXT NOT NULL, sign INTEGER NOT NULL, blob TEXT NOT NULL,
        session TEXT NOT NULL, agent TEXT, format TEXT NOT NULL, messages INTEGER NOT NULL,
        status TEXT NOT NULL, status_reason TEXT, segments INTEGER NOT NULL,
        labelled INTEGER NOT NULL, trained INTEGER NOT NULL, superseded INTEGER NOT NULL,
        memory_eligible INTEGER NOT NULL, sft_eligible INTEGER NOT NULL, started TEXT,
        ended TEXT, invalidations TEXT NOT NULL, loads TEXT NOT NULL,
        PRIMARY KEY (ref, name, sign)) WITHOUT ROWID""",
    # the checkpoint the rows of a ref are relative to (absent: none)
    "session_bases": "CREATE TABLE session_bases (ref TEXT PRIMARY KEY, ledger TEXT NOT NULL)"
                     " WITHOUT ROWID",
}
Row = tuple[object, ...]  # the columns after ``blob``
Change = tuple[str, str | None, str | None]  # file name, blob before and after (None: absent)


def _row(manifest: SessionManifest) -> Row:
    active = manifest.active()
    return (manifest.session_key, manifest.agent, manifest.format, manifest.message_count,
            manifest.status, manifest.status_reason, len(active),
            sum(1 for s in active if s.labelled), sum(1 for s in active if s.trained),
            sum(1 for s in manifest.segments if s.status == "superseded"),
            sum(1 for s in active if s.memory_eligible),
            sum(1 for s in active if s.sft_eligible),
            _day(manifest.started_at), _day(manifest.ended_at), *_lists(manifest))


def _lists(manifest: SessionManifest) -> tuple[str, str]:
    """The JSON lists of a manifest's invalidating proposals and its named skill loads
    (``[skill, ISO time or ""]``)."""
    return (json.dumps([s.invalidation.proposal_id for s in manifest.segments
                        if s.invalidation is not None and s.invalidation.proposal_id]),
            json.dumps([[load.loaded, load.at.isoformat() if load.at is not None else ""]
                        for load in manifest.skill_loads if load.loaded is not None]))


def _day(at: datetime | None) -> str | None:
    return at.date().isoformat() if at is not None else None


def _parsed(repo: ExperienceRepository, store: SessionStore, named: dict[str, str]
            ) -> dict[str, Row]:
    """The rows of the manifest blobs ``named`` ({blob: file name}), by blob."""
    blobs = repo.git.read_blobs(named)
    return {sha: _row(store.parse(name, blobs[sha])) for sha, name in named.items()}


def _line(row: Row) -> SessionLine:
    fields: dict[str, Any] = dict(zip(LINE, row, strict=False))
    return SessionLine.model_construct(**fields)


def _folder_tree(repo: ExperienceRepository, store: SessionStore, tip: str | None = None
                 ) -> str | None:
    """The manifests folder's tree id at the branch tip (or ``tip``): the whole status is
    a function of it (None: no sessions yet)."""
    tree = store.branch.tree(tip)
    entry = repo.git.path_entry(tree, MANIFESTS) if tree is not None else None
    return entry.sha if entry is not None and entry.is_tree else None


class _Folder:
    """The rows of one sessions branch at its tip, in one open index."""

    def __init__(self, repo: ExperienceRepository, store: SessionStore, ix: DerivedIndex,
                 tip: str, tree: str) -> None:
        self.repo, self.store, self.ix, self.tip, self.tree = repo, store, ix, tip, tree
        self.ref = store.branch.ref
        self.fold_name = f"session_rows:{self.ref}"
        for name, ddl in TABLES.items():
            ix.table(name, SCHEMA_VERSION, ddl)

    def base(self) -> Ledger | None:
        row = self.ix.db.execute("SELECT ledger FROM session_bases WHERE ref = ?",
                                 (self.ref,)).fetchone()
        return None if row is None else Ledger.model_validate_json(row[0])

    def changes(self, old_tree: str | None) -> list[Change] | None:
        """The manifests that differ from the folder ``old_tree`` (None: none there);
        None when that tree is not here."""
        if old_tree == self.tree:
            return []
        if old_tree is None:
            return [(e.name, None, e.sha) for e in self.store.branch.fanned_entries(
                MANIFESTS, suffix=".json", tip=self.tip)]
        try:
            return self.store.branch.fanned_changes(old_tree, self.tree, suffix=".json")
        except GitError:
            return None

    def kept(self, db: sqlite3.Connection, base_allowed: bool) -> bool:
        """Whether the rows are of the tip (and, unless ``base_allowed``, of no base)."""
        return (self.ix.folded(self.fold_name) == self.tip
                and (base_allowed or db.execute("SELECT 1 FROM session_bases WHERE ref = ?",
                                                (self.ref,)).fetchone() is None))

    def fold(self, db: sqlite3.Connection, base_allowed: bool) -> None:
        """Bring the rows to the tip (inside the write transaction): the changes since the
        folded commit, else from the branch's checkpoint (when ``base_allowed``), else
        every manifest."""
        if self.kept(db, base_allowed):  # another process folded it meanwhile
            return
        base, folded = self.base(), self.ix.folded(self.fold_name)
        changes = None
        if folded is not None and (base is None or base_allowed):
            try:
                changes = self.changes(_folder_tree(self.repo, self.store, folded))
            except GitError:  # the folded commit is gone
                changes = None
        if changes is None or not self._apply(db, changes, base):
            self._reset(db, base_allowed)
        self.ix.fold(db, self.fold_name, self.tip)

    def current(self, *, base_allowed: bool, all_details: bool) -> Ledger | None:
        """The ledger of the rows brought to the tip: read in one transaction when they
        are of it, else folded and read in one write transaction."""
        def read(db: sqlite3.Connection) -> tuple[bool, Ledger | None]:
            kept = self.kept(db, base_allowed)
            return kept, self.ledger(all_details=all_details) if kept else None

        def write(db: sqlite3.Connection) -> Ledger | None:
            self.fold(db, base_allowed)
            return self.ledger(all_details=all_details)
        kept, ledger = self.ix.read(read)
        return ledger if kept else self.ix.update(write)

    def _reset(self, db: sqlite3.Connection, base_allowed: bool) -> None:
        """Rows from nothing: relative to the branch's checkpoint when it can be used,
        else one for every manifest."""
        db.execute("DELETE FROM session_rows WHERE ref = ?", (self.ref,))
        db.execute("DELETE FROM session_bases WHERE ref = ?", (self.ref,))
        base = status_checkpoint.read(self.store, tip=self.tip) if base_allowed else None
        changes = self.changes(base.tree) if base is not None else None
        if base is not None and changes is not None:
            db.execute("INSERT INTO session_bases VALUES (?, ?)",
                       (self.ref, base.model_dump_json()))
        else:
            base, changes = None, self.changes(None)
        assert changes is not None
        applied = self._apply(db, changes, base)
        assert applied  # nothing to disagree with: the rows were empty

    def _apply(self, db: sqlite3.Connection, changes: list[Change], base: Ledger | None
               ) -> bool:
        """Fold ``changes`` into the rows; False when they do not fit the rows (the rows
        then are not what they claim, and are built again)."""
        have = {(name, sign): blob for name, sign, blob in db.execute(
            "SELECT name, sign, blob FROM session_rows WHERE ref = ? AND name IN "
            "(SELECT value FROM json_each(?))", (self.ref, json.dumps([c[0] for c in changes])))}
        drop: list[tuple[str, int]] = []
        add: list[tuple[str, int, str]] = []
        for name, old, new in changes:
            if have.get((name, 1)) != old:
                if old is None or base is None or (name, 1) in have or (name, -1) in have:
                    return False
                add.append((name, -1, old))  # counted in the base: taken away
            drop.append((name, 1))
            if new is not None and have.get((name, -1)) == new:
                drop.append((name, -1))  # back to what the base counted
            elif new is not None:
                add.append((name, 1, new))
        rows = _parsed(self.repo, self.store, {blob: name for name, _, blob in add})
        db.executemany("DELETE FROM session_rows WHERE ref = ? AND name = ? AND sign = ?",
                       [(self.ref, *key) for key in drop])
        db.executemany(f"INSERT INTO session_rows VALUES ({', '.join(['?'] * 20)})",
                       [(self.ref, name, sign, blob, *rows[blob]) for name, sign, blob in add])
        return True

    def ledger(self, *, all_details: bool) -> Ledger | None:
        """The status of the rows (with the base's figures); None when it cannot be
        told from a base (see the module docstring)."""
        base = self.base()
        old = base.status if base is not None else SessionsStatus(branch="")
        counts, usage = self._counts(old), self._usage(base)
        invalidations = [i for (found,) in self.ix.db.execute(
            "SELECT invalidations FROM session_rows WHERE ref = ? AND invalidations != '[]' "
            "ORDER BY name", (self.ref,)) for i in json.loads(found)]
        if counts is None or usage is None or (base is not None and invalidations):
            return None
        totals, by_status = counts
        pending = self._pending(base)
        shown = self.store.branch.fanned_entries(
            MANIFESTS, suffix=".json", tip=self.tip,
            first=None if all_details else DETAILS_LIMIT)
        details = self._lines(shown, base)
        status = SessionsStatus.model_construct(
            branch=self.store.branch.branch, **totals, by_status=by_status,
            invalidation_proposals=old.invalidation_proposals or list(
                dict.fromkeys(invalidations)),
            pending=[pending[n] for n in sorted(pending)],
            details=details, details_truncated=len(details) < totals["sessions"])
        return Ledger.model_construct(tree=self.tree, status=status,
                                      detail_names=[e.name for e in shown],
                                      pending_names=sorted(pending), usage=usage)

    def _counts(self, old: SessionsStatus) -> tuple[dict[str, Any], dict[str, int]] | None:
        """The totals and the sessions by status: ``old``'s plus the rows'; None if one
        goes below zero."""
        names = ("sessions", *COUNTS)
        totals = old.model_dump(include=set(names))
        by_status = Counter(old.by_status)
        for status, *sums in self.ix.db.execute(
                "SELECT status, sum(sign), " + ", ".join(f"sum(sign * {c})" for c in COUNTS)
                + " FROM session_rows WHERE ref = ? GROUP BY status", (self.ref,)):
            by_status[status] += sums[0]
            for name, n in zip(names, sums, strict=True):
                totals[name] += n
        if any(n < 0 for n in [*totals.values(), *by_status.values()]):
            return None
        return totals, {k: v for k, v in sorted(by_status.items()) if v}

    def _usage(self, base: Ledger | None) -> Usage | None:
        """The base's skill usage with the rows' loads, starts and ends folded in."""
        usage = base.usage.model_copy(deep=True) if base is not None else Usage()
        ok = usage.fold(*(self.ix.db.execute(query, (self.ref,)).fetchall() for query in (
            "SELECT json_extract(l.value, '$[0]'), json_extract(l.value, '$[1]'), sum(sign) "
            "FROM session_rows, json_each(loads) AS l WHERE ref = ? AND loads != '[]' "
            "GROUP BY 1, 2 HAVING sum(sign) != 0",
            "SELECT started, sum(sign) FROM session_rows WHERE ref = ? AND started IS NOT "
            "NULL GROUP BY 1",
            "SELECT ended, sum(sign) FROM session_rows WHERE ref = ? AND ended IS NOT NULL "
            "GROUP BY 1")))
        return usage if ok else None

    def _pending(self, base: Ledger | None) -> dict[str, SessionLine]:
        """The pending sessions' lines by file name: the base's that no row changed, and
        the rows' now pending."""
        db, ref = self.ix.db, (self.ref,)
        pending = {} if base is None else dict(zip(base.pending_names, base.status.pending,
                                                   strict=True))
        for (name,) in db.execute("SELECT name FROM session_rows WHERE ref = ? AND name IN "
                                  "(SELECT value FROM json_each(?))",
                                  (self.ref, json.dumps(list(pending)))):
            pending.pop(name, None)
        return pending | {name: _line(row) for name, *row in db.execute(
            f"SELECT name, {', '.join(LINE)} FROM session_rows WHERE ref = ? AND sign = 1 "
            "AND status = 'pending'", ref)}

    def _lines(self, entries: list[TreeEntry], base: Ledger | None) -> list[SessionLine]:
        """The lines of the manifest files ``entries``: from their +1 rows, else from the
        base's listed lines, else parsed."""
        lines = {name: _line(row) for name, *row in self.ix.db.execute(
            f"SELECT name, {', '.join(LINE)} FROM session_rows WHERE ref = ? AND sign = 1 "
            "AND name IN (SELECT value FROM json_each(?))",
            (self.ref, json.dumps([e.name for e in entries])))}
        if base is not None:
            for name, line in zip(base.detail_names, base.status.details, strict=True):
                lines.setdefault(name, line)
        missing = {e.sha: e.name for e in entries if e.name not in lines}
        for sha, row in _parsed(self.repo, self.store, missing).items():
            lines[missing[sha]] = _line(row)
        return [lines[e.name] for e in entries]


def _current(repo: ExperienceRepository, store: SessionStore, *, all_details: bool = False,
             tip: str | None = None) -> Ledger:
    """The ledger of the branch tip's manifests folder, from the rows brought up to it."""
    tip = tip or store.branch.tip()
    tree = _folder_tree(repo, store, tip) if tip is not None else None
    if tip is None or tree is None:
        return Ledger(tree="", status=SessionsStatus(branch=store.branch.branch),
                      detail_names=[], pending_names=[], usage=Usage())

    def compute(ix: DerivedIndex) -> Ledger:
        folder = _Folder(repo, store, ix, tip, tree)
        ledger = folder.current(base_allowed=not all_details, all_details=all_details)
        if ledger is None:  # not to be told from the base: rows for every manifest
            ledger = folder.current(base_allowed=False, all_details=all_details)
            assert ledger is not None  # with no base, every figure is a plain sum
        return ledger
    return derive(repo.git.common_dir, compute)


def sessions_status(repo: ExperienceRepository, *, all_details: bool = False
                    ) -> SessionsStatus:
    """The counts, pending sessions and (the first :data:`DETAILS_LIMIT`, or with
    ``all_details`` every) session's line, from the derived index's rows (see the
    module docstring): its cost follows the manifests changed since the last status."""
    return _current(repo, SessionStore(repo), all_details=all_details).status


def sessions_ledger(repo: ExperienceRepository) -> Ledger:
    """The status ledger (:func:`sessions_status` without ``all_details``), with the
    skill usage of the sessions: for a caller that needs both, read once."""
    return _current(repo, SessionStore(repo))


def sessions_usage(repo: ExperienceRepository) -> Usage:
    """The skill loads of the ingested sessions, by skill and day, and the days they
    span: sums of the same rows as the status."""
    return sessions_ledger(repo).usage


def refresh_checkpoint(repo: ExperienceRepository) -> str | None:
    """Write the branch's status checkpoint when it is due (see
    :mod:`expgit.sessions.status.checkpoint`): the commit it made, or None. Never fails
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
    ledger = _current(repo, store, tip=tip)
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
