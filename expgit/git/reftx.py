"""Atomic compare-and-swap ref transactions: one ``git update-ref -z --stdin`` each.

git locks every ref of the transaction (``<ref>.lock``, waiting ``core.filesRefLockTimeout``
for another holder), checks each one's current value (compare-and-swap), and only then
moves them all, writing the reflogs as the repository's settings say: every ref moves or
none does, for every reader and every other writer. The transaction is spelt out
(``start`` ... ``prepare``, ``commit``), so a writer that dies before git read the whole
of it leaves git at the end of its input without a ``commit``: git aborts, nothing moved.

git is not all-or-nothing against being killed itself between two of its renames; that is
what the journal is for (:mod:`expgit.store.crash`): before git starts, it is told the
lock files git takes and the updates, and the next writer finishes a transaction that a
crash cut short. Measured (docs/development.md): one ref move costs a git process (about
2 ms), invisible beside a command's other work, so no ref is written in process.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from expgit.git.objects import ZERO_SHA
from expgit.git.refs import RefLockedError, RefMovedError, RefUpdate

# told, before a transaction takes its first lock file, the lock files it may create and
# its updates (the expgit lock records them: see expgit.store.crash)
Journal = Callable[[list[str], Sequence[RefUpdate]], None]


def transaction_input(updates: Sequence[RefUpdate]) -> bytes:
    """The ``-z`` ``--stdin`` input of one transaction of ``updates`` (``old`` None:
    create; ``new`` None: delete, checked against ``old`` when it is given)."""
    lines = ["start"]
    for u in updates:
        if u.new is None:
            lines.append(f"delete {u.ref}\0{u.old or ''}")
        elif u.old is None or u.old == ZERO_SHA:
            lines.append(f"create {u.ref}\0{u.new}")
        else:
            lines.append(f"update {u.ref}\0{u.new}\0{u.old}")
    lines += ["prepare", "commit"]
    return ("\0".join(lines) + "\0").encode()


def moved(reason: str) -> RefMovedError:
    return RefMovedError(f"a ref moved under this write, nothing was changed ({reason})",
                         hint="run the command again; it re-reads the current state")


@dataclass
class RefWriter:
    """The ref transactions of one repository. ``run``: a git process on it;
    ``common_dir``, ``git_dir``: where git's lock files go; ``head``: the ref ``HEAD``
    names (git locks ``HEAD`` too when it moves, for ``HEAD``'s reflog)."""

    run: Callable[..., subprocess.CompletedProcess[bytes]]
    common_dir: Path
    git_dir: Path
    head: Callable[[], str | None]
    journal: Journal | None = None
    # this process's transactions one at a time: threads never meet at git's lock files
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def apply(self, updates: Sequence[RefUpdate], message: str) -> None:
        """All updates in one atomic transaction, or none: RefMovedError, or
        RefLockedError naming the lock files in the way."""
        with self._lock:
            if self.journal is not None:
                self.journal([str(path) for path in self.lock_files(updates)], updates)
            proc = self.run("update-ref", "-m", message, "-z", "--stdin",
                            input=transaction_input(updates), check=False)
        if proc.returncode != 0:
            error = proc.stderr.decode(errors="replace").strip()
            held = [str(p) for p in self.lock_files(updates) if p.exists()] \
                if "File exists" in error else []
            if held:
                raise RefLockedError(held)
            raise moved(error.removeprefix("fatal: "))

    def lock_files(self, updates: Sequence[RefUpdate]) -> list[Path]:
        """The lock files git takes for ``updates``: each ref's, ``packed-refs.lock`` for
        a deletion, ``HEAD.lock`` when the ref ``HEAD`` names moves."""
        files = [self.common_dir / f"{u.ref}.lock" for u in sorted(updates, key=lambda u: u.ref)]
        if any(u.new is None for u in updates):
            files.append(self.common_dir / "packed-refs.lock")
        head = self.head()
        if head is not None and any(u.ref == head for u in updates):
            files.append(self.git_dir / "HEAD.lock")
        return files
