"""The derived index's contract (expgit/store/derived/cache.py, docs/design.md "Derived caches"):
delete it, corrupt it, make it unwritable, write it from two processes at once, or bump a
table's schema, and every answer stays the one the git objects give."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

from conftest import git

from expgit.store.derived.cache import DerivedIndex, derive, index_file
from expgit.store.repository import ExperienceRepository

TABLE = "commit_subjects"
DDL = f"CREATE TABLE {TABLE} (commit_id TEXT PRIMARY KEY, subject TEXT NOT NULL)"


class Counter:
    """Folds ``git log`` subjects into the index; counts how many commits it had to read."""

    def __init__(self, repo: ExperienceRepository, schema_version: int = 1) -> None:
        self.repo, self.schema_version, self.read = repo, schema_version, 0

    def __call__(self, ix: DerivedIndex) -> list[tuple[str, str]]:
        ix.table(TABLE, self.schema_version, DDL)
        tip = git(self.repo.git.git_dir, "rev-parse", "main").strip()
        since = ix.folded(TABLE)
        span = [tip] if since is None else [f"{since}..{tip}"]
        out = git(self.repo.git.git_dir, "log", "--format=%H %s", *span)
        new = [tuple(line.split(" ", 1)) for line in out.splitlines()]
        self.read += len(new)

        def write(db: sqlite3.Connection) -> None:
            db.executemany(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?)", new)
            ix.fold(db, TABLE, tip)
        ix.update(write)
        return sorted(ix.db.execute(f"SELECT commit_id, subject FROM {TABLE}").fetchall())

    def answer(self) -> list[tuple[str, str]]:
        return derive(self.repo.git.common_dir, self)


def add_commit(repo: ExperienceRepository, subject: str) -> None:
    tree = git(repo.git.git_dir, "rev-parse", "main^{tree}").strip()
    new = git(repo.git.git_dir, "commit-tree", "-p", "main", "-m", subject, tree).strip()
    git(repo.git.git_dir, "update-ref", "refs/heads/main", new)


def test_folds_only_new_commits_and_a_deleted_index_gives_the_same_answer(
        bare_repo: ExperienceRepository) -> None:
    counter = Counter(bare_repo)
    first = counter.answer()
    assert first and counter.read == len(first)
    add_commit(bare_repo, "one more")
    second = counter.answer()
    assert len(second) == len(first) + 1 and counter.read == len(first) + 1  # folded 1
    index_file(bare_repo.git.common_dir).unlink()
    rebuilt = Counter(bare_repo)
    assert rebuilt.answer() == second and rebuilt.read == len(second)  # read all again
    assert index_file(bare_repo.git.common_dir).exists()


def test_corrupt_bytes_are_deleted_and_rebuilt(bare_repo: ExperienceRepository) -> None:
    counter = Counter(bare_repo)
    expected = counter.answer()
    path = index_file(bare_repo.git.common_dir)
    path.write_bytes(b"\x00garbage" * 4096)
    assert counter.answer() == expected
    with sqlite3.connect(path) as db:  # a real index again
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_corrupt_page_found_half_way_is_rebuilt(bare_repo: ExperienceRepository) -> None:
    counter = Counter(bare_repo)
    expected = counter.answer()
    path = index_file(bare_repo.git.common_dir)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 2 * page
    data[2 * page:] = b"\xff" * (len(data) - 2 * page)  # the header and first pages survive
    path.write_bytes(bytes(data))
    assert counter.answer() == expected


def test_a_foreign_sqlite_file_is_replaced(bare_repo: ExperienceRepository) -> None:
    path = index_file(bare_repo.git.common_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 42")
        db.execute("CREATE TABLE mine (x)")
    counter = Counter(bare_repo)
    assert counter.answer()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'mine'").fetchone() is None


def test_a_git_dir_that_cannot_hold_the_index_works_in_memory(
        bare_repo: ExperienceRepository) -> None:
    expected = Counter(bare_repo).answer()
    index_file(bare_repo.git.common_dir).unlink()
    cache = index_file(bare_repo.git.common_dir).parent
    cache.rmdir()
    cache.write_text("not a folder")  # as unwritable as a read-only file system, even for root
    counter = Counter(bare_repo)
    assert counter.answer() == expected
    assert counter.answer() == expected
    assert counter.read == 2 * len(expected)  # nothing kept: computed by each run


def test_a_read_only_index_file_works_in_memory(bare_repo: ExperienceRepository) -> None:
    expected = Counter(bare_repo).answer()
    path = index_file(bare_repo.git.common_dir)
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    ix = DerivedIndex(read_only)
    add_commit(bare_repo, "not keepable")
    counter = Counter(bare_repo)
    try:
        counter(ix)
    except sqlite3.OperationalError:  # what derive() turns into an in-memory run
        pass
    else:
        raise AssertionError("a read-only index took a write")
    finally:
        ix.close()
    assert len(Counter(bare_repo).answer()) == len(expected) + 1


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from expgit.store.derived.cache import DerivedIndex
    common, who = Path(sys.argv[1]), sys.argv[2]
    for i in range(150):
        with DerivedIndex.open(common) as ix:
            ix.table("rows", 1, "CREATE TABLE rows (k TEXT PRIMARY KEY)")
            ix.update(lambda db: db.execute("INSERT INTO rows VALUES (?)", (f"{who}{i}",)))
""")


def test_two_processes_writing_at_once_both_succeed(bare_repo: ExperienceRepository) -> None:
    common = bare_repo.git.common_dir
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(common), who],
                              stderr=subprocess.PIPE, text=True) for who in "ab"]
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    with DerivedIndex.open(common) as ix:
        keys = {k for (k,) in ix.db.execute("SELECT k FROM rows")}
    assert keys == {f"{who}{i}" for who in "ab" for i in range(150)}


def test_a_schema_bump_rebuilds_only_that_table(bare_repo: ExperienceRepository) -> None:
    expected = Counter(bare_repo).answer()
    with DerivedIndex.open(bare_repo.git.common_dir) as ix:
        ix.table("other", 1, "CREATE TABLE other (k TEXT PRIMARY KEY)")
        ix.update(lambda db: db.execute("INSERT INTO other VALUES ('kept')"))
    bumped = Counter(bare_repo, schema_version=2)
    assert bumped.answer() == expected
    assert bumped.read == len(expected)  # the table was recreated empty and folded anew
    again = Counter(bare_repo, schema_version=2)
    assert again.answer() == expected and again.read == 0
    with DerivedIndex.open(bare_repo.git.common_dir) as ix:
        assert ix.db.execute("SELECT k FROM other").fetchall() == [("kept",)]
