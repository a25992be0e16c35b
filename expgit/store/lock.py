"""The expgit writer lock: one file in the git dir, created exclusively.

The lock serialises expgit writers (apply, revert, reject) on one repository; the move
of ``main`` itself is still a compare-and-swap, so a writer that bypasses the lock (a
plain ``git push``) can never be overwritten, only detected.

The lock file is written completely under a temporary name and then hard-linked into
place, so a reader never sees a half-written holder record. A holder whose process is
gone (same host and pid namespace) or whose record is older than ``stale_seconds`` is
stale and is removed automatically. Every removal (stale recovery and release) is
serialised by ``flock`` on a guard file and re-checks the record under it, so a writer
never removes a lock that is not the one it judged: two recovering writers cannot remove
each other's fresh lock, and a holder whose lock was taken over as stale cannot remove
its successor's.

A file that is not a holder record (unreadable, not a JSON object, no numeric ``time``)
blocks like a live lock until its modification time is older than ``stale_seconds``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from expgit.errors import LockHeldError, UsageError
from expgit.git.repo import GitRepo
from expgit.store.crash import LockJournal, Recovery, recover

LOCK_NAME = "expgit.lock"
NOTICE_AFTER = 0.5  # seconds of waiting for a live holder before saying so
# errnos of link(2) on file systems without hard links
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS,
                            errno.EMLINK})


def _alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is still running.

    A zombie (exited, not yet reaped by its parent) still answers ``kill(pid, 0)`` but
    can never release a lock, so on Linux it counts as dead.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = stat.rpartition(")")[2].split()
    return not fields or fields[0] not in ("Z", "X")


def _pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[4026531836]``), None where there is none to
    read. Containers may share a host name but not their pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class RepoLock:
    """``git``: the repository whose ref transactions the holder records in the lock
    (:mod:`expgit.store.crash`), so that whoever finds the lock stale can clear what a
    crash left; without it the lock only serialises."""

    def __init__(self, git_dir: Path, *, wait_seconds: float, stale_seconds: float,
                 purpose: str = "", git: GitRepo | None = None) -> None:
        self.path = git_dir / LOCK_NAME
        self.wait_seconds = wait_seconds
        self.stale_seconds = stale_seconds
        self.purpose = purpose or " ".join(sys.argv[:3])
        self.git = git
        self.recovered: Recovery | None = None  # what taking the lock cleared up
        self._token: str | None = None
        self._journal: LockJournal | None = None

    def holder(self) -> dict[str, object] | None:
        """The holder record, None if the lock is free.

        A file that is not a holder record (not JSON, not an object, no numeric
        ``time``) is reported as ``{"corrupt": True, "time": <file mtime>}``: it blocks
        like a live lock until it is older than ``stale_seconds``.
        """
        try:
            data = self.path.read_bytes()
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        except OSError:
            data, mtime = b"", time.time()
        try:
            record = json.loads(data)
        except ValueError:
            record = None
        if not isinstance(record, dict) or _number(record.get("time")) is None:
            return {"corrupt": True, "time": mtime}
        return record

    def is_stale(self, holder: dict[str, object]) -> bool:
        started = _number(holder.get("time")) or 0.0
        if time.time() - started > self.stale_seconds:
            return True
        pid = holder.get("pid")
        if holder.get("host") != socket.gethostname() or holder.get("pidns") not in (
                None, _pid_namespace()):
            return False  # its pid means nothing here: only its age tells
        return isinstance(pid, int) and not isinstance(pid, bool) and not _alive(pid)

    def _try_create(self) -> bool:
        token = uuid.uuid4().hex
        record = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                  "token": token, "purpose": self.purpose, "pidns": _pid_namespace()}
        data = json.dumps(record).encode()
        tmp = self.path.with_name(f"{LOCK_NAME}.{token}")
        try:
            tmp.write_bytes(data)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                # no hard links here: create exclusively and write in place; a reader
                # that sees the record half written takes it as a fresh, held lock
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the lock file {self.path}: {exc}",
                             hint="expgit writers need write access to the git "
                             "directory") from None
        self._token = token
        if self.git is not None:
            self._journal = LockJournal.open(self.path, record, len(data))
            self.git.set_ref_journal(self._journal.write)
        return True

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialise removals of the lock file (stale recovery and release)."""
        with open(self.path.with_name(LOCK_NAME + ".guard"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _break_if_stale(self, seen: dict[str, object]) -> bool:
        """Remove the lock if it still holds ``seen`` and that is stale. True if the
        lock file is gone now (removed here, or released meanwhile)."""
        with self._guard():
            current = self.holder()
            if current is None:
                return True
            if current != seen or not self.is_stale(current):
                return False
            print(f"expgit: warning: removing stale lock held by {describe(current)}",
                  file=sys.stderr)
            self.recovered = recover(self.git, current)
            if self.recovered.did_something:
                print(f"expgit: {self.recovered.summary()}", file=sys.stderr)
                for warning in self.recovered.warnings:
                    print(f"expgit: warning: {warning}", file=sys.stderr)
            self.path.unlink(missing_ok=True)
            return True

    def acquire(self) -> None:
        """Take the lock, waiting up to ``wait_seconds`` for a live holder. A wait longer
        than :data:`NOTICE_AFTER` says once on stderr who holds the lock."""
        started = time.monotonic()
        deadline = started + self.wait_seconds
        delay = 0.005
        noticed = False
        while not self._try_create():
            holder = self.holder()
            if holder is None:
                continue
            if self.is_stale(holder):
                if self._break_if_stale(holder):
                    continue
                holder = self.holder() or holder  # someone else got there first
            if time.monotonic() >= deadline:
                raise LockHeldError(
                    f"the repository is locked by {describe(holder)}",
                    hint=(f"if no expgit command is running, remove {self.path}; otherwise "
                          f"it is recovered once older than {self.stale_seconds:g} seconds")
                    if holder.get("corrupt") else
                    f"wait for that writer to finish; a lock whose process is gone is "
                    f"recovered automatically (file: {self.path})")
            now = time.monotonic()
            if not noticed and now - started >= NOTICE_AFTER:
                noticed = True
                print(f"expgit: waiting for the repository lock, held by {describe(holder)} "
                      f"(up to {deadline - now:.0f} more seconds)", file=sys.stderr,
                      flush=True)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.2)

    def release(self) -> None:
        """Remove the lock file if it is still ours (under the guard, so a lock that
        was judged stale and taken over meanwhile is never removed)."""
        if self._token is None:
            return
        if self._journal is not None:
            assert self.git is not None
            self.git.set_ref_journal(None)
            self._journal.close()
            self._journal = None
        with self._guard():
            holder = self.holder()
            if holder is not None and holder.get("token") == self._token:
                self.path.unlink(missing_ok=True)
        self._token = None

    @contextlib.contextmanager
    def held(self) -> Iterator[RepoLock]:
        self.acquire()
        try:
            yield self
        finally:
            self.release()


def _stamp(value: object) -> str | None:
    started = _number(value)
    try:
        return None if started is None else (
            f"{datetime.fromtimestamp(started, UTC):%Y-%m-%d %H:%M:%S} UTC")
    except (OverflowError, OSError, ValueError):
        return None


def describe(holder: dict[str, object]) -> str:
    stamp = _stamp(holder.get("time"))
    if holder.get("corrupt"):
        return "an unreadable lock file" + (f" (last written {stamp})" if stamp else "")
    since = f" since {stamp}" if stamp else ""
    purpose = f" ({holder['purpose']})" if holder.get("purpose") else ""
    return f"pid {holder.get('pid')} on {holder.get('host')}{since}{purpose}"
