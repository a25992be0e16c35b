"""What a writer killed while holding the expgit lock leaves behind, and clearing it.

The holder records each ref transaction in its lock record before the transaction takes
its first lock file: the ``<ref>.lock``, ``HEAD.lock`` and ``packed-refs.lock`` files it
may create, and the updates (ref, old, new). A single ``pwrite`` of the whole record
(padded with spaces to at least its previous length, which JSON ignores) replaces the
last one, so the record is always whole for a process that dies between system calls.

Whoever finds that lock stale (its process gone) calls :func:`recover` before removing
it, and so the next command recovers without a human:

* the recorded lock files that exist are the dead writer's: they are removed, and only
  they (a lock file no record names belongs to a running git, and is never touched). The
  record is a file anyone who can write the git dir may have written, so only the names
  a ref transaction makes are taken from it (:func:`expgit.git.refs.own_lock_file`:
  ``<ref>.lock`` under ``refs/``, ``packed-refs.lock``, ``HEAD.lock``, inside the git
  dir, through no symbolic link); any other path is left alone, with a warning;
* the transaction is finished when any of its updates was already installed (the writer
  had checked every one under its lock, so the rest is what it was about to do),
  compare-and-swap from each ref's recorded old value; when none was installed, nothing
  moved and nothing is to undo;
* a clean working tree that has a moved branch checked out is brought up to it, exactly
  as the writer would have done (a dirty one is left alone, with a warning).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from expgit.errors import ExpgitError
from expgit.git.refs import own_lock_file
from expgit.git.repo import GitRepo, RefUpdate
from expgit.git.worktrees import sync_worktrees
from expgit.git.zlist import shown_path


class LockJournal:
    """The holder's side: rewrites its own lock record through an open descriptor (a
    lock taken over as stale meanwhile is another file: this one writes its own)."""

    def __init__(self, fd: int, record: dict[str, object], size: int) -> None:
        self._fd = fd
        self._record = record
        self._size = size

    @classmethod
    def open(cls, path: Path, record: dict[str, object], size: int) -> LockJournal:
        return cls(os.open(path, os.O_WRONLY), dict(record), size)

    def write(self, lock_files: list[str], updates: Sequence[RefUpdate]) -> None:
        record = {**self._record, "ref_locks": lock_files,
                  "updates": [[u.ref, u.old, u.new] for u in updates]}
        data = json.dumps(record).encode()
        data += b" " * (self._size - len(data))
        os.pwrite(self._fd, data, 0)
        self._size = len(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


@dataclass
class Recovery:
    holder: dict[str, object]
    removed: list[str] = field(default_factory=list)  # lock files of the dead writer
    finished: list[str] = field(default_factory=list)  # refs moved to finish its update
    synced: list[str] = field(default_factory=list)  # branches whose working tree caught up
    warnings: list[str] = field(default_factory=list)

    @property
    def did_something(self) -> bool:
        return bool(self.removed or self.finished or self.synced or self.warnings)

    def summary(self) -> str:
        parts = []
        if self.removed:
            parts.append(f"removed {len(self.removed)} ref lock file"
                         f"{'s' if len(self.removed) != 1 else ''} it left")
        if self.finished:
            parts.append(f"finished its update of {', '.join(self.finished)}")
        if self.synced:
            parts.append(f"brought the working tree up to {', '.join(self.synced)}")
        what = "; ".join(parts) or "nothing to clear"
        return f"recovered from a crashed writer (pid {self.holder.get('pid')}" + (
            f", {self.holder['purpose']}" if self.holder.get("purpose") else "") + f"): {what}"


def _recorded(holder: dict[str, object]) -> tuple[list[str], list[tuple[str, str | None,
                                                                         str | None]]]:
    locks = holder.get("ref_locks")
    updates = holder.get("updates")
    files = [p for p in locks if isinstance(p, str) and p.endswith(".lock")] \
        if isinstance(locks, list) else []
    rows: list[tuple[str, str | None, str | None]] = []
    for row in updates if isinstance(updates, list) else []:
        if (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                and all(v is None or isinstance(v, str) for v in row[1:])):
            rows.append((row[0], row[1], row[2]))
    return files, rows


def pending_of(git: GitRepo, holder: dict[str, object]
               ) -> tuple[list[str], list[RefUpdate], list[RefUpdate]]:
    """What a dead holder left: (its lock files that exist, its installed updates, the
    updates still to finish)."""
    files, rows = _recorded(holder)
    own = (own_lock_file(p, git.common_dir, git.git_dir) for p in files)
    present = [p for p in own if p is not None and os.path.exists(p)]
    current = git.refs_named(ref for ref, _, _ in rows)
    installed = [RefUpdate(ref, new, old) for ref, old, new in rows
                 if current.get(ref) == new]
    pending = [RefUpdate(ref, new, old) for ref, old, new in rows
               if current.get(ref) == old and old != new]
    return present, installed, pending


def recover(git: GitRepo | None, holder: dict[str, object]) -> Recovery:
    """Clear what the dead ``holder`` left (see the module docstring); never raises for
    what it cannot finish: that is a warning, and the next writer's CAS decides."""
    result = Recovery(holder)
    if git is None:
        return result
    present, installed, pending = pending_of(git, holder)
    foreign = [p for p in _recorded(holder)[0]
               if own_lock_file(p, git.common_dir, git.git_dir) is None]
    if foreign:  # only lock files expgit makes, in this git dir, are ever removed
        result.warnings.append(
            f"left alone {len(foreign)} recorded file{'s' if len(foreign) != 1 else ''} "
            "that no ref transaction of expgit makes: " + ", ".join(map(shown_path, foreign)))
    for path in present:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            result.removed.append(path)
    if installed and pending:
        try:
            git.update_refs(pending, f"expgit: finish the update of crashed pid "
                            f"{holder.get('pid')}")
            result.finished = [u.ref for u in pending]
            installed += pending
        except ExpgitError as exc:
            result.warnings.append(f"could not finish the crashed writer's update: {exc}")
    for update in installed:
        if update.old is None or update.new is None or not behind(git, update.ref,
                                                                   update.new):
            continue
        warnings = sync_worktrees(git, update.ref, update.old, update.new)
        result.warnings += warnings
        if not warnings:
            result.synced.append(update.ref.removeprefix("refs/heads/"))
    return result


def behind(git: GitRepo, ref: str, tip: str) -> bool:
    """Whether the working tree has ``ref`` checked out and its index is not ``tip``'s
    tree (the move of ``ref`` never reached it)."""
    if git.work_tree is None or git.head_symref() != ref:
        return False
    proc = git.run("diff-index", "--cached", "--quiet", tip, "--", check=False)
    return proc.returncode != 0
