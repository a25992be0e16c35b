"""The refs of a :class:`~expgit.git.repo.GitRepo`: read (git's ``files`` backend
without a process through :mod:`expgit.git.refs`, else ``git rev-parse`` and
``for-each-ref``), moved by one atomic transaction (:mod:`expgit.git.reftx`), and a
branch looked up in the remote-tracking refs of a clone too (:meth:`RepoRefs.branch_tips`).

A part of the facade split out of :mod:`expgit.git.repo` (which wires its state: the ref
reader, the ref writer, the git dir and :meth:`run`); it imports no GitPython.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from expgit.errors import ExpgitError
from expgit.git import zlist
from expgit.git.operands import END_OF_OPTIONS
from expgit.git.refs import FilesRefs, RefUpdate
from expgit.git.reftx import Journal, RefWriter


class RepoRefs:
    """Ref reads and writes of a repository; :class:`~expgit.git.repo.GitRepo` sets the
    attributes and implements :meth:`run`."""

    git_dir: Path
    _refs: FilesRefs
    _ref_writer: RefWriter

    def run(self, *args: str, input: bytes | None = None, check: bool = True,
            env: Mapping[str, str] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[bytes]:
        raise NotImplementedError  # GitRepo.run

    def ref(self, ref: str) -> str | None:
        if self._refs.readable(ref):
            try:
                return self._refs.read(ref)
            except LookupError:
                pass  # let git decide
        proc = self.run("rev-parse", "--verify", "--quiet", END_OF_OPTIONS, ref,
                        check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def refs_named(self, names: Iterable[str]) -> dict[str, str]:
        """``{ref: object}`` of those of ``names`` that exist, as :meth:`ref` finds them
        (``packed-refs`` read once at most)."""
        wanted = list(names)
        try:
            return self._refs.read_many(wanted)
        except LookupError:
            return {name: sha for name in wanted if (sha := self.ref(name)) is not None}

    def refs(self, prefix: str) -> dict[str, str]:
        """``{ref: object}`` for the refs below ``prefix`` (ending in ``/``), by name."""
        if prefix.endswith("/") and self._refs.readable(prefix[:-1]):
            try:
                return self._refs.listing(prefix)
            except LookupError:
                pass  # a ref this cannot read: git lists them all
        listed = self.run("for-each-ref", "--format=%(objectname) %(refname)%00",
                          END_OF_OPTIONS, prefix).stdout
        # each record: the format's NUL, then the newline git ends every record with
        pairs = (item.split(" ", 1) for item in zlist.fields(listed.replace(b"\0\n", b"\0")))
        return {name: sha for sha, name in pairs}

    def branch_tips(self, branch: str) -> list[str]:
        """The tips of ``branch`` (a name below ``refs/heads/``) to read: the local branch,
        then each remote-tracking one (``refs/remotes/<remote>/<branch>``: a clone with a
        work tree holds a branch it did not check out only there), without repeats."""
        tips = [tip] if (tip := self.ref(f"refs/heads/{branch}")) else []
        with contextlib.suppress(ExpgitError):
            tips += [sha for ref, sha in self.refs("refs/remotes/").items()
                     if ref.endswith(f"/{branch}") and sha not in tips]
        return tips

    def update_refs(self, updates: Sequence[RefUpdate], message: str) -> None:
        """Apply all updates in one atomic transaction, or none (RefMovedError)."""
        self._ref_writer.apply(updates, message)

    def set_ref_journal(self, journal: Journal | None) -> None:
        """``journal(lock files, updates)`` is told of every ref transaction before it
        takes a lock file, until set to None (the expgit lock records them there)."""
        self._ref_writer.journal = journal

    def head_symref(self) -> str | None:
        try:
            return self._refs.head_symref(self.git_dir)
        except LookupError:
            pass
        proc = self.run("symbolic-ref", "-q", "HEAD", check=False)
        return proc.stdout.decode().strip() or None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        proc = self.run("merge-base", "--is-ancestor", END_OF_OPTIONS, ancestor, descendant,
                        check=False)
        return proc.returncode == 0


__all__ = ["RepoRefs"]
