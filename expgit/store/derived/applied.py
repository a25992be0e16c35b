"""What ``main``'s history applied: the state of proposals and gradients, read from history.

A proposal is applied exactly when ``main``'s history contains it, in any of the ways a
forge merges a pull request:

* its commit itself (a fast-forward, or a merge commit whose second parent it is);
* a commit that carries its id: ``Expgit-Rebased-From: <its commit>`` (expgit rebuilt it
  on a moved ``main``) or ``Expgit-Proposal: <its id>`` (a squash merge whose message is
  the PR body that ``expgit pr`` wrote);
* a commit that carries all of its ``Expgit-Gradient`` trailers (a rebase merge, which
  keeps the message and changes the commit id).

A migration proposal (``expgit migrate``) has no gradients: its commit carries
``Expgit-Migrated-From``, and it is applied when its commit or its rebuilt commit is.

A gradient is applied when a commit of that history carries it in an ``Expgit-Gradient``
trailer. Nothing here is stored beside ``main``: the index is derived from the commits,
and kept in the derived index's ``applied`` table (:mod:`expgit.store.derived.cache`) with the
tip it was read at as the fold ``applied:<main ref>``, so it cannot disagree with
history. A newer tip that descends from the folded one adds the rows of ``git log
OLD..NEW``; any other tip folds the whole history again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from expgit.git.repo import GitRepo
from expgit.store.derived.cache import DerivedIndex, derive
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository

TABLE = "applied"
SCHEMA_VERSION = 1
DDL = """CREATE TABLE applied (
    ref TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, commit_id TEXT NOT NULL,
    PRIMARY KEY (ref, kind, key)) WITHOUT ROWID"""  # kind: proposal id | gradient commit
ID_LEN = 12
_KEYS = (tr.GRADIENT, tr.REBASED_FROM, tr.PROPOSAL, tr.MIGRATED_FROM)
_FIELD, _RECORD = "\x1f", "\x1e"


@dataclass(frozen=True)
class AppliedIndex:
    """``proposals``: proposal id -> the commit of ``main`` that applied it;
    ``gradients``: gradient commit -> the commit of ``main`` that carries it."""

    tip: str | None
    proposals: Mapping[str, str] = field(default_factory=dict)
    gradients: Mapping[str, str] = field(default_factory=dict)

    def proposal(self, commit: str, gradient_commits: Iterable[str]) -> str | None:
        """The commit of ``main`` that applied the proposal ``commit``, or None."""
        found = self.proposals.get(commit[:ID_LEN])
        if found is not None:
            return found
        carriers = {self.gradients.get(g) for g in gradient_commits}
        if len(carriers) == 1:
            return carriers.pop()  # None when it has no gradient on main
        return None

    def gradient(self, commit: str) -> str | None:
        return self.gradients.get(commit)


# what a just-made gradient or proposal is read with: nothing of main can hold it yet
NOTHING_APPLIED = AppliedIndex(None)


def state_of(location: str, applied_in: str | None) -> str:
    """A proposal's or gradient's state: applied when main's history shows it (wherever
    its ref is kept), else rejected when its ref is kept as rejected, else open."""
    if applied_in is not None:
        return "applied"
    return "rejected" if location == "rejected" else "open"


def _walk(git: GitRepo, revs: list[str], proposals: dict[str, str],
          gradients: dict[str, str]) -> None:
    """Add what the commits of ``git log REVS`` carry (newest first, so an older
    commit never overrides the newest that applied something: iterate reversed)."""
    keys = ",".join(f"key={k}" for k in _KEYS)
    fmt = f"%H{_FIELD}%(trailers:{keys},unfold,separator=%x1f){_RECORD}"
    text = git.out("log", f"--format={fmt}", *revs, "--")
    carried: dict[str, list[str]] = {}
    for record in text.split(_RECORD):
        sha, *lines = record.strip("\n").split(_FIELD)
        if sha:
            carried[sha] = lines
    # a squash merge whose forge added a paragraph after the PR body's trailers: read
    # the whole message of those few (only they carry Expgit-Proposal)
    squashed = git.out("log", f"--format=%H{_FIELD}%B{_RECORD}", "-i",
                       f"--grep=^{tr.PROPOSAL}:", *revs, "--")
    for record in squashed.split(_RECORD):
        sha, _, body = record.strip("\n").partition(_FIELD)
        if sha in carried:
            carried[sha] = [f"{k}: {v}" for k, v in tr.scattered(body).trailers]
    for sha, lines in reversed(carried.items()):
        for line in lines:
            key, _, value = line.partition(":")
            key, value = key.strip().lower(), value.strip().lower()
            if not value:
                continue
            if key == tr.GRADIENT.lower():
                proposals.setdefault(sha[:ID_LEN], sha)  # a proposal commit itself
                gradients.setdefault(value, sha)
            elif key == tr.MIGRATED_FROM.lower():  # a migration proposal's own commit
                proposals.setdefault(sha[:ID_LEN], sha)
            elif key in (tr.REBASED_FROM.lower(), tr.PROPOSAL.lower()):
                proposals.setdefault(value[:ID_LEN], sha)


def applied_index(repo: ExperienceRepository, tip: str | None = None) -> AppliedIndex:
    """The index of what ``main`` (or the commit ``tip``) has applied."""
    if tip is None:
        tip = repo.git.ref(repo.main_ref)
    if tip is None:
        return AppliedIndex(None)
    memo = _MEMO.get(repo.git.common_dir)
    if memo is not None and memo.tip == tip:
        return memo
    index = derive(repo.git.common_dir, lambda ix: _folded(repo.git, repo.main_ref, tip, ix))
    _MEMO[repo.git.common_dir] = index
    return index


def _folded(git: GitRepo, ref: str, tip: str, ix: DerivedIndex) -> AppliedIndex:
    """Fold the commits of ``tip`` since the last folded one into the table (all of its
    history when ``tip`` does not descend from it) and read the whole index back."""
    ix.table(TABLE, SCHEMA_VERSION, DDL)

    def fold(db: sqlite3.Connection) -> AppliedIndex:  # one transaction: no writer between
        base = ix.folded(f"{TABLE}:{ref}")
        if base != tip:
            incremental = base is not None and git.is_ancestor(base, tip)
            proposals: dict[str, str] = {}
            gradients: dict[str, str] = {}
            _walk(git, [tip, f"^{base}"] if incremental else [tip], proposals, gradients)
            if not incremental:
                db.execute("DELETE FROM applied WHERE ref = ?", (ref,))
            # OR IGNORE: a row already there is of an older commit, and the first commit
            # that applied a thing wins
            db.executemany("INSERT OR IGNORE INTO applied VALUES (?, ?, ?, ?)",
                           [(ref, "proposal", k, v) for k, v in proposals.items()]
                           + [(ref, "gradient", k, v) for k, v in gradients.items()])
            ix.fold(db, f"{TABLE}:{ref}", tip)
        found: dict[str, dict[str, str]] = {"proposal": {}, "gradient": {}}
        for kind, key, commit in db.execute("SELECT kind, key, commit_id FROM applied "
                                            "WHERE ref = ?", (ref,)):
            found[kind][key] = commit
        return AppliedIndex(tip, found["proposal"], found["gradient"])
    return ix.update(fold)


_MEMO: dict[object, AppliedIndex] = {}
