"""What a commit changed under the experiences root, as reviewable unified diffs.

Diffs are made with difflib and counted with unidiff, so the +/- figures in a proposal's
description are exactly those of the diff a reviewer reads.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import click
from unidiff.patch import PatchSet

from expgit.git.repo import GitRepo
from expgit.store.format.layout import Layout
from expgit.store.format.moves import layout_at, settings_blob
from expgit.store.format.settings import SETTINGS_FILE

Operation = Literal["create", "update", "delete", "rename"]


@dataclass(frozen=True)
class FileChange:
    name: str
    path: str
    old_blob: str | None
    new_blob: str | None
    old_text: str
    new_text: str
    # a layout move (:mod:`expgit.store.format.moves`): the path the file had before, which
    # the change removes; None: the same path
    old_path: str | None = None

    @property
    def operation(self) -> Operation:
        if self.old_path is not None:
            return "rename"
        if self.old_blob is None:
            return "create"
        return "delete" if self.new_blob is None else "update"

    @property
    def before(self) -> dict[str, str | None]:
        """``{path: blob}`` the tree held before the change (None: no file there)."""
        if self.old_path is None:
            return {self.path: self.old_blob}
        return {self.old_path: self.old_blob, self.path: None}

    @property
    def after(self) -> dict[str, str | None]:
        """``{path: blob}`` the change leaves (None: no file there)."""
        if self.old_path is None:
            return {self.path: self.new_blob}
        return {self.old_path: None, self.path: self.new_blob}

    @cached_property
    def diff(self) -> str:
        return unified_diff(self.path, self.old_text if self.old_blob else None,
                            self.new_text if self.new_blob else None, self.old_path)

    @cached_property
    def counts(self) -> tuple[int, int]:
        """(added, removed) lines, counted by unidiff on :attr:`diff`."""
        if not self.diff:
            return (0, 0)
        patch = PatchSet(self.diff)
        return (sum(f.added for f in patch), sum(f.removed for f in patch))

    @cached_property
    def body_loss(self) -> BodyLoss | None:
        """The lines of the body an update removes (None for a create or a delete)."""
        if self.operation not in ("update", "rename") or self.path == SETTINGS_FILE:
            return None
        return body_loss(self.old_text, self.new_text)


@dataclass(frozen=True)
class BodyLoss:
    """How many of the ``total`` non-blank lines of an experience's body an update
    removes: lines of the old body found nowhere in the new one (spaces aside)."""

    removed: int
    total: int

    @property
    def collapses(self) -> bool:
        """Whether the update removes half the body or more, from a body of at least
        :data:`COLLAPSE_MIN_LINES` lines (ACE's "context collapse": a rule rewritten as
        one sentence)."""
        return self.total >= COLLAPSE_MIN_LINES and 2 * self.removed >= self.total

    def __str__(self) -> str:
        return f"removes {self.removed} of {self.total} lines of its body"


COLLAPSE_MIN_LINES = 3  # a one- or two-line body may be reworded whole


def body_lines(text: str) -> list[str]:
    """The non-blank lines of an experience file's body (after its front matter, the
    whole text if it has none), each with its runs of spaces made one."""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 3)
        text = text[end + 5:] if end >= 0 else text
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def body_loss(old: str, new: str) -> BodyLoss:
    """The body lines of ``old`` that ``new`` no longer holds (each line of ``new``
    accounts for one equal line of ``old``)."""
    before, after = body_lines(old), Counter(body_lines(new))
    removed = 0
    for line in before:
        if after[line] > 0:
            after[line] -= 1
        else:
            removed += 1
    return BodyLoss(removed, len(before))


def unified_diff(path: str, old: str | None, new: str | None,
                 old_path: str | None = None) -> str:
    """A unified diff of one file; ``old_path``: it was renamed from there (the header
    names both paths, as ``git diff -M`` does)."""
    old_lines = (old or "").splitlines(keepends=True)
    new_lines = (new or "").splitlines(keepends=True)
    lines = list(difflib.unified_diff(
        old_lines, new_lines,
        fromfile=f"a/{old_path or path}" if old is not None else "/dev/null",
        tofile=f"b/{path}" if new is not None else "/dev/null"))
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def colour_diff(diff: str) -> str:
    styled = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            styled.append(click.style(line, bold=True))
        elif line.startswith("@@"):
            styled.append(click.style(line, fg="cyan"))
        elif line.startswith("+"):
            styled.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            styled.append(click.style(line, fg="red"))
        else:
            styled.append(line)
    return "\n".join(styled)


def path_blobs(git: GitRepo, commit: str | None, paths: Iterable[str]) -> dict[str, str]:
    """``{path: blob}`` of those of ``paths`` that are files at ``commit``."""
    if commit is None:
        return {}
    tree = git.read_commit(commit).tree
    found = {}
    for path in paths:
        entry = git.path_entry(tree, path)
        if entry is not None and not entry.is_tree:
            found[path] = entry.sha
    return found


def _changed_files(git: GitRepo, old: str | None, new: str | None, prefix: str,
                   depth: int) -> Iterator[tuple[str, str | None, str | None]]:
    """``(path, old blob, new blob)`` of the files that differ between two trees, down
    to ``depth`` folders below them (a symlink or gitlink counts as a file)."""
    for before, after in git.diff_trees(old, new):
        old_sub = before.sha if before is not None and before.is_tree else None
        new_sub = after.sha if after is not None and after.is_tree else None
        if depth > 0 and (old_sub or new_sub):
            name = (before if old_sub else after).name  # type: ignore[union-attr]
            yield from _changed_files(git, old_sub, new_sub, f"{prefix}{name}/", depth - 1)
        old_blob = before.sha if before is not None and not before.is_tree else None
        new_blob = after.sha if after is not None and not after.is_tree else None
        if old_blob != new_blob:
            yield prefix + (before or after).name, old_blob, new_blob  # type: ignore[union-attr]


def tree_changes(git: GitRepo, old: str | None, new: str, layout: Layout
                 ) -> list[FileChange]:
    """Changed experience files under the root from commit ``old`` to commit ``new``, from
    the tree entries that differ (git's sorted trees are compared in step), so loading a
    gradient or proposal stays cheap in a large repository. In the skills layout every
    file of a changed skill folder is listed (SKILL.md first), each with its skill's
    name: an asset is reviewed, applied and reverted with its skill.

    A commit whose ``expgit.toml`` changes the layout (a migration) lists each experience
    it moved as one rename (old file, new file, each under its own commit's layout), the
    experiences on one side only as deletes or creates, and ``expgit.toml`` itself."""
    old_settings, new_settings = settings_blob(git, old), settings_blob(git, new)
    if old is not None and old_settings != new_settings:
        before, after = layout_at(git, old, layout), layout_at(git, new, layout)
        if before != after:
            return _moved(git, old, new, before, after, old_settings, new_settings)
    return _layout_changes(git, old, new, layout)


def _moved(git: GitRepo, old: str, new: str, before: Layout, after: Layout,
           old_settings: str | None, new_settings: str | None) -> list[FileChange]:
    old_side = _layout_changes(git, old, new, before)
    gone = {c.name: c for c in old_side
            if c.operation == "delete" and before.name_of(c.path) is not None}
    found: list[FileChange] = []
    for change in _layout_changes(git, old, new, after):
        source = gone.get(change.name) if change.operation == "create" \
            and after.name_of(change.path) is not None else None
        if source is None:
            found.append(change)
            continue
        del gone[change.name]
        found.append(FileChange(change.name, change.path, source.old_blob, change.new_blob,
                                source.old_text, change.new_text, source.path))
    found += [c for c in old_side if c.operation != "delete" or c.name in gone]
    blobs = git.read_blobs([b for b in (old_settings, new_settings) if b])
    found.append(FileChange(
        SETTINGS_FILE, SETTINGS_FILE, old_settings, new_settings,
        blobs[old_settings].decode("utf-8", "replace") if old_settings else "",
        blobs[new_settings].decode("utf-8", "replace") if new_settings else ""))
    return sorted(found, key=lambda c: (c.name == SETTINGS_FILE, c.name, c.path))


def _layout_changes(git: GitRepo, old: str | None, new: str, layout: Layout
                    ) -> list[FileChange]:

    def root_tree(commit: str | None) -> str | None:
        if commit is None:
            return None
        entry = git.path_entry(git.read_commit(commit).tree, layout.root)
        return entry.sha if entry is not None and entry.is_tree else None

    depth = 64 if layout.skills else 0
    found = []
    for path, before, after in _changed_files(git, root_tree(old), root_tree(new),
                                              layout.root + "/", depth):
        name = layout.owner_of(path)
        if name is not None and before != after:
            found.append((name, layout.name_of(path) is None, path, before, after))
    found.sort()
    blobs = git.read_blobs([b for *_, before, after in found for b in (before, after) if b])
    return [FileChange(
        name=name, path=path, old_blob=before, new_blob=after,
        old_text=blobs[before].decode("utf-8", "replace") if before else "",
        new_text=blobs[after].decode("utf-8", "replace") if after else "",
    ) for name, _, path, before, after in found]
