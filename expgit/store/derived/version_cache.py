"""The versions of one commit per experiences root, kept across processes in the derived
index (:mod:`expgit.store.derived.cache`).

A file's version at a commit is a function of that commit's history, and a commit id
names its whole history, so versions stored with a commit id are never stale. The
snapshot loader stores the versions it computed with a ``git log`` pass (the costly
case) and starts from them in the next process: versions of a newer ``main`` are then
derived from them by diffing the few commits in between, as within one process. The
table ``versions`` holds the rows of each root; the fold ``versions:<root>`` the commit
they are of.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

from expgit.store.derived.cache import DerivedIndex, derive

TABLE = "versions"
SCHEMA_VERSION = 1
DDL = """CREATE TABLE versions (
    root TEXT NOT NULL, path TEXT NOT NULL, version INTEGER NOT NULL,
    last_commit TEXT NOT NULL, first_commit TEXT NOT NULL, PRIMARY KEY (root, path)
) WITHOUT ROWID"""

Versions = dict[str, tuple[int, str, str]]  # path: (version, last commit, first commit)


def load_versions(common_dir: Path, root: str) -> tuple[str, Versions] | None:
    """``(commit, {path: (version, last commit, first commit)})`` as stored, or None."""
    def read(ix: DerivedIndex) -> tuple[str, Versions] | None:
        ix.table(TABLE, SCHEMA_VERSION, DDL)
        return ix.read(lambda db: rows(ix.folded(f"{TABLE}:{root}"), db))

    def rows(commit: str | None, db: sqlite3.Connection) -> tuple[str, Versions] | None:
        if commit is None:
            return None
        found = db.execute("SELECT path, version, last_commit, first_commit FROM versions "
                           "WHERE root = ?", (root,))
        return commit, {path: (version, last, first) for path, version, last, first in found}
    return derive(common_dir, read)


def save_versions(common_dir: Path, root: str, commit: str,
                  versions: Mapping[str, tuple[int, str, str]]) -> None:
    def write(ix: DerivedIndex) -> None:
        ix.table(TABLE, SCHEMA_VERSION, DDL)
        def rows(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM versions WHERE root = ?", (root,))
            db.executemany("INSERT INTO versions VALUES (?, ?, ?, ?, ?)",
                           [(root, path, *info) for path, info in versions.items()])
            ix.fold(db, f"{TABLE}:{root}", commit)
        ix.update(rows)
    derive(common_dir, write)
