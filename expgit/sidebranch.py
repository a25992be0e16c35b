"""A branch of its own for expgit's records (trajectories, session manifests, outcomes),
never ``main``: files read at the tip, and writes that build objects and move the branch
by compare-and-swap, retried when another writer moved it meanwhile.

The branch is an orphan history (its first commit has no parent), so it never shares a
commit with ``main``; its history is the audit trail of the records it holds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import ClassVar

from expgit import trailers as tr
from expgit.errors import ConflictError, UsageError
from expgit.gitrepo import RefMovedError, RefUpdate
from expgit.repository import ExperienceRepository

ATTEMPTS = 10

Changes = Mapping[str, bytes | None]
"""Path -> new content (None: remove the file)."""


class SideBranch:
    """Files on one side branch of an experience repository."""

    _process_locks: ClassVar[dict[tuple[str, str], threading.Lock]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, repo: ExperienceRepository, branch: str, *, what: str) -> None:
        self.repo = repo
        name = branch.strip()
        self.ref = name if name.startswith("refs/") else f"refs/heads/{name}"
        self.branch = self.ref.removeprefix("refs/heads/")
        if self.ref == repo.main_ref or not self.branch or self.ref.endswith("/"):
            raise UsageError(f"{what} branch {branch!r} is not usable: {what} must live on "
                             f"their own branch, never on {repo.settings.main_branch!r}")
        key = (str(repo.git.common_dir), self.ref)
        with self._guard:
            self._write_lock = self._process_locks.setdefault(key, threading.Lock())

    # ------------------------------------------------------------------ reads
    def tip(self) -> str | None:
        return self.repo.git.ref(self.ref)

    def tree(self, tip: str | None = None) -> str | None:
        commit = tip if tip is not None else self.tip()
        return self.repo.git.read_commit(commit).tree if commit else None

    def read(self, path: str, *, tip: str | None = None) -> bytes | None:
        """The file at ``path`` on the branch (or at commit ``tip``), None if absent."""
        tree = self.tree(tip)
        if tree is None:
            return None
        entry = self.repo.git.path_entry(tree, path)
        if entry is None or entry.is_tree:
            return None
        return self.repo.git.read_blob(entry.sha)

    def list(self, folder: str, *, suffix: str = "") -> list[str]:
        """The names of the files directly in ``folder`` ending with ``suffix``, sorted."""
        tree = self.tree()
        if tree is None:
            return []
        entry = self.repo.git.path_entry(tree, folder)
        if entry is None or not entry.is_tree:
            return []
        return sorted(e.name for e in self.repo.git.read_tree(entry.sha)
                      if not e.is_tree and e.name.endswith(suffix))

    # ----------------------------------------------------------------- writes
    def write(self, changes: Changes | Callable[[str | None], Changes], subject: str, *,
              trailers: tuple[tuple[str, str], ...] = ()) -> str | None:
        """Commit ``changes`` on the branch; the new tip, or None when nothing changed.

        ``changes`` may be a function of the current tip (re-run on each attempt), for
        writes that depend on what is there: read-modify-write without lost updates.
        Raises ConflictError if the branch kept moving for :data:`ATTEMPTS` rounds."""
        git = self.repo.git
        message = tr.Message(subject=" ".join(subject.split())[:200] or "expgit record",
                             trailers=trailers).render()
        with self._write_lock:
            for attempt in range(1, ATTEMPTS + 1):
                tip = git.ref(self.ref)
                wanted = changes(tip) if callable(changes) else changes
                tree = git.read_commit(tip).tree if tip else None
                blobs = {path: (git.write_blob(data) if data is not None else None)
                         for path, data in wanted.items()}
                new_tree = git.edit_tree(tree, blobs)
                if new_tree == tree or (tree is None and not any(blobs.values())):
                    return None
                commit = git.write_commit(new_tree, [tip] if tip else [], message)
                try:
                    git.update_refs([RefUpdate(self.ref, commit, tip)], f"expgit: {subject}")
                except RefMovedError:
                    if attempt < ATTEMPTS:
                        time.sleep(random.uniform(0.001, 0.01) * attempt)
                    continue
                return commit
        raise ConflictError(f"could not write to {self.branch}: it kept moving "
                            f"({ATTEMPTS} attempts)", hint="run the command again")
