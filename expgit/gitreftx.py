"""Ref transactions through one long-lived ``git update-ref --stdin`` process.

Each transaction is ``start``, its ``update``/``delete`` lines, ``commit``: git locks every
ref, checks each expected old value (compare-and-swap), and applies all or none, exactly
as a one-shot ``git update-ref --stdin`` does, at the cost of one pipe round trip instead
of a process start. git answers ``start: ok`` and ``commit: ok``; when a transaction
fails (a ref moved, a missing object) it says why on stderr and exits, and the next
transaction starts a new process. End of input inside a started transaction aborts it,
so a half-sent transaction never applies.

What the process cannot do is left to the one-shot form: a transaction that writes a
reflog (the message is per process; :func:`writes_reflog` tells), a push quarantine
(git refuses ref updates there). A process that dies without saying why (killed) makes
:meth:`UpdateRefProcess.transact` return :data:`LOST`: the caller asks git again.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from expgit.gitenv import environ_key
from expgit.gitrefs import FilesRefs, RefMovedError, RefUpdate

ZERO = "0" * 40
_AUTO_LOGGED = ("refs/heads/", "refs/remotes/", "refs/notes/")


def transaction_lines(updates: Sequence[RefUpdate]) -> list[str]:
    """The ``--stdin`` commands of ``updates`` (a delete with no old value: unchecked)."""
    lines = []
    for u in updates:
        if u.new is None:
            lines.append(f"delete {u.ref} {u.old or ''}".rstrip())
        else:
            lines.append(f"update {u.ref} {u.new} {u.old or ZERO}")
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


def writes_reflog(updates: Sequence[RefUpdate], *, log_all: str, common_dir: Path,
                  git_dir: Path, head_target: Callable[[], str | None]) -> bool:
    """Whether git would write a reflog entry (whose message matters) for ``updates``.

    ``log_all``: ``core.logAllRefUpdates`` (``always``, ``true`` or ``false``, its default
    already applied). A ref is logged when it has a reflog already or git creates one
    (``always``: every ref; ``true``: branches, remote-tracking refs, notes, ``HEAD``);
    ``HEAD`` (``head_target()``: the ref it points to) is logged too when that ref moves.
    A repository without any ``logs`` folder and nothing git would create: one check."""
    if log_all == "always":
        return True
    if log_all == "true" and any(u.ref.startswith(_AUTO_LOGGED) for u in updates):
        return True
    folders = {os.path.join(common_dir, "logs"), os.path.join(git_dir, "logs")}
    if not any(os.path.isdir(folder) for folder in folders):
        return False  # no reflog exists: only a creation could write one (excluded above)
    if any(os.path.exists(os.path.join(common_dir, "logs", u.ref)) for u in updates):
        return True
    if log_all == "true" or os.path.exists(os.path.join(git_dir, "logs", "HEAD")):
        head = head_target()
        return any(u.ref == head for u in updates)
    return False


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str = ""  # git's reason when it refused (the transaction did not apply)


DONE = Outcome(True)
LOST = Outcome(False)  # the process died without a reason: applied or not, unknown


class _Process:
    def __init__(self, cwd: Path, key: object, env: dict[str, str]) -> None:
        self.key = key
        self.pid = os.getpid()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - kept open
        self.proc = subprocess.Popen(
            ["git", "update-ref", "--stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, cwd=cwd, env=env)

    def ended(self) -> Outcome:
        """The process ended: git's reason, or LOST when it gave none."""
        code = self.proc.wait()
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()
        self.close()
        reasons = [line for line in text.splitlines() if line.startswith(("fatal:", "error:"))]
        if code <= 0 or not reasons:
            return LOST
        return Outcome(False, "; ".join(r.split(":", 1)[1].strip().removeprefix("commit: ")
                                        for r in reasons))

    def close(self) -> None:
        _shut(self.proc, self.stderr)


