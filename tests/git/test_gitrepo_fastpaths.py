"""The process-free paths of GitRepo checked against git itself: objects written in
process (byte-identical ids to ``hash-object``/``mktree``/``commit-tree``), identities,
loose objects read from their files, threads racing by compare-and-swap (the ref
transactions themselves: test_reftx.py)."""

from __future__ import annotations

import os
import random
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import EXAMPLE, fsck

from expgit.errors import GitError
from expgit.git.repo import EMPTY_TREE, GitRepo, RefMovedError, RefUpdate
from expgit.init import init_repository

DATES = {"GIT_AUTHOR_DATE": "1700000000 +0130", "GIT_COMMITTER_DATE": "1700000100 -0700"}


def bare(tmp_path: Path) -> tuple[Path, GitRepo]:
    path = tmp_path / "repo.git"
    return path, GitRepo.init(path, bare=True, branch="main")


def git_in(path: Path, *args: str, input: bytes | None = None,
           env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=path, input=input, capture_output=True,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


# ----------------------------------------------------------------- objects
@pytest.mark.parametrize("message", ["subject\n", "subject\n\nbody über alles ✓\n\nKey: v\n",
                                     "no newline at the end", "nul \0 inside\n",
                                     "non-character \ufdd0 and \U0001fffe\n"])
def test_objects_written_in_process_have_gits_ids(tmp_path: Path, message: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DATES.items():
        monkeypatch.setenv(name, value)
    path, repo = bare(tmp_path)
    blob = repo.write_blob(b"hello\n")
    assert blob == git_in(path, "hash-object", "--stdin", input=b"hello\n")
    tree = repo.edit_tree(None, {"dir/a.md": blob, "b.md": blob})
    listing = git_in(path, "ls-tree", tree).encode() + b"\n"
    assert tree == git_in(path, "mktree", input=listing)
    if "\0" in message:  # git refuses it; expgit lets git write it, and fails alike
        with pytest.raises(GitError, match="NUL"):
            repo.write_commit(tree, [], message)
        return
    first = repo.write_commit(tree, [], message)
    body = message if message.endswith("\n") else message + "\n"
    assert first == git_in(path, "commit-tree", tree, input=body.encode())
    second = repo.write_commit(EMPTY_TREE, [first], message)
    assert second == git_in(path, "commit-tree", "-p", first, EMPTY_TREE, input=body.encode())
    info = repo.read_commit(second)
    assert info.parents == (first,) and info.tree == EMPTY_TREE
    assert info.author == "Test Author <author@example.com>"
    repo.update_refs([RefUpdate("refs/heads/main", second, None)], "test")
    fsck(path)


def test_loose_objects_are_whole_files_written_once_and_freshened(tmp_path: Path) -> None:
    """Objects written in process are files git reads; an object written again stays one
    file and is freshened (its time, which ``git gc`` prunes by); no temporary file is
    left."""
    path, repo = bare(tmp_path)
    data = os.urandom(3000)
    blob = repo.write_blob(data)
    stored = path / "objects" / blob[:2] / blob[2:]
    os.utime(stored, (1_000_000_000, 1_000_000_000))  # an old unreachable copy
    assert repo.write_blob(data) == blob  # again: freshened, not a second file
    assert stored.stat().st_mtime > 1_000_000_000
    files_in_tree = {"a": blob, "d/b": repo.write_blob(b"b\n")}
    tree = repo.edit_tree(None, files_in_tree)
    assert repo.edit_tree(None, files_in_tree) == tree  # a tree written again
    commit = repo.write_commit(tree, [], "m\n")
    repo.update_refs([RefUpdate("refs/heads/main", commit, None)], "test")
    assert subprocess.run(["git", "cat-file", "blob", blob], cwd=path, capture_output=True,
                          check=True).stdout == data
    assert git_in(path, "ls-tree", "-r", "--name-only", "main").split() == ["a", "d/b"]
    files = [p for p in (path / "objects").rglob("*") if p.is_file()]
    assert len(files) == 5  # blob a, blob b, two trees, the commit: no temporary file
    assert all(oct(p.stat().st_mode & 0o777) == oct(0o444 & ~_umask()) for p in files)
    fsck(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_identity_and_time_are_gits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, repo = bare(tmp_path)
    tree = repo.edit_tree(None, {"a": repo.write_blob(b"a\n")})
    before = int(git_in(path, "var", "GIT_COMMITTER_IDENT").rsplit(" ", 2)[1])
    info = repo.read_commit(repo.write_commit(tree, [], "m\n"))
    after = int(git_in(path, "var", "GIT_COMMITTER_IDENT").rsplit(" ", 2)[1])
    assert info.author == "Test Author <author@example.com>"
    assert info.committer == "Test Committer <committer@example.com>"
    assert before <= info.author_time <= after and before <= info.commit_time <= after
    assert info.author_line.rsplit(" ", 1)[1] == \
        git_in(path, "var", "GIT_AUTHOR_IDENT").rsplit(" ", 1)[1]  # the same UTC offset
    # a changed environment is seen at once; configuration is read for it
    monkeypatch.delenv("GIT_AUTHOR_NAME")
    monkeypatch.delenv("GIT_AUTHOR_EMAIL")
    git_in(path, "config", "user.name", "Configured Name")
    git_in(path, "config", "user.email", "configured@example.com")
    info = repo.read_commit(repo.write_commit(tree, [], "again\n"))
    assert info.author == "Configured Name <configured@example.com>"
    assert info.committer == "Test Committer <committer@example.com>"


def test_a_missing_tree_or_parent_is_refused(tmp_path: Path) -> None:
    _path, repo = bare(tmp_path)
    tree = repo.edit_tree(None, {"a": repo.write_blob(b"a\n")})
    with pytest.raises(GitError):
        repo.write_commit("1" * 40, [], "m")
    with pytest.raises(GitError):
        repo.write_commit(tree, ["2" * 40], "m")
    with pytest.raises(GitError):  # a tree is not a commit
        repo.write_commit(tree, [tree], "m")


def test_loose_and_packed_objects_read_alike(tmp_path: Path) -> None:
    path = tmp_path / "seeded.git"
    init_repository(path, bare=True, seed=EXAMPLE, layout="flat")
    repo = GitRepo.discover(path)
    main = repo.ref("refs/heads/main")
    assert main is not None
    loose = repo.read_commit(main)
    blobs = {e.sha: repo.read_blob(e.sha) for e in repo.read_tree(
        repo.tree_index(loose.tree)["experiences"].sha)}
    git_in(path, "gc", "--quiet")  # everything packed, the loose files gone
    assert not any((path / "objects" / main[:2]).glob(main[2:]))
    fresh = GitRepo.discover(path)
    assert fresh.read_commit(main) == loose
    assert {sha: fresh.read_blob(sha) for sha in blobs} == blobs
    assert all(blobs[sha] == subprocess.run(["git", "cat-file", "blob", sha], cwd=path,
                                            capture_output=True, check=True).stdout
               for sha in blobs)
    fresh.close()
    repo.close()


# -------------------------------------------------------------------- refs
def test_threads_race_by_compare_and_swap(tmp_path: Path) -> None:
    """Eight threads increment one ref by CAS: every increment lands exactly once."""
    path, repo = bare(tmp_path)
    tree = repo.edit_tree(None, {"f": repo.write_blob(b"f\n")})
    repo.update_refs([RefUpdate("refs/heads/n", repo.write_commit(tree, [], "0\n"), None)],
                     "start")
    errors: list[BaseException] = []

    def bump(t: int) -> None:
        try:
            for i in range(10):
                while True:
                    tip = repo.ref("refs/heads/n")
                    new = repo.write_commit(tree, [tip] if tip else [], f"t{t} i{i}\n")
                    try:
                        repo.update_refs([RefUpdate("refs/heads/n", new, tip)], "bump")
                        break
                    except RefMovedError:
                        continue
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=bump, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert int(git_in(path, "rev-list", "--count", "n")) == 81
    fsck(path)
    repo.close()


@pytest.mark.parametrize("seed", [3, 4])
def test_differences_known_from_an_edit_are_those_git_trees_show(tmp_path: Path,
                                                                 seed: int) -> None:
    """edit_tree keeps what it changed (each level) for diff_trees: the same pairs as
    comparing the two trees entry by entry, tree/file switches included."""
    rng = random.Random(seed)
    path, repo = bare(tmp_path)
    blobs = [repo.write_blob(f"blob {i}\n".encode()) for i in range(3)]
    names = ["a", "a.md", "a-b", "a0", "b", "z"]
    tree = repo.edit_tree(None, {"a.md": blobs[0], "a/x": blobs[1], "b": blobs[2]})
    for _ in range(60):
        changes: dict[str, str | None] = {}
        for _ in range(rng.randint(1, 4)):
            target = "/".join(rng.choice(names) for _ in range(rng.randint(1, 2)))
            if not any(p == target or p.startswith(target + "/") or target.startswith(p + "/")
                       for p in changes):
                changes[target] = None if rng.random() < 0.3 else rng.choice(blobs)
        new = repo.edit_tree(tree, changes)
        fresh = GitRepo.discover(path)
        for old_sub, new_sub in [(tree, new), *(
                (b.sha if b and b.is_tree else None, a.sha if a and a.is_tree else None)
                for b, a in fresh.diff_trees(tree, new))]:
            if old_sub and new_sub:
                assert repo.diff_trees(old_sub, new_sub) == fresh.diff_trees(old_sub, new_sub)
        fresh.close()
        tree = new
    repo.close()
