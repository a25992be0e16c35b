"""Atomic compare-and-swap ref transactions of one repository.

In process (:mod:`expgit.git.refwrite`: git's own lock files, reflogs included) when the
repository lets this process write (the files ref backend; no shared-repository
permissions or fsync settings; no push quarantine, where git refuses ref updates) and the
transaction is a plain one; else, or when that module declines a transaction before
changing anything, by one ``git update-ref -m MESSAGE --stdin``.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from expgit.git.objects import ZERO_SHA
from expgit.git.refs import RefLockedError, RefUpdate
from expgit.git.refwrite import FilesRefWriter, GitMustWrite, Journal, moved


def transaction_lines(updates: Sequence[RefUpdate]) -> list[str]:
    """The ``--stdin`` commands of ``updates`` (a delete with no old value: unchecked)."""
    lines = []
    for u in updates:
        if u.new is None:
            lines.append(f"delete {u.ref} {u.old or ''}".rstrip())
        else:
            lines.append(f"update {u.ref} {u.new} {u.old or ZERO_SHA}")
    return lines


def log_all_setting(value: str, bare: bool) -> str:
    """``core.logAllRefUpdates`` as ``always``, ``true`` or ``false`` (git's default: true
    in a repository with a work tree, false in a bare one)."""
    text = value.strip().lower()
    if not text:
        return "false" if bare else "true"
    if text == "always":
        return "always"
    return "false" if text in ("false", "no", "off", "0") else "true"


@dataclass
class RefWriter:
    """``files``: the in-process writer; ``run``: a git process on the repository;
    ``in_process()``: whether this process may write refs itself now; ``log_all()``:
    :func:`log_all_setting`; ``committer()``: the reflog identity, None when only git
    can tell."""

    files: FilesRefWriter
    run: Callable[..., subprocess.CompletedProcess[bytes]]
    in_process: Callable[[], bool]
    log_all: Callable[[], str]
    committer: Callable[[], str | None]
    # told of each transaction before it takes a lock file (see FilesRefWriter.apply)
    journal: Journal | None = None
    # this process's own transactions one at a time (no waiting on each other's locks)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def apply(self, updates: Sequence[RefUpdate], message: str) -> None:
        """All updates in one atomic transaction, or none: RefMovedError, or
        RefLockedError naming the lock files in the way."""
        if self.in_process():  # (another ref backend: the writer declines it)
            with self._lock:
                try:
                    self.files.apply(updates, message, log_all=self.log_all(),
                                     committer=self.committer, journal=self.journal)
                    return
                except GitMustWrite:
                    pass  # declined before anything changed: git decides
        if self.journal is not None:
            self.journal([], updates)  # git's own locks are git's to clean up
        lines = transaction_lines(updates)
        proc = self.run("update-ref", "-m", message, "--stdin",
                        input=("\n".join(lines) + "\n").encode(), check=False)
        if proc.returncode != 0:
            error = proc.stderr.decode(errors="replace").strip()
            held = self._locks_in_the_way(updates) if "File exists" in error else []
            if held:
                raise RefLockedError(held)
            raise moved(error)

    def _locks_in_the_way(self, updates: Sequence[RefUpdate]) -> list[str]:
        common = self.files.refs.common_dir
        candidates = [common / f"{u.ref}.lock" for u in updates]
        candidates += [common / "packed-refs.lock", self.files.git_dir / "HEAD.lock"]
        return [str(path) for path in candidates if path.exists()]
