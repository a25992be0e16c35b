"""Git's NUL-terminated listings, parsed once (:mod:`expgit.git.zlist`), from real git."""

from __future__ import annotations

from pathlib import Path

from conftest import git

from expgit.git.repo import GitRepo
from expgit.git.zlist import ls_tree, raw_diff, shown_path

ODD = ["a\tb.md", 'q"uote.md', "new\nline.md", "back\\slash.md", "caf\u00e9.md", " lead.md"]


def test_listings_keep_every_path_as_the_tree_holds_it(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main", "r")
    repo = GitRepo.discover(tmp_path / "r")
    blob = repo.write_blob(b"x\n")
    old = repo.edit_tree(None, {"dir/keep.md": blob})
    new = repo.edit_tree(old, {f"dir/{name}": blob for name in ODD})
    listed = ls_tree(repo.run("ls-tree", "-r", "-z", new).stdout)
    assert sorted(e.path for e in listed) == sorted(["dir/keep.md", *(f"dir/{n}" for n in ODD)])
    assert {e.kind for e in listed} == {"blob"} and {e.sha for e in listed} == {blob}
    changed = raw_diff(repo.run("diff-tree", "-r", "-z", "--raw", old, new).stdout)
    assert sorted(c.path for c in changed) == sorted(f"dir/{n}" for n in ODD)
    assert {(c.status, c.old_sha, c.new_sha) for c in changed} == {("A", "0" * 40, blob)}


def test_shown_path_quotes_as_git_does() -> None:
    assert shown_path("experiences/plain-name.md") == "experiences/plain-name.md"
    assert shown_path("caf\u00e9") == "caf\u00e9"  # core.quotepath=off: UTF-8 as it is
    assert shown_path('a\tb"c\\d\ne') == '"a\\tb\\"c\\\\d\\ne"'
    assert shown_path("x\x1b]8;;http://e\x07\u009b") == '"x\\033]8;;http://e\\a\\302\\233"'
    assert shown_path(b"\xff".decode("utf-8", "surrogateescape")) == '"\\377"'