def _shut(proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - git ends at end of input
        proc.kill()
        proc.wait()
    stderr.close()


@dataclass
class _Ticket:
    """One caller's transaction waiting for the process, and then its outcome."""

    lines: Sequence[str]
    refs: frozenset[str]
    outcome: Outcome | None = None


class UpdateRefProcess:
    """One ``git update-ref --stdin`` kept running for a repository; thread safe (one
    transaction at a time). Restarted when it died, when the environment its transactions
    should see changed, or in a forked child.

    Group commit: transactions of other threads that queue up while one runs are then
    sent together as one, when they touch different refs (each caller's updates still
    apply all together or not at all). If that one fails, each is sent alone, so each
    caller gets the outcome of its own transaction."""

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd
        self._lock = threading.Lock()  # the process: one transaction at a time
        self._queue_lock = threading.Lock()
        self._queue: list[_Ticket] = []
        self._process: _Process | None = None
        self._finalizer: weakref.finalize[..., UpdateRefProcess] | None = None

    def _running(self, env: Callable[[], dict[str, str]]) -> _Process:
        key = environ_key()
        current = self._process
        if current is not None and (current.key != key or current.pid != os.getpid()):
            if current.pid == os.getpid():
                current.close()
            current = None
        if current is None:
            current = self._process = _Process(self._cwd, key, env())
            if self._finalizer is not None:
                self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _shut, current.proc, current.stderr)
        return current

    def transact(self, lines: Sequence[str], env: Callable[[], dict[str, str]]) -> Outcome:
        """Apply the commands ``lines`` as one transaction; ``env()``: the environment of
        a git process now (a running process is kept while ``os.environ`` is unchanged)."""
        mine = _Ticket(lines, frozenset(line.split(" ", 2)[1] for line in lines))
        with self._queue_lock:
            self._queue.append(mine)
        with self._lock:
            if mine.outcome is None:  # else sent with another caller's meanwhile
                with self._queue_lock:
                    group, self._queue = self._queue, []
                self._send_group(group, env)
        assert mine.outcome is not None
        return mine.outcome

    def _send_group(self, group: list[_Ticket], env: Callable[[], dict[str, str]]) -> None:
        refs = [ref for ticket in group for ref in ticket.refs]
        if len(group) > 1 and len(set(refs)) == len(refs):
            outcome = self._send([line for ticket in group for line in ticket.lines], env)
            if outcome.ok or outcome is LOST:  # LOST: each caller asks git for itself
                for ticket in group:
                    ticket.outcome = outcome
                return
        for ticket in group:  # alone, or again one by one for their own outcomes
            ticket.outcome = self._send(ticket.lines, env)

    def _send(self, lines: Sequence[str], env: Callable[[], dict[str, str]]) -> Outcome:
        payload = ("start\n" + "".join(line + "\n" for line in lines) + "commit\n").encode()
        for attempt in (1, 2):
            process = self._running(env)
            proc = process.proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                # it had ended before this transaction (nothing of it can apply without
                # "commit"): once more with a new process
                self._process = None
                outcome = process.ended()
                if attempt == 1:
                    continue
                return outcome
            answers = [proc.stdout.readline(), proc.stdout.readline()]
            if answers == [b"start: ok\n", b"commit: ok\n"]:
                return DONE
            self._process = None
            return process.ended()
        return LOST  # pragma: no cover - the loop returns

    def close(self) -> None:
        with self._lock:
            if self._process is not None and self._process.pid == os.getpid():
                self._process.close()
            self._process = None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None


def moved(reason: str) -> RefMovedError:
    return RefMovedError(f"a ref moved under this write, nothing was changed ({reason})",
                         hint="run the command again; it re-reads the current state")


@dataclass
class RefWriter:
    """Atomic compare-and-swap transactions of one repository: through the long-lived
    process when no reflog records the message and no push quarantine is in force; else
    (or when that process died without saying why) by one ``git update-ref -m MESSAGE
    --stdin`` (``run``: a git process on the repository)."""

    common_dir: Path
    git_dir: Path
    refs: FilesRefs
    process: UpdateRefProcess
    run: Callable[..., subprocess.CompletedProcess[bytes]]
    env: Callable[[], dict[str, str]]  # of a git process on the repository, now
    quarantined: Callable[[], bool]  # a push quarantine is in force (git refuses)
    log_all: Callable[[], str]
    read_refs: Callable[[Iterable[str]], dict[str, str]]

    def apply(self, updates: Sequence[RefUpdate], message: str) -> None:
        """All updates in one atomic transaction, or none (RefMovedError)."""
        lines = transaction_lines(updates)
        lost = False
        if not self.quarantined() and not self.logs(updates):
            outcome = self.process.transact(lines, self.env)
            if outcome.ok:
                return
            if outcome.error:
                raise moved(outcome.error)
            lost = True
        proc = self.run("update-ref", "-m", message, "--stdin",
                        input=("\n".join(lines) + "\n").encode(), check=False)
        if proc.returncode != 0:
            if lost and self.read_refs(u.ref for u in updates) == {
                    u.ref: u.new for u in updates if u.new is not None}:
                return  # the lost transaction had applied: every ref is where it moved it
            raise moved(proc.stderr.decode(errors="replace").strip())

    def logs(self, updates: Sequence[RefUpdate]) -> bool:
        """Whether git writes a reflog entry for ``updates`` (its message matters); yes
        when this cannot tell (another ref backend, a HEAD it cannot read)."""
        if not self.refs.enabled:
            return True
        try:
            return writes_reflog(updates, log_all=self.log_all(), common_dir=self.common_dir,
                                 git_dir=self.git_dir,
                                 head_target=lambda: self.refs.head_symref(self.git_dir))
        except LookupError:
            return True
