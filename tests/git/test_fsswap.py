"""Swapping two files in one step, and ref moves that use it: over an existing ref file
the lock is swapped in and removed; where the file system refuses, refs move by rename."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

import pytest
from conftest import commits, git

from expgit.git import fsswap
from expgit.git import refwrite as gitrefwrite
from expgit.git.repo import GitRepo, RefUpdate

linux_only = pytest.mark.skipif(fsswap._renameat2 is None,
                                reason="renameat2 is Linux's (glibc >= 2.28)")


@linux_only
def test_swap_exchanges_two_files(tmp_path: Path) -> None:
    first, second = tmp_path / "a.lock", tmp_path / "a"
    first.write_text("new\n")
    second.write_text("old\n")
    inode = first.stat().st_ino
    assert fsswap.swap(str(first), str(second)) is True
    assert (second.read_text(), first.read_text()) == ("new\n", "old\n")
    assert second.stat().st_ino == inode  # the names moved, not the bytes


@linux_only
def test_a_missing_name_raises_and_changes_nothing(tmp_path: Path) -> None:
    present = tmp_path / "present"
    present.write_text("x\n")
    with pytest.raises(OSError) as caught:
        fsswap.swap(str(tmp_path / "absent"), str(present))
    assert caught.value.errno == errno.ENOENT
    assert present.read_text() == "x\n" and not (tmp_path / "absent").exists()


def test_a_refusing_file_system_is_remembered(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def refuse(_dir1: int, first: bytes, _dir2: int, second: bytes, _flags: int) -> int:
        calls.append(second)
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(fsswap, "_renameat2", refuse)
    monkeypatch.setattr(fsswap, "_refused", set())
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("a\n")
    b.write_text("b\n")
    assert fsswap.swap(str(a), str(b)) is False
    assert fsswap.swap(str(a), str(b)) is False  # not asked again for this folder
    assert len(calls) == 1 and (a.read_text(), b.read_text()) == ("a\n", "b\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_moving_an_existing_ref_swaps_in_the_lock(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "repo.git"
    repo = GitRepo.init(path, bare=True, branch="main")
    a, b, c = commits(repo, 3)
    swapped: list[tuple[str, str]] = []
    real = fsswap.swap

    def spy(first: str, second: str) -> bool:
        swapped.append((os.path.relpath(first, path), os.path.relpath(second, path)))
        return real(first, second)

    monkeypatch.setattr(gitrefwrite, "swap", spy)
    repo.update_refs([RefUpdate("refs/heads/x", a, None)], "create")
    assert swapped == []  # a new ref file: renamed into place
    repo.update_refs([RefUpdate("refs/heads/x", b, a)], "move")
    assert swapped == [("refs/heads/x.lock", "refs/heads/x")]
    assert git(path, "rev-parse", "x").strip() == b
    assert sorted(p.name for p in (path / "refs" / "heads").iterdir()) == ["x"]  # no lock
    monkeypatch.setattr(gitrefwrite, "swap", lambda first, second: False)  # refused
    repo.update_refs([RefUpdate("refs/heads/x", c, b)], "move again")
    assert git(path, "rev-parse", "x").strip() == c
    assert sorted(p.name for p in (path / "refs" / "heads").iterdir()) == ["x"]
    assert git(path, "fsck", "--strict", "--no-progress") == ""
