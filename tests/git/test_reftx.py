"""Ref transactions through ``git update-ref -z --stdin``: compare-and-swap and atomicity,
a held (stale) lock named and left alone, packed refs, deletions, reflogs as the
repository's settings say, a push quarantine, and what the journal is told."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import EXAMPLE, commits

from expgit.git.refs import FilesRefs, RefLockedError
from expgit.git.repo import GitRepo, RefMovedError, RefUpdate, TreeEntry
from expgit.init import init_repository


def git_in(path: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True)
    assert proc.returncode == 0 or not check, proc.stderr
    return proc.stdout.strip()


def lock_files(path: Path) -> list[Path]:
    return sorted(path.rglob("*.lock"))


def work_tree(path: Path) -> tuple[GitRepo, str]:
    """A seeded repository with a work tree at ``path`` (HEAD -> main): it and main."""
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo = GitRepo.discover(path)
    main = repo.ref("refs/heads/main")
    assert main is not None
    return repo, main


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, GitRepo]:
    path = tmp_path / "repo.git"
    return path, GitRepo.init(path, bare=True, branch="main")


def test_compare_and_swap_is_atomic(bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b, c = commits(repo, 3)
    repo.update_refs([RefUpdate("refs/heads/x", a, None), RefUpdate("refs/heads/y", a, None)],
                     "m")
    with pytest.raises(RefMovedError, match="refs/heads/y': is at"):  # y is not at b
        repo.update_refs([RefUpdate("refs/heads/x", b, a), RefUpdate("refs/heads/y", c, b)],
                         "m")
    assert git_in(path, "rev-parse", "x", "y").split() == [a, a]
    with pytest.raises(RefMovedError, match="already exists"):
        repo.update_refs([RefUpdate("refs/heads/x", b, None)], "m")
    with pytest.raises(RefMovedError, match="unable to resolve"):
        repo.update_refs([RefUpdate("refs/heads/nope", b, a)], "m")
    repo.update_refs([RefUpdate("refs/heads/x", b, a), RefUpdate("refs/expgit/z", c, None)],
                     "m")
    assert git_in(path, "for-each-ref", "--format=%(refname) %(objectname)").splitlines() \
        == [f"refs/expgit/z {c}", f"refs/heads/x {b}", f"refs/heads/y {a}"]
    assert lock_files(path) == []
    assert not (path / "logs").exists()  # a bare repository logs nothing by default


def test_a_held_lock_refuses_the_transaction_and_is_left_alone(
        bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    repo.update_refs([RefUpdate("refs/heads/x", a, None)], "m")
    stale = path / "refs" / "heads" / "x.lock"
    stale.write_text("left by a crashed process\n")
    with pytest.raises(RefLockedError) as caught:
        repo.update_refs([RefUpdate("refs/heads/new", b, None),
                          RefUpdate("refs/heads/x", b, a)], "m")
    assert caught.value.exit_code == 4  # a lock held, not a conflict
    assert caught.value.files == [str(stale)]
    assert str(stale) in caught.value.message and "expgit doctor" in (caught.value.hint or "")
    assert stale.read_text() == "left by a crashed process\n"  # not ours to remove
    assert lock_files(path) == [stale]  # the lock taken on refs/heads/new is gone
    assert git_in(path, "rev-parse", "x") == a
    assert git_in(path, "rev-parse", "--verify", "-q", "new", check=False) == ""
    stale.unlink()
    repo.update_refs([RefUpdate("refs/heads/x", b, a)], "m")
    assert git_in(path, "rev-parse", "x") == b


def test_packed_refs_are_compared_and_deleted(bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    repo.update_refs([RefUpdate("refs/heads/x", a, None)], "m")
    git_in(path, "pack-refs", "--all")
    assert not (path / "refs" / "heads" / "x").exists()
    assert repo.ref("refs/heads/x") == a
    with pytest.raises(RefMovedError, match="already exists"):
        repo.update_refs([RefUpdate("refs/heads/x", b, None)], "m")
    repo.update_refs([RefUpdate("refs/heads/x", b, a)], "m")
    assert repo.ref("refs/heads/x") == b
    git_in(path, "pack-refs", "--all")
    with pytest.raises(RefMovedError, match="is at"):
        repo.update_refs([RefUpdate("refs/heads/x", None, a)], "m")
    repo.update_refs([RefUpdate("refs/heads/x", None, b)], "m")
    assert repo.ref("refs/heads/x") is None and lock_files(path) == []


def test_deletions_with_moves_and_the_journal(tmp_path: Path) -> None:
    """Deleting refs and creating one in one transaction; the journal is told of the
    updates and of every lock file git takes (HEAD's too when the branch HEAD names
    moves) before git runs; a stale old value moves nothing."""
    repo, main = work_tree(tmp_path / "w")
    told: list[tuple[list[str], list[RefUpdate]]] = []

    def journal(files: list[str], updates: Sequence[RefUpdate]) -> None:
        told.append((files, list(updates)))
        assert all(not Path(f).exists() for f in files)  # before git takes them

    repo.set_ref_journal(journal)
    repo.update_refs([RefUpdate("refs/heads/expgit/proposals/p1", main, None),
                      RefUpdate("refs/heads/expgit/gradients/open/g1", main, None)], "made")
    with pytest.raises(RefMovedError, match="is at"):
        repo.update_refs([RefUpdate("refs/heads/expgit/proposals/p1", None, "1" * 40),
                          RefUpdate("refs/heads/expgit/applied/p1", main, None)], "stale")
    assert repo.ref("refs/heads/expgit/applied/p1") is None
    new = repo.write_commit(repo.read_commit(main).tree, [main], "next\n")
    updates = [RefUpdate("refs/heads/expgit/proposals/p1", None, main),
               RefUpdate("refs/heads/expgit/gradients/open/g1", None, main),
               RefUpdate("refs/heads/expgit/applied/p1", main, None),
               RefUpdate("refs/heads/main", new, main)]
    repo.update_refs(updates, "expgit apply p1")
    repo.set_ref_journal(None)
    git_dir = tmp_path / "w" / ".git"
    assert told[-1] == ([str(git_dir / "refs/heads/expgit/applied/p1.lock"),
                         str(git_dir / "refs/heads/expgit/gradients/open/g1.lock"),
                         str(git_dir / "refs/heads/expgit/proposals/p1.lock"),
                         str(git_dir / "refs/heads/main.lock"),
                         str(git_dir / "packed-refs.lock"), str(git_dir / "HEAD.lock")],
                        updates)
    assert len(told) == 3
    assert repo.refs("refs/heads/expgit/") == {"refs/heads/expgit/applied/p1": main}
    assert not (git_dir / "refs" / "heads" / "expgit" / "proposals").exists()
    assert lock_files(git_dir) == []
    repo.close()


def test_a_push_quarantine_leaves_refs_to_git(bare: tuple[Path, GitRepo],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path, repo = bare
    (first,) = commits(repo, 1)
    monkeypatch.setenv("GIT_QUARANTINE_PATH", str(path / "objects"))
    with pytest.raises(RefMovedError, match="quarantine"):  # git's own refusal
        repo.update_refs([RefUpdate("refs/heads/main", first, None)], "in a hook")
    assert TreeEntry("100644", "f", repo.write_blob(b"f\n")) in repo.read_tree(
        repo.read_commit(first).tree)
    assert lock_files(path) == []


def test_a_repository_logs_as_its_settings_say(tmp_path: Path) -> None:
    """A work tree logs branch moves (and HEAD's) with the message; a bare repository
    logs nothing until ``core.logAllRefUpdates=always``."""
    work = tmp_path / "work"
    repo, main = work_tree(work)
    (new,) = [repo.write_commit(repo.read_commit(main).tree, [main], "next\n")]
    repo.update_refs([RefUpdate("refs/heads/main", new, main),
                      RefUpdate("refs/expgit/other", new, None)], "expgit apply x")
    for ref in ("main", "HEAD"):
        assert git_in(work, "reflog", "show", "--format=%gs", "-1", ref) == "expgit apply x"
    assert not (work / ".git" / "logs" / "refs" / "expgit").exists()
    path = tmp_path / "repo.git"
    bare_repo = GitRepo.init(path, bare=True, branch="main")
    (first,) = commits(bare_repo, 1)
    bare_repo.update_refs([RefUpdate("refs/heads/main", first, None)], "unlogged")
    assert not (path / "logs").exists()
    git_in(path, "config", "core.logAllRefUpdates", "always")
    bare_repo.update_refs([RefUpdate("refs/expgit/x", first, None)], "always logged")
    assert git_in(path, "reflog", "show", "--format=%gs", "refs/expgit/x") == "always logged"
    for r in (repo, bare_repo):
        r.close()


def test_packed_refs_are_read_again_when_git_rewrites_them(bare: tuple[Path, GitRepo]
                                                           ) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    refs = FilesRefs(path)
    assert refs.packed() == {}
    git_in(path, "update-ref", "refs/heads/one", a)
    git_in(path, "pack-refs", "--all")
    assert refs.packed() == {"refs/heads/one": a}
    assert refs.packed() is refs.packed()  # kept while the file is the same
    git_in(path, "update-ref", "refs/heads/two", b)
    git_in(path, "pack-refs", "--all")  # a new file (renamed into place)
    assert refs.packed() == {"refs/heads/one": a, "refs/heads/two": b}
    assert refs.read("refs/heads/two") == b and refs.read("refs/heads/none") is None
    git_in(path, "update-ref", "-d", "refs/heads/one")
    assert refs.packed() == {"refs/heads/two": b}
