"""Trajectories on their own branch (``[train] trajectories_branch``), never on ``main``.

A trajectory is a markdown file ``trajectories/<ab>/<id>.md`` where ``<id>`` is the first
16 hex digits of the SHA-256 of the rollout's canonical JSON and ``<ab>`` its first two
(a fanned-out folder: no tree holds every trajectory); the same rollout is stored once,
and storing it again writes nothing. Its URI is ``<branch>:trajectories/<ab>/<id>.md``.
Beside the document, in the same commit, ``<id>.transcript.json`` keeps the rollout's
messages and tool calls with their results, redacted and bounded as the prompts show
them (:mod:`expgit.train.records.transcript`); a trajectory stored before transcripts were kept
has none until its rollout is analysed again (:meth:`TrajectoryStore.add_transcript`).

The branch is a :class:`~expgit.store.sidebranch.SideBranch`: an orphan history of its own that
never shares a commit with ``main``, written by building blob, tree and commit in the
object database and moving the branch by compare-and-swap; a writer that loses the race
(another analyzer committed meanwhile) re-reads the tip and tries again, up to
:data:`ATTEMPTS` times, and writers of one process are serialised by a lock per branch.
"""

from __future__ import annotations

import hashlib
import json

from expgit.core.domain import Rollout
from expgit.errors import InvalidInputError, NotFoundError
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import ATTEMPTS, SideBranch, fanned

__all__ = ["ATTEMPTS", "FOLDER", "ID_LEN", "TRANSCRIPT_SUFFIX", "TrajectoryStore",
           "rollout_id"]

FOLDER = "trajectories"
TRANSCRIPT_SUFFIX = ".transcript.json"
ID_LEN = 16


def rollout_id(rollout: Rollout) -> str:
    """The content address of a rollout: SHA-256 of its canonical JSON, 16 hex digits."""
    canonical = json.dumps(rollout.model_dump(mode="json"), sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_LEN]


def beside_of(path: str) -> str:
    """The transcript's path beside the trajectory document at ``path``."""
    return path.removesuffix(".md") + TRANSCRIPT_SUFFIX


class TrajectoryStore:
    """Reads and writes trajectory documents on the trajectories branch."""

    def __init__(self, repo: ExperienceRepository) -> None:
        self.repo = repo
        self.side = SideBranch(repo, repo.settings.train.trajectories_branch,
                               what="trajectories")
        self.ref = self.side.ref
        self.branch = self.side.branch

    # ------------------------------------------------------------------ names
    @staticmethod
    def path_of(tid: str) -> str:
        """Where trajectory ``tid`` is written (the one path function of this store; its
        transcript's path follows from it)."""
        return fanned(FOLDER, f"{tid}.md")

    @classmethod
    def transcript_path_of(cls, tid: str) -> str:
        """The transcript beside trajectory ``tid``'s document (named from its path)."""
        return beside_of(cls.path_of(tid))

    def uri_of(self, tid: str) -> str:
        return f"{self.branch}:{self.path_of(tid)}"

    def stored_uri(self, tid: str) -> str | None:
        """The URI of trajectory ``tid``, None if it is not stored."""
        return self.uri_of(tid) if self.side.holds(FOLDER, f"{tid}.md") else None

    # ------------------------------------------------------------------ reads
    def _located(self, uri: str) -> tuple[str | None, str]:
        """The tip of the branch a URI names (another branch than this store's, maybe)
        and the path it names there."""
        branch, sep, path = uri.partition(":")
        if not sep or not branch or not path:
            raise InvalidInputError(f"not a trajectory URI: {uri!r} "
                                    f"(expected {self.branch}:{FOLDER}/<id>.md)")
        ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
        return self.repo.git.ref(ref), path

    def find_transcript(self, tid: str) -> bytes | None:
        """The stored transcript of trajectory ``tid`` (beside its document), None if
        there is none (a trajectory stored before transcripts were kept)."""
        return self.side.read(self.transcript_path_of(tid))

    def find(self, tid: str) -> str | None:
        """The stored document of trajectory ``tid``, None if it is not stored."""
        data = self.side.read_in(FOLDER, f"{tid}.md")
        return None if data is None else data.decode("utf-8", "replace")

    def read(self, uri: str) -> str:
        """The document a trajectory URI names; NotFoundError if there is none."""
        tip, path = self._located(uri)
        data = self.side.read(path, tip=tip) if tip is not None else None
        if data is None:
            raise NotFoundError(f"no trajectory {uri!r}")
        return data.decode("utf-8", "replace")

    def transcript_of(self, uri: str) -> bytes | None:
        """The transcript beside the trajectory a URI names, None if there is none."""
        tip, path = self._located(uri)
        return None if tip is None else self.side.read(beside_of(path), tip=tip)

    def ids(self) -> list[str]:
        """The ids of every stored trajectory, sorted."""
        return [e.name[:-3] for e in self.side.fanned_entries(FOLDER, suffix=".md")]

    # ----------------------------------------------------------------- writes
    def store(self, tid: str, content: str, subject: str, transcript: bytes | None = None
              ) -> tuple[str, bool]:
        """Store ``content`` as trajectory ``tid`` and ``transcript`` (the rollout's
        messages, :mod:`expgit.train.records.transcript`) beside it, in one commit; (uri, True if
        a commit was made).

        A trajectory already stored under ``tid`` is kept as it is (content addressing:
        same id, same rollout). Raises ConflictError if the branch kept moving for
        :data:`ATTEMPTS` rounds."""
        path = self.path_of(tid)
        data = content.encode("utf-8")
        files: dict[str, bytes | None] = {path: data}
        if transcript is not None:
            files[self.transcript_path_of(tid)] = transcript

        def unless_stored(tip: str | None) -> dict[str, bytes | None]:
            stored = tip is not None and self.side.holds(FOLDER, f"{tid}.md", tip=tip)
            return {} if stored else files

        title = " ".join(subject.split())[:200] or f"trajectory {tid}"
        commit = self.side.write(unless_stored, title, trailers=((tr.KIND, "trajectory"),))
        return self.uri_of(tid), commit is not None  # None: stored already

    def add_transcript(self, tid: str, transcript: bytes) -> bool:
        """Store ``transcript`` beside trajectory ``tid`` when the trajectory is stored
        without one (written before transcripts were kept); True if a commit was made.
        Nothing is written when there is no such trajectory or it has a transcript."""
        git = self.repo.git

        def missing(tip: str | None) -> dict[str, bytes | None]:
            if tip is None or not self.side.holds(FOLDER, f"{tid}.md", tip=tip):
                return {}
            beside = self.transcript_path_of(tid)
            if git.path_entry(git.read_commit(tip).tree, beside) is not None:
                return {}
            return {beside: transcript}

        return self.side.write(missing, f"transcript of trajectory {tid}",
                               trailers=((tr.KIND, "trajectory"),)) is not None
