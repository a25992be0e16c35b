"""What a commit changed under the experiences root, as reviewable unified diffs.

Diffs are made with difflib and counted with unidiff, so the +/- figures in a proposal's
description are exactly those of the diff a reviewer reads.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import click
from unidiff.patch import PatchSet

from expgit.git.repo import GitRepo

Operation = Literal["create", "update", "delete"]


@dataclass(frozen=True)
class FileChange:
    name: str
    path: str
    old_blob: str | None
    new_blob: str | None
    old_text: str
    new_text: str

    @property
    def operation(self) -> Operation:
        if self.old_blob is None:
            return "create"
        return "delete" if self.new_blob is None else "update"

    @cached_property
    def diff(self) -> str:
        return unified_diff(self.path, self.old_text if self.old_blob else None,
                            self.new_text if self.new_blob else None)

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
        if self.operation != "update":
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


def unified_diff(path: str, old: str | None, new: str | None) -> str:
    old_lines = (old or "").splitlines(keepends=True)
    new_lines = (new or "").splitlines(keepends=True)
    lines = list(difflib.unified_diff(
        old_lines, new_lines,
        fromfile=f"a/{path}" if old is not None else "/dev/null",
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


def root_blobs(git: GitRepo, commit: str | None, root: str) -> dict[str, str]:
    """``{file name: blob}`` of the experiences root at ``commit`` (empty if none)."""
    if commit is None:
        return {}
    entry = git.path_entry(git.read_commit(commit).tree, root)
    if entry is None or not entry.is_tree:
        return {}
    return {e.name: e.sha for e in git.read_tree(entry.sha) if not e.is_tree}


def tree_changes(git: GitRepo, old: str | None, new: str, root: str) -> list[FileChange]:
    """Changed ``<name>.md`` files under ``root`` from commit ``old`` to commit ``new``,
    from the tree entries that differ (git's sorted trees are compared in step), so
    loading a gradient or proposal stays cheap in a large repository."""

    def root_tree(commit: str | None) -> str | None:
        if commit is None:
            return None
        entry = git.path_entry(git.read_commit(commit).tree, root)
        return entry.sha if entry is not None and entry.is_tree else None

    before: dict[str, str] = {}
    after: dict[str, str] = {}
    for old_entry, new_entry in git.diff_trees(root_tree(old), root_tree(new)):
        if old_entry is not None and not old_entry.is_tree:
            before[old_entry.name] = old_entry.sha
        if new_entry is not None and not new_entry.is_tree:
            after[new_entry.name] = new_entry.sha
    names = sorted(n for n in before.keys() | after.keys()
                   if before.get(n) != after.get(n) and n.endswith(".md")
                   and not n.startswith("."))
    blobs = git.read_blobs([b for n in names for b in (before.get(n), after.get(n)) if b])
    return [FileChange(
        name=n[:-3], path=f"{root}/{n}", old_blob=before.get(n), new_blob=after.get(n),
        old_text=blobs[before[n]].decode("utf-8", "replace") if n in before else "",
        new_text=blobs[after[n]].decode("utf-8", "replace") if n in after else "",
    ) for n in names]
