"""Ref transactions written in process under git's lock files, checked against git:
compare-and-swap and atomicity, reflogs byte-identical to ``git update-ref -m``, a held
(stale) lock, packed refs, and what is left to git (deletions, symbolic refs, a ref in
the way, an object only a pack holds, a push quarantine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLE, commits

from expgit.git.refs import FilesRefs, RefLockedError
from expgit.git.reftx import RefWriter
from expgit.git.refwrite import FilesRefWriter, reflog_message
from expgit.git.repo import GitRepo, RefMovedError, RefUpdate, TreeEntry
from expgit.init import init_repository

IDENT = {"GIT_COMMITTER_NAME": "Ref Writer", "GIT_COMMITTER_EMAIL": "rw@example.invalid",
         "GIT_COMMITTER_DATE": "1700000100 -0700"}


def git_in(path: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True)
    assert proc.returncode == 0 or not check, proc.stderr
    return proc.stdout.strip()


class Writer:
    """A RefWriter on ``repo`` whose git fallback is recorded (``fallbacks``)."""

    def __init__(self, repo: GitRepo, path: Path, log_all: str = "false",
                 committer: Callable[[], str | None] | None = None) -> None:
        self.fallbacks: list[tuple[str, ...]] = []

        def run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
            self.fallbacks.append(args)
            return repo.run(*args, **kwargs)  # type: ignore[arg-type]

        self.writer = RefWriter(FilesRefWriter(FilesRefs(path), repo.git_dir,
                                               str(path / "objects")),
                                run, lambda: True, lambda: log_all,
                                committer or (lambda: repo._identities.known_line("COMMITTER")))

    def apply(self, updates: list[RefUpdate], message: str = "m") -> None:
        self.writer.apply(updates, message)


def work_tree(path: Path) -> tuple[GitRepo, str]:
    """A seeded repository with a work tree at ``path`` (HEAD -> main): it and main."""
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo = GitRepo.discover(path)
    main = repo.ref("refs/heads/main")
    assert main is not None
    return repo, main


def lock_files(path: Path) -> list[Path]:
    return sorted(path.rglob("*.lock"))


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, GitRepo]:
    path = tmp_path / "repo.git"
    return path, GitRepo.init(path, bare=True, branch="main")


def test_compare_and_swap_is_atomic(bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b, c = commits(repo, 3)
    w = Writer(repo, path)
    w.apply([RefUpdate("refs/heads/x", a, None), RefUpdate("refs/heads/y", a, None)])
    with pytest.raises(RefMovedError, match="refs/heads/y': is at"):  # y is not at b
        w.apply([RefUpdate("refs/heads/x", b, a), RefUpdate("refs/heads/y", c, b)])
    assert git_in(path, "rev-parse", "x", "y").split() == [a, a]
    with pytest.raises(RefMovedError, match="already exists"):
        w.apply([RefUpdate("refs/heads/x", b, None)])
    with pytest.raises(RefMovedError, match="unable to resolve"):
        w.apply([RefUpdate("refs/heads/nope", b, a)])
    w.apply([RefUpdate("refs/heads/x", b, a), RefUpdate("refs/expgit/z", c, None)])
    assert git_in(path, "for-each-ref", "--format=%(refname) %(objectname)").splitlines() \
        == [f"refs/expgit/z {c}", f"refs/heads/x {b}", f"refs/heads/y {a}"]
    assert w.fallbacks == [] and lock_files(path) == []  # all in process, no lock left
    assert not (path / "logs").exists()  # a bare repository logs nothing by default


def test_a_held_lock_refuses_the_transaction_and_is_left_alone(
        bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    w = Writer(repo, path)
    w.apply([RefUpdate("refs/heads/x", a, None)])
    stale = path / "refs" / "heads" / "x.lock"
    stale.write_text("left by a crashed process\n")
    other = path / "refs" / "heads" / "y.lock"
    other.write_text("")
    with pytest.raises(RefLockedError) as caught:
        w.apply([RefUpdate("refs/heads/new", b, None), RefUpdate("refs/heads/x", b, a),
                 RefUpdate("refs/heads/y", b, None)])
    assert caught.value.exit_code == 4  # a lock held, not a conflict
    assert caught.value.files == [str(stale), str(other)]  # every one in the way, named
    assert str(stale) in caught.value.message and "expgit doctor" in (caught.value.hint or "")
    other.unlink()
    assert stale.read_text() == "left by a crashed process\n"  # not ours to remove
    assert lock_files(path) == [stale]  # the lock taken on refs/heads/new is gone
    assert git_in(path, "rev-parse", "x") == a
    assert git_in(path, "rev-parse", "--verify", "-q", "new", check=False) == ""
    stale.unlink()
    w.apply([RefUpdate("refs/heads/x", b, a)])
    assert git_in(path, "rev-parse", "x") == b


def test_packed_refs_are_read_and_overridden_as_git_does(bare: tuple[Path, GitRepo]) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    w = Writer(repo, path)
    w.apply([RefUpdate("refs/heads/x", a, None)])
    git_in(path, "pack-refs", "--all")
    assert not (path / "refs" / "heads" / "x").exists()
    with pytest.raises(RefMovedError, match="already exists"):
        w.apply([RefUpdate("refs/heads/x", b, None)])
    w.apply([RefUpdate("refs/heads/x", b, a)])
    assert git_in(path, "rev-parse", "x") == b and w.fallbacks == []
    with pytest.raises(RefMovedError, match="'refs/heads/y' exists"):  # x only packed: git
        w.apply([RefUpdate("refs/heads/y", a, None)])
        git_in(path, "pack-refs", "--all")
        w.apply([RefUpdate("refs/heads/y/below", a, None)])
    assert [args[0] for args in w.fallbacks] == ["update-ref"]
    assert git_in(path, "rev-parse", "y") == a


@pytest.mark.parametrize("case", ["delete packed", "symref", "ref in the way", "folder in the way",
                                  "packed object", "no-op", "blob on a branch"])
def test_what_git_must_write_it_writes(bare: tuple[Path, GitRepo], case: str) -> None:
    path, repo = bare
    a, b = commits(repo, 2)
    w = Writer(repo, path)
    w.apply([RefUpdate("refs/heads/x", a, None)])
    refused = False
    if case == "delete packed":  # of a packed ref: packed-refs is rewritten
        git_in(path, "pack-refs", "--all")
        w.apply([RefUpdate("refs/heads/x", None, a)])
        assert git_in(path, "for-each-ref") == ""
    elif case == "symref":
        git_in(path, "symbolic-ref", "refs/heads/alias", "refs/heads/x")
        w.apply([RefUpdate("refs/heads/alias", b, a)])  # git moves what it points to
        assert git_in(path, "rev-parse", "x") == b
    elif case == "ref in the way":
        refused = True
        with pytest.raises(RefMovedError, match="refs/heads/x"):
            w.apply([RefUpdate("refs/heads/x/y", b, None)])
    elif case == "folder in the way":
        refused = True
        w.apply([RefUpdate("refs/heads/d/e", a, None)])
        with pytest.raises(RefMovedError, match="refs/heads/d"):
            w.apply([RefUpdate("refs/heads/d", b, None), RefUpdate("refs/heads/k", b, None)])
        assert git_in(path, "rev-parse", "--verify", "-q", "k", check=False) == ""
    elif case == "packed object":
        git_in(path, "update-ref", "refs/keep/b", b)
        git_in(path, "gc", "--quiet")  # b packed, its loose file gone
        w.apply([RefUpdate("refs/heads/x", b, a)])
        assert git_in(path, "rev-parse", "x") == b
    elif case == "no-op":
        w.apply([RefUpdate("refs/heads/x", a, a)])
        assert git_in(path, "rev-parse", "x") == a
    else:
        blob = repo.write_blob(b"not a commit\n")
        refused = True
        with pytest.raises(RefMovedError, match="non-commit"):
            w.apply([RefUpdate("refs/heads/x", blob, a)])
    assert [args[0] for args in w.fallbacks] == ["update-ref"]
    assert lock_files(path) == []
    if refused:
        assert git_in(path, "rev-parse", "x") == a


@pytest.mark.parametrize("log_all", ["true", "always"])
def test_reflogs_are_byte_identical_to_gits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            log_all: str) -> None:
    """A work tree (HEAD -> main, reflogs on): the same moves by expgit and by git write
    the same bytes to logs/HEAD, logs/refs/heads/* and, with ``always``, other refs."""
    for key, value in IDENT.items():
        monkeypatch.setenv(key, value)
    mine = tmp_path / "mine"
    init_repository(mine, seed=EXAMPLE, layout="flat")
    git_in(mine, "config", "core.logAllRefUpdates", log_all)
    theirs = tmp_path / "theirs"
    shutil.copytree(mine, theirs)
    repo = GitRepo.discover(mine)
    main = repo.ref("refs/heads/main")
    assert main is not None
    tree = repo.read_commit(main).tree
    new = repo.write_commit(tree, [main], "next\n")
    side = repo.write_commit(tree, [], "side\n")
    for sha in (new, side):  # the same objects in the copy
        raw = (mine / ".git" / "objects" / sha[:2] / sha[2:]).read_bytes()
        (theirs / ".git" / "objects" / sha[:2]).mkdir(exist_ok=True)
        (theirs / ".git" / "objects" / sha[:2] / sha[2:]).write_bytes(raw)
    message = "  expgit apply\n\nproposal  x\t y \n"
    w = Writer(repo, mine / ".git", log_all)
    w.apply([RefUpdate("refs/heads/main", new, main), RefUpdate("refs/heads/side", side, None),
             RefUpdate("refs/expgit/other", side, None)], message)
    assert w.fallbacks == []
    subprocess.run(["git", "update-ref", "-m", message, "--stdin"], cwd=theirs, check=True,
                   input=(f"update refs/heads/main {new} {main}\n"
                          f"update refs/heads/side {side} {'0' * 40}\n"
                          f"update refs/expgit/other {side} {'0' * 40}\n").encode())
    logs = ["HEAD", "refs/heads/main", "refs/heads/side", "refs/expgit/other"]
    for log in logs:
        git_file = theirs / ".git" / "logs" / log
        ours = mine / ".git" / "logs" / log
        assert ours.exists() == git_file.exists(), log
        if git_file.exists():
            assert ours.read_bytes() == git_file.read_bytes(), log
    assert (mine / ".git" / "logs" / "refs" / "expgit" / "other").exists() == \
        (log_all == "always")
    assert git_in(mine, "reflog", "show", "--format=%gs", "-1", "main") == \
        reflog_message(message) == "expgit apply proposal x y"
    assert lock_files(mine / ".git") == []
    repo.close()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_deletions_leave_what_git_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """Deleting loose refs (with reflogs) and moving others in one transaction: the same
    refs, reflogs and folders as ``git update-ref``; a stale old value moves nothing."""
    for key, value in IDENT.items():
        monkeypatch.setenv(key, value)
    mine = tmp_path / "mine"
    repo, main = work_tree(mine)
    w = Writer(repo, mine / ".git", "true")
    w.apply([RefUpdate("refs/heads/expgit/proposals/p1", main, None),
             RefUpdate("refs/heads/expgit/gradients/open/g1", main, None),
             RefUpdate("refs/heads/expgit/gradients/open/g2", main, None)], "made")
    theirs = tmp_path / "theirs"
    shutil.copytree(mine, theirs)
    with pytest.raises(RefMovedError, match="is at"):
        w.apply([RefUpdate("refs/heads/expgit/proposals/p1", None, "1" * 40),
                 RefUpdate("refs/heads/expgit/applied/p1", main, None)], "stale")
    assert git_in(mine, "for-each-ref") == git_in(theirs, "for-each-ref")  # (and like
    # git, the folders made for the locks stay)
    updates = [RefUpdate("refs/heads/expgit/proposals/p1", None, main),
               RefUpdate("refs/heads/expgit/gradients/open/g1", None, main),
               RefUpdate("refs/heads/expgit/applied/p1", main, None)]
    w.apply(updates, "expgit apply p1")
    subprocess.run(["git", "update-ref", "-m", "expgit apply p1", "--stdin"], cwd=theirs,
                   check=True, input="".join(
                       f"delete {u.ref} {u.old}\n" if u.new is None
                       else f"update {u.ref} {u.new} {'0' * 40}\n" for u in updates).encode())
    assert w.fallbacks == []
    for folder in ("refs", "logs"):
        assert listing(mine / ".git" / folder) == listing(theirs / ".git" / folder), folder
    assert "refs/heads/expgit/proposals" not in listing(mine / ".git" / "refs")
    assert (mine / ".git" / "logs" / "refs" / "heads" / "expgit" / "applied" / "p1"
            ).read_bytes() == (theirs / ".git" / "logs" / "refs" / "heads" / "expgit" /
                               "applied" / "p1").read_bytes()
    repo.close()


def test_deleting_the_branch_head_names_is_left_to_git(tmp_path: Path) -> None:
    path = tmp_path / "work"
    repo, main = work_tree(path)
    w = Writer(repo, path / ".git", "true")
    w.apply([RefUpdate("refs/heads/main", None, main)], "gone")
    assert [args[0] for args in w.fallbacks] == ["update-ref"]
    assert repo.ref("refs/heads/main") is None
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


def test_no_identity_leaves_the_reflog_to_git(tmp_path: Path) -> None:
    path = tmp_path / "work"
    repo, main = work_tree(path)
    (new,) = [repo.write_commit(repo.read_commit(main).tree, [main], "n\n")]
    calls: list[str] = []

    def unknown() -> str | None:
        calls.append("asked")
        return None

    w = Writer(repo, path / ".git", "true", committer=unknown)
    w.apply([RefUpdate("refs/heads/main", new, main)], "by git")
    assert calls == ["asked"] and [a[0] for a in w.fallbacks] == ["update-ref"]
    assert git_in(path, "reflog", "show", "--format=%gs", "-1", "main") == "by git"
    assert os.listdir(path / ".git" / "refs" / "heads") == ["main"]
    repo.close()





def test_a_repository_logs_as_its_settings_say(tmp_path: Path) -> None:
    """Through GitRepo: a work tree logs branch moves (and HEAD's) with the message; a
    bare repository logs nothing until ``core.logAllRefUpdates=always``."""
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
    logged = GitRepo.discover(path)  # configuration is read when a repository is opened
    logged.update_refs([RefUpdate("refs/expgit/x", first, None)], "always logged")
    assert git_in(path, "reflog", "show", "--format=%gs", "refs/expgit/x") == "always logged"
    for r in (repo, bare_repo, logged):
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
