"""The derived index: what the git objects already say, kept so as not to recompute it,
in one SQLite file ``<git-common-dir>/expgit/cache/index.sqlite3``.

Its contract is in docs/design.md, "Derived caches": rows keyed by object ids; a "last
folded commit" per table, moved with its rows in one transaction (:meth:`DerivedIndex.fold`,
read with them by :meth:`DerivedIndex.read`); a table whose ``schema_version`` changed
recreated empty (:meth:`DerivedIndex.table`); a corrupt or foreign file (no ``expgit``
application id) rebuilt, and a failure half-way run again on a new file or in memory
(:func:`derive`); WAL mode, ``BEGIN IMMEDIATE`` and a busy timeout for concurrent writers.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

CACHE_DIR = Path("expgit") / "cache"
INDEX_NAME = "index.sqlite3"
APPLICATION_ID = 0x45584754  # "EXGT": a file without it is not ours
BUSY_TIMEOUT_S = 30.0
T = TypeVar("T")

_SETUP = f"""
PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)};
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS folds (
    name TEXT PRIMARY KEY, commit_id TEXT, schema_version INTEGER NOT NULL
) WITHOUT ROWID;
"""


def cache_file(common_dir: Path, name: str) -> Path:
    return common_dir / CACHE_DIR / name


def index_file(common_dir: Path) -> Path:
    return cache_file(common_dir, INDEX_NAME)


def _setup(db: sqlite3.Connection) -> sqlite3.Connection:
    db.executescript(_SETUP)
    db.execute("SELECT count(*) FROM folds").fetchone()  # reads a page: corruption shows
    return db


def _memory() -> sqlite3.Connection:
    return _setup(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))


def _connect(path: Path) -> sqlite3.Connection:
    """The index file at ``path``; raises ``sqlite3.DatabaseError`` for a corrupt or foreign
    file, ``sqlite3.OperationalError`` or ``OSError`` for one that cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    # autocommit mode: transactions are explicit (BEGIN IMMEDIATE in update())
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                         check_same_thread=False)
    try:
        app = db.execute("PRAGMA application_id").fetchone()[0]
        if app not in (0, APPLICATION_ID):
            raise sqlite3.DatabaseError("not expgit's derived index")
        db.execute("PRAGMA journal_mode = WAL")
        if app == 0:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        return _setup(db)
    except BaseException:
        db.close()
        raise


def _create(path: Path) -> None:
    """Make the index file whole under a temporary name, then link it into place, so no
    process ever opens one half set up: switching a shared file to WAL takes a lock that
    sqlite's busy timeout does not wait for, and the loser went without the index."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _remove(tmp)
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        _setup(db)
    finally:
        db.close()
    try:
        os.link(tmp, path)
    except FileExistsError:  # another process made it first: theirs is as good
        pass
    except OSError:  # a file system without hard links
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(OSError):
            stale.unlink()


def _open_file(path: Path) -> sqlite3.Connection:
    """The index at ``path``; a damaged or foreign file is deleted and made anew; one that
    cannot be made gives an in-memory index."""
    try:
        return _connect(path)
    except sqlite3.OperationalError:  # read-only, cannot open, locked past the timeout
        return _memory()
    except sqlite3.DatabaseError:  # corrupt, not a database, or not ours
        _remove(path)
    except OSError:  # the cache folder cannot be made
        return _memory()
    with contextlib.suppress(sqlite3.Error, OSError):
        return _connect(path)
    return _memory()


def derive(common_dir: Path, compute: Callable[[DerivedIndex], T]) -> T:
    """``compute`` run against the git directory's index: the one way to use it.

    ``compute`` reads and folds with :class:`DerivedIndex`; it must give the same answer
    from any state of the index (empty included), since when the file turns out damaged
    half-way (``sqlite3.DatabaseError``) it is deleted and ``compute`` runs again on a new
    one, and when the file cannot take a write (read-only, locked past the busy timeout,
    disk full: ``sqlite3.OperationalError``) ``compute`` runs again on an empty index in
    memory. So the index never fails a command; at worst its answer is not kept.
    """
    return derive_file(index_file(common_dir), compute)


def derive_file(path: Path, compute: Callable[[DerivedIndex], T]) -> T:
    """:func:`derive` with the index file at ``path`` (one outside a git directory: the
    user's cache folder)."""
    try:
        with DerivedIndex(_open_file(path)) as ix:
            return compute(ix)
    except sqlite3.OperationalError:
        pass
    except sqlite3.DatabaseError:
        _remove(path)
        with contextlib.suppress(sqlite3.OperationalError), DerivedIndex(_open_file(path)) as ix:
            return compute(ix)
    with DerivedIndex(_memory()) as ix:
        return compute(ix)


class DerivedIndex:
    """One open derived index (a context manager that closes it)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self._tables: dict[str, int] = {}

    @classmethod
    def open(cls, common_dir: Path) -> DerivedIndex:
        return cls(_open_file(index_file(common_dir)))

    def __enter__(self) -> DerivedIndex:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def update(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``write`` in one transaction (``BEGIN IMMEDIATE``: the write lock is taken
        up front, waiting up to the busy timeout) and commit it; roll back on any error.
        What it reads inside is what it writes over: no other writer comes between."""
        return self._transaction("IMMEDIATE", write)

    def read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``query`` in one read transaction: its statements see one state of the
        index (a fold mark and the rows it covers), whatever writers do meanwhile."""
        return self._transaction("DEFERRED", query)

    def _transaction(self, mode: str, run: Callable[[sqlite3.Connection], T]) -> T:
        self.db.execute(f"BEGIN {mode}")
        try:
            result = run(self.db)
            self.db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        return result

    def table(self, name: str, schema_version: int, ddl: str) -> None:
        """Make sure table ``name`` exists at ``schema_version``: ``ddl`` holds its
        ``CREATE TABLE`` (and index) statements; a table of another version is dropped
        and recreated, and its fold forgotten."""
        if self._tables.get(name) == schema_version:
            return
        def current(db: sqlite3.Connection) -> bool:
            return bool(db.execute("SELECT schema_version, EXISTS (SELECT 1 FROM "
                                   "sqlite_master WHERE type = 'table' AND name = ?) FROM "
                                   "folds WHERE name = ?", (name, name)).fetchone()
                        == (schema_version, 1))

        def recreate(db: sqlite3.Connection) -> None:
            if current(db):  # another process made it meanwhile
                return
            db.execute(f'DROP TABLE IF EXISTS "{name}"')
            for statement in ddl.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("DELETE FROM folds WHERE substr(name, 1, ?) = ?",
                       (len(name) + 1, f"{name}:"))  # the folds of its parts
            db.execute("INSERT OR REPLACE INTO folds (name, commit_id, schema_version) "
                       "VALUES (?, NULL, ?)", (name, schema_version))
        if not current(self.db):
            self.update(recreate)
        self._tables[name] = schema_version

    def folded(self, name: str) -> str | None:
        """The commit whose history table ``name`` covers, or None (nothing folded)."""
        row = self.db.execute("SELECT commit_id FROM folds WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def fold(db: sqlite3.Connection, name: str, commit: str | None) -> None:
        """Mark table ``name`` (or one part of it, ``<table>:<key>``, when a table holds
        rows folded from several histories) as covering ``commit``'s history; call it
        inside the :meth:`update` that writes the rows, so the two never disagree."""
        db.execute("INSERT INTO folds (name, commit_id, schema_version) VALUES (?, ?, 0) "
                   "ON CONFLICT (name) DO UPDATE SET commit_id = excluded.commit_id",
                   (name, commit))

