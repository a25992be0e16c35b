"""Trajectories on their own branch (``[train] trajectories_branch``), never on ``main``.

A trajectory is a markdown file ``trajectories/<id>.md`` where ``<id>`` is the first 16
hex digits of the SHA-256 of the rollout's canonical JSON: the same rollout is stored
once, and storing it again writes nothing. Its URI is ``<branch>:trajectories/<id>.md``.

The branch is an orphan history of its own (its first commit has no parent), so it never
shares a commit with ``main``. Writers build blob, tree and commit in the object database
and move the branch by compare-and-swap; a writer that loses the race (another analyzer
committed meanwhile) re-reads the tip and tries again, up to :data:`ATTEMPTS` times.
Writers of one process are also serialised by a lock per branch, so they do not waste
rounds racing each other.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from typing import ClassVar

from expgit import trailers as tr
from expgit.errors import ConflictError, InvalidInputError, NotFoundError, UsageError
from expgit.gitrepo import RefMovedError, RefUpdate
from expgit.repository import ExperienceRepository
from expgit.train.domain import Rollout

ATTEMPTS = 10
FOLDER = "trajectories"
ID_LEN = 16


def rollout_id(rollout: Rollout) -> str:
    """The content address of a rollout: SHA-256 of its canonical JSON, 16 hex digits."""
    canonical = json.dumps(rollout.model_dump(mode="json"), sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_LEN]


class TrajectoryStore:
    """Reads and writes trajectory documents on the trajectories branch."""

    _process_locks: ClassVar[dict[tuple[str, str], threading.Lock]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, repo: ExperienceRepository) -> None:
        self.repo = repo
        configured = repo.settings.train.trajectories_branch.strip()
        self.ref = configured if configured.startswith("refs/") else f"refs/heads/{configured}"
        self.branch = self.ref.removeprefix("refs/heads/")
        if self.ref == repo.main_ref or not self.branch or self.ref.endswith("/"):
            raise UsageError(f"[train] trajectories_branch = {configured!r} is not usable: "
                             f"trajectories must live on their own branch, never on "
                             f"{repo.settings.main_branch!r}")
        key = (str(repo.git.common_dir), self.ref)
        with self._guard:
            self._write_lock = self._process_locks.setdefault(key, threading.Lock())

    # ------------------------------------------------------------------ names
    @staticmethod
    def path_of(tid: str) -> str:
        return f"{FOLDER}/{tid}.md"

    def uri_of(self, tid: str) -> str:
        return f"{self.branch}:{self.path_of(tid)}"

    def _split(self, uri: str) -> tuple[str, str]:
        branch, sep, path = uri.partition(":")
        if not sep or not branch or not path:
            raise InvalidInputError(f"not a trajectory URI: {uri!r} "
                                    f"(expected {self.branch}:{FOLDER}/<id>.md)")
        ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
        return ref, path

    # ------------------------------------------------------------------ reads
    def _read_at(self, ref: str, path: str) -> str | None:
        tip = self.repo.git.ref(ref)
        if tip is None:
            return None
        entry = self.repo.git.path_entry(self.repo.git.read_commit(tip).tree, path)
        if entry is None or entry.is_tree:
            return None
        return self.repo.git.read_blob(entry.sha).decode("utf-8", "replace")

    def find(self, tid: str) -> str | None:
        """The stored document of trajectory ``tid``, None if it is not stored."""
        return self._read_at(self.ref, self.path_of(tid))

    def read(self, uri: str) -> str:
        """The document a trajectory URI names; NotFoundError if there is none."""
        ref, path = self._split(uri)
        text = self._read_at(ref, path)
        if text is None:
            raise NotFoundError(f"no trajectory {uri!r}")
        return text

    def ids(self) -> list[str]:
        """The ids of every stored trajectory, sorted."""
        tip = self.repo.git.ref(self.ref)
        if tip is None:
            return []
        entry = self.repo.git.path_entry(self.repo.git.read_commit(tip).tree, FOLDER)
        if entry is None or not entry.is_tree:
            return []
        return sorted(e.name[:-3] for e in self.repo.git.read_tree(entry.sha)
                      if e.name.endswith(".md") and not e.is_tree)

    # ----------------------------------------------------------------- writes
    def store(self, tid: str, content: str, subject: str) -> tuple[str, bool]:
        """Store ``content`` as trajectory ``tid``; (uri, True if a commit was made).

        A trajectory already stored under ``tid`` is kept as it is (content addressing:
        same id, same rollout). Raises ConflictError if the branch kept moving for
        :data:`ATTEMPTS` rounds."""
        path = self.path_of(tid)
        git = self.repo.git
        blob = git.write_blob(content.encode("utf-8"))
        title = " ".join(subject.split())[:200] or f"trajectory {tid}"
        message = tr.Message(subject=title, trailers=((tr.KIND, "trajectory"),)).render()
        with self._write_lock:
            for attempt in range(1, ATTEMPTS + 1):
                tip = git.ref(self.ref)
                tree = git.read_commit(tip).tree if tip else None
                if tree is not None and git.path_entry(tree, path) is not None:
                    return self.uri_of(tid), False
                new_tree = git.edit_tree(tree, {path: blob})
                commit = git.write_commit(new_tree, [tip] if tip else [], message)
                try:
                    git.update_refs([RefUpdate(self.ref, commit, tip)],
                                    f"expgit trajectory {tid}")
                except RefMovedError:
                    if attempt < ATTEMPTS:
                        time.sleep(random.uniform(0.001, 0.01) * attempt)
                    continue
                return self.uri_of(tid), True
        raise ConflictError(f"could not store trajectory {tid}: {self.branch} kept moving "
                            f"({ATTEMPTS} attempts)", hint="run the command again")
