"""A branch of its own for expgit's records (trajectories, session manifests, outcomes),
never ``main``: files read at the tip, and writes that build objects and move the branch
by compare-and-swap, retried when another writer moved it meanwhile.

The branch is an orphan history (its first commit has no parent), so it never shares a
commit with ``main``; its history is the audit trail of the records it holds.

Fan-out: a folder that grows with every record (trajectories, session manifests) keeps
each file at ``folder/<first two characters of its name>/<name>`` (:func:`fanned`), as
git fans out ``objects/``: a commit then rewrites the folder's tree (at most 256
sub-folders) and one sub-folder's tree, never one tree of every file. Anything else in
such a folder is not a record and is not read.

Group commit: writers of one branch in one process queue up while one of them writes;
that one commits every queued write, each as its own commit in order, and moves the
branch once (one compare-and-swap for the chain). Each writer still gets its own commit
(or error), its ``changes`` seeing the tip its commit goes onto.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeGuard

from expgit.errors import ConflictError, UsageError
from expgit.git.repo import RefUpdate, TreeEntry
from expgit.git.zlist import raw_diff
from expgit.store.cas import compare_and_swap
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository

ATTEMPTS = 10
FAN_OUT = 2  # characters of a file's name that name its sub-folder

Changes = Mapping[str, bytes | None]
"""Path -> new content (None: remove the file)."""


FileChanges = list[tuple[str, str | None, str | None]]
"""``(name, old blob, new blob)`` of each file that differs (None: not on that side)."""


def fanned(folder: str, name: str) -> str:
    """Where the file ``name`` of a fanned-out ``folder`` is written: ``folder/ab/name``
    for a name starting ``ab``. The one path function of each store calls this."""
    return f"{folder}/{name[:FAN_OUT]}/{name}"


_ABSENT = re.compile("0+")  # the id diff-tree gives the side a file is not on


def is_fan(entry: TreeEntry | None) -> TypeGuard[TreeEntry]:
    """Whether ``entry`` of a fanned-out folder is one of its sub-folders."""
    return entry is not None and entry.is_tree and len(entry.name) == FAN_OUT


@dataclass
class _Write:
    """One queued write and, once written, its outcome."""

    changes: Changes | Callable[[str | None], Changes]
    subject: str
    message: str
    done: bool = False
    commit: str | None = None
    error: BaseException | None = None


class SideBranch:
    """Files on one side branch of an experience repository."""

    _process_locks: ClassVar[dict[tuple[str, str], threading.Lock]] = {}
    _queues: ClassVar[dict[tuple[str, str], list[_Write]]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, repo: ExperienceRepository, branch: str, *, what: str,
                 tracking: bool = False) -> None:
        """``tracking``: while the local branch is missing, read the remote-tracking one
        (:meth:`~expgit.git.repo_refs.RepoRefs.branch_tips`: a clone with a work tree
        holds the branch only as ``refs/remotes/origin/<branch>``), and write on top of it
        (so a push is a fast-forward)."""
        self.repo = repo
        self.tracking = tracking
        name = branch.strip()
        self.ref = name if name.startswith("refs/") else f"refs/heads/{name}"
        self.branch = self.ref.removeprefix("refs/heads/")
        if self.ref == repo.main_ref or not self.branch or self.ref.endswith("/"):
            raise UsageError(f"{what} branch {branch!r} is not usable: {what} must live on "
                             f"their own branch, never on {repo.settings.main_branch!r}")
        key = (str(repo.git.common_dir), self.ref)
        with self._guard:
            self._write_lock = self._process_locks.setdefault(key, threading.Lock())
            self._queue = self._queues.setdefault(key, [])

    # ------------------------------------------------------------------ reads
    def tip(self) -> str | None:
        local = self.repo.git.ref(self.ref)
        return local if local is not None or not self._tracked() else self._remote_tip()

    def _tracked(self) -> bool:
        return self.tracking and self.ref.startswith("refs/heads/")

    def _remote_tip(self) -> str | None:
        """The first remote-tracking tip of the branch (its local tip is missing)."""
        return next(iter(self.repo.git.branch_tips(self.branch)), None) \
            if self._tracked() else None

    def tree(self, tip: str | None = None) -> str | None:
        commit = tip if tip is not None else self.tip()
        return self.repo.git.read_commit(commit).tree if commit else None

    def _entry(self, path: str, tip: str | None) -> TreeEntry | None:
        """The entry at ``path`` on the branch (or at commit ``tip``), None if absent."""
        tree = self.tree(tip)
        return self.repo.git.path_entry(tree, path) if tree is not None else None

    def read(self, path: str, *, tip: str | None = None) -> bytes | None:
        """The file at ``path`` on the branch (or at commit ``tip``), None if absent."""
        entry = self._entry(path, tip)
        return None if entry is None or entry.is_tree else self.repo.git.read_blob(entry.sha)

    def entries(self, folder: str, *, suffix: str = "", tip: str | None = None
                ) -> list[TreeEntry]:
        """The files directly in ``folder`` ending with ``suffix`` (or at commit ``tip``),
        by name."""
        entry = self._entry(folder, tip)
        if entry is None or not entry.is_tree:
            return []
        return sorted((e for e in self.repo.git.read_tree(entry.sha)
                       if not e.is_tree and e.name.endswith(suffix)), key=lambda e: e.name)

    def files(self, folder: str, *, suffix: str = "", tip: str | None = None,
              fanned_out: bool = False) -> dict[str, bytes]:
        """``{name: content}`` of :meth:`entries` (``fanned_out``: of
        :meth:`fanned_entries`), read in one batch, by name."""
        found = (self.fanned_entries if fanned_out else self.entries)(
            folder, suffix=suffix, tip=tip)
        blobs = self.repo.git.read_blobs(e.sha for e in found)
        return {e.name: blobs[e.sha] for e in found}

    # ------------------------------------------------------- fanned-out folders
    def holds(self, folder: str, name: str, *, tip: str | None = None) -> bool:
        """Whether file ``name`` of the fanned-out ``folder`` is stored (at ``tip``)."""
        entry = self._entry(fanned(folder, name), tip)
        return entry is not None and not entry.is_tree

    def read_in(self, folder: str, name: str, *, tip: str | None = None) -> bytes | None:
        """The content of file ``name`` of the fanned-out ``folder``, None if absent."""
        return self.read(fanned(folder, name), tip=tip)

    def fanned_entries(self, folder: str, *, suffix: str = "", tip: str | None = None,
                       first: int | None = None) -> list[TreeEntry]:
        """The files of the fanned-out ``folder`` ending with ``suffix``, by name; with
        ``first``, only the first so many (the sub-folders past them are not read)."""
        git = self.repo.git
        entry = self._entry(folder, tip)
        if entry is None or not entry.is_tree:
            return []
        found: list[TreeEntry] = []
        for item in sorted((e for e in git.read_tree(entry.sha) if is_fan(e)),
                           key=lambda e: e.name):  # a name's sub-folder is its first letters
            found += (e for e in git.read_tree(item.sha)
                      if not e.is_tree and e.name.endswith(suffix))
            if first is not None and len(found) >= first:
                break
        return sorted(found, key=lambda e: e.name)[:first]

    def fanned_changes(self, old: str, new: str, *, suffix: str = "") -> FileChanges:
        """The files ending with ``suffix`` that differ between two trees of a fanned-out
        folder (``old`` and ``new``: the folder's tree ids), as ``(name, old blob, new
        blob)`` in name order (None: not there), the files :meth:`fanned_entries` lists:
        one ``git diff-tree``, whose cost follows the change, not the folder. GitError
        when a tree is not there."""
        git = self.repo.git
        raw = git.run("diff-tree", "-r", "-z", "--raw", "--no-renames", old, new).stdout
        changes: FileChanges = []
        for change in raw_diff(raw):  # a side that is not there has an all-zero id
            fan, _, name = change.path.partition("/")
            if len(fan) == FAN_OUT and name and "/" not in name and name.endswith(suffix):
                before, after = (None if _ABSENT.fullmatch(sha) else sha
                                 for sha in (change.old_sha, change.new_sha))
                changes.append((name, before, after))
        return sorted(changes)

    # ----------------------------------------------------------------- writes
    def write(self, changes: Changes | Callable[[str | None], Changes], subject: str, *,
              trailers: tuple[tuple[str, str], ...] = ()) -> str | None:
        """Commit ``changes`` on the branch; the commit (the tip it made), or None when
        nothing changed.

        ``changes`` may be a function of the current tip (re-run on each attempt), for
        writes that depend on what is there: read-modify-write without lost updates.
        Raises ConflictError if the branch kept moving for :data:`ATTEMPTS` rounds."""
        message = tr.Message(subject=" ".join(subject.split())[:200] or "expgit record",
                             trailers=trailers).render()
        mine = _Write(changes, subject, message)
        with self._guard:
            self._queue.append(mine)
        with self._write_lock:
            if not mine.done:  # else another writer committed it meanwhile
                with self._guard:
                    batch = list(self._queue)
                    self._queue.clear()
                self._commit(batch)
                for item in batch:
                    item.done = True
        if mine.error is not None:
            raise mine.error
        return mine.commit

    def _commit(self, batch: Sequence[_Write]) -> None:
        """Commit every write of ``batch`` in order, one commit each, and move the branch
        once; a write whose ``changes`` fail gets that error, the others go on."""
        git = self.repo.git

        def build(tip: str | None) -> str | None:
            """Every write committed in order on the tip; the new head (None: no change)."""
            base = tip if tip is not None else self._remote_tip()
            head, tree = base, git.read_commit(base).tree if base else None
            for item in batch:
                item.commit = item.error = None
                try:
                    wanted = item.changes(head) if callable(item.changes) else item.changes
                except Exception as exc:  # this write fails, the others go on
                    item.error = exc
                    continue
                blobs = {path: (git.write_blob(data) if data is not None else None)
                         for path, data in wanted.items()}
                new_tree = git.edit_tree(tree, blobs)
                if new_tree == tree or (tree is None and not any(blobs.values())):
                    continue
                head = item.commit = git.write_commit(new_tree, [head] if head else [],
                                                      item.message)
                tree = new_tree
            return None if head == base else head

        def move(tip: str | None, head: str | None) -> None:
            if head is None:
                return
            made = [item for item in batch if item.commit]
            reflog = made[0].subject + (f" (+{len(made) - 1} more)" if len(made) > 1 else "")
            git.update_refs([RefUpdate(self.ref, head, tip)], f"expgit: {reflog}")

        try:
            compare_and_swap(lambda: git.ref(self.ref), build, move, attempts=ATTEMPTS,
                             jitter=0.01, gave_up=lambda n: ConflictError(
                                 f"could not write to {self.branch}: it kept moving "
                                 f"({n} attempts)", hint="run the command again"))
            return
        except BaseException as exc:  # git failed: every write of the batch failed
            failure = exc
        for item in batch:
            item.commit, item.error = None, item.error or failure
