"""The experience catalog as ``expgit list`` shows it, without parsing every file again.

A row needs a file's front matter (name, status, summary), its size (for the token
estimate) and whether it passes the per-file checks. Everything but the checks depends
on the file's content alone, so it is kept by blob id in the derived index's
``front_matter`` table (:mod:`expgit.store.derived.cache`): a listing of 10,000 experiences
then reads the root tree, the versions and one query, and parses only the blobs it has
not seen. The checks that depend on the path and the settings (name = file name, token
budget) run every time, with :func:`~expgit.store.format.experience.check_fit`'s messages. A
file that does not parse is never kept: it is read and reported afresh each time.

The rows of the last commit listed are kept too (``catalog_rows``), keyed by that commit,
the experiences root, the token budget and the layout (everything a row depends on), so
listing the same ``main`` again is one query and reads no tree.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from expgit import __version__
from expgit.errors import InvalidInputError
from expgit.store.derived.cache import DerivedIndex, derive
from expgit.store.format.experience import (
    FrontMatter,
    check_fit,
    decode_experience,
    parse_experience,
    tokens_of_bytes,
)
from expgit.store.repository import ExperienceRepository

KEEP = 50_000  # front matter rows at most: the oldest kept go first

TABLES = {
    "front_matter": """CREATE TABLE front_matter (
        blob TEXT NOT NULL UNIQUE, name TEXT NOT NULL, status TEXT NOT NULL,
        summary TEXT NOT NULL, size INTEGER NOT NULL)""",
    "catalog_rows": """CREATE TABLE catalog_rows (
        key TEXT NOT NULL, snapshot_id TEXT NOT NULL, pos INTEGER NOT NULL,
        name TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL,
        summary TEXT NOT NULL, last_commit TEXT, tokens INTEGER NOT NULL, problem TEXT,
        PRIMARY KEY (key, pos)) WITHOUT ROWID""",
}


def _schema_version() -> int:
    """Names what produced a kept row: the front matter schema and the code that parses
    and checks files. Another expgit (or an edited one) starts the tables anew."""
    from expgit.store.format import experience

    digest = hashlib.sha1(json.dumps(FrontMatter.model_json_schema(), sort_keys=True).encode())
    for module in (experience.__file__, __file__):
        try:
            digest.update(Path(module).read_bytes())
        except OSError:  # no source beside the code: the version alone
            digest.update(__version__.encode())
    return int(digest.hexdigest()[:12], 16)


SCHEMA_VERSION = _schema_version()


@dataclass
class ExperienceRow:
    name: str
    status: str
    version: int
    summary: str
    last_commit: str | None
    tokens: int
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row as ``expgit list --json`` prints it (``dataclasses.asdict``, faster)."""
        return {"name": self.name, "status": self.status, "version": self.version,
                "summary": self.summary, "last_commit": self.last_commit,
                "tokens": self.tokens, "problem": self.problem}


@dataclass(frozen=True)
class Catalog:
    commit: str
    snapshot_id: str  # tree id of the experiences root (the empty tree if there is none)
    rows: list[ExperienceRow]


def _parsed(data: bytes, path: str) -> tuple[str, str, str, int]:
    """What a row needs of one file's content: (name, status, summary, size); raises
    InvalidInputError if it breaks the schema (such a file is not kept)."""
    fm = parse_experience(decode_experience(data, path), path).front_matter
    return fm.name, fm.status, fm.summary, len(data)


def _invalid(name: str, version: int, last: str | None, size: int,
             problem: str) -> ExperienceRow:
    return ExperienceRow(name, "invalid", version, "", last, size // 4, problem)


def _row(name: str, path: str, found: tuple[str, str, str, int], version: int,
         last: str | None, budget: int) -> ExperienceRow:
    fm_name, status, summary, size = found
    try:
        check_fit(fm_name, tokens_of_bytes(size), path, name, budget)
    except InvalidInputError as exc:
        return _invalid(name, version, last, size, exc.message)
    return ExperienceRow(name, status, version, summary, last, tokens_of_bytes(size))


def _tables(ix: DerivedIndex) -> None:
    for name, ddl in TABLES.items():
        ix.table(name, SCHEMA_VERSION, ddl)


def catalog(repo: ExperienceRepository, rev: str | None = None) -> Catalog:
    """The rows of ``expgit list`` for ``main`` (or ``rev``), sorted by name."""
    commit = repo.commit(rev) if rev else repo.main_commit()
    key = f"{commit} {repo.settings.token_budget} {repo.root} {repo.settings.layout}"

    def listing(ix: DerivedIndex) -> Catalog:
        _tables(ix)
        stored = ix.db.execute("SELECT snapshot_id, name, status, version, summary, "
                               "last_commit, tokens, problem FROM catalog_rows "
                               "WHERE key = ? ORDER BY pos", (key,)).fetchall()
        if stored:
            return Catalog(commit, stored[0][0], [ExperienceRow(*row[1:]) for row in stored])
        listed = _catalog(repo, commit, ix)

        def keep(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM catalog_rows")  # one listing is kept
            db.executemany("INSERT INTO catalog_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(key, listed.snapshot_id, pos, *row.as_dict().values())
                            for pos, row in enumerate(listed.rows)])
        ix.update(keep)
        return listed
    return derive(repo.git.common_dir, listing)


def _catalog(repo: ExperienceRepository, commit: str, ix: DerivedIndex) -> Catalog:
    loader = repo.snapshots
    root, files = loader.files_at(commit)
    versions = loader.versions(commit)
    blobs = json.dumps([blob for _, blob in files.values()])
    known: dict[str, tuple[str, str, str, int]] = {
        blob: tuple(rest) for blob, *rest in ix.db.execute(
            "SELECT blob, name, status, summary, size FROM front_matter "
            "WHERE blob IN (SELECT value FROM json_each(?))", (blobs,))}
    missing = [blob for _, blob in files.values() if blob not in known]
    fresh: dict[str, tuple[str, str, str, int]] = {}
    failed: dict[str, tuple[int, str]] = {}  # blob -> (size, problem); never kept
    if missing:
        paths = {blob: file_path for file_path, blob in files.values()}
        for blob, data in repo.git.read_blobs(missing).items():
            try:
                fresh[blob] = _parsed(data, paths[blob])
            except InvalidInputError as exc:
                failed[blob] = (len(data), exc.message)
    rows: list[ExperienceRow] = []
    budget = repo.settings.token_budget
    for name in sorted(files):
        file_path, blob = files[name]
        info = versions.get(file_path)
        version, last = (info.version, info.last_commit) if info else (0, None)
        found = known.get(blob) or fresh.get(blob)
        rows.append(_row(name, file_path, found, version, last, budget) if found is not None
                    else _invalid(name, version, last, *failed[blob]))
    if fresh:
        def keep(db: sqlite3.Connection) -> None:
            db.executemany("INSERT OR IGNORE INTO front_matter VALUES (?, ?, ?, ?, ?)",
                           [(blob, *found) for blob, found in fresh.items()])
            db.execute("DELETE FROM front_matter WHERE rowid <= "
                       "(SELECT max(rowid) FROM front_matter) - ?", (KEEP,))
        ix.update(keep)
    return Catalog(commit, root, rows)
