"""The expgit writer lock: one file in the git dir, created exclusively.

The lock serialises expgit writers (apply, revert, reject) on one repository; the move
of ``main`` itself is still a compare-and-swap, so a writer that bypasses the lock (a
plain ``git push``) can never be overwritten, only detected.

The lock file is written completely under a temporary name and then hard-linked into
place, so a reader never sees a half-written holder record. A holder whose process is
gone (same host) or whose record is older than ``stale_seconds`` is stale and is removed
automatically; the removal itself is serialised by ``flock`` on a guard file, so two
recovering writers cannot remove each other's fresh lock.
"""

from __future__ import annotations

import contextlib
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

from expgit.errors import LockHeldError

LOCK_NAME = "expgit.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RepoLock:
    def __init__(self, git_dir: Path, *, wait_seconds: float, stale_seconds: float,
                 purpose: str = "") -> None:
        self.path = git_dir / LOCK_NAME
        self.wait_seconds = wait_seconds
        self.stale_seconds = stale_seconds
        self.purpose = purpose or " ".join(sys.argv[:3])
        self._token: str | None = None

    def holder(self) -> dict[str, object] | None:
        try:
            return dict(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, OSError):
            return {"corrupt": True, "time": self.path.stat().st_mtime}

    def _is_stale(self, holder: dict[str, object]) -> bool:
        started = float(str(holder.get("time", 0)))
        if time.time() - started > self.stale_seconds:
            return True
        pid = holder.get("pid")
        return (holder.get("host") == socket.gethostname() and isinstance(pid, int)
                and not _alive(pid))

    def _try_create(self) -> bool:
        token = uuid.uuid4().hex
        record = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                  "token": token, "purpose": self.purpose}
        tmp = self.path.with_name(f"{LOCK_NAME}.{token}")
        tmp.write_text(json.dumps(record))
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        self._token = token
        return True

    def _break_if_stale(self, seen: dict[str, object]) -> bool:
        guard = self.path.with_name(LOCK_NAME + ".guard")
        with open(guard, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            current = self.holder()
            if current is None:
                return True
            if current != seen or not self._is_stale(current):
                return False
            print(f"expgit: warning: removing stale lock held by {describe(current)}",
                  file=sys.stderr)
            self.path.unlink(missing_ok=True)
            return True

    def acquire(self) -> None:
        deadline = time.monotonic() + self.wait_seconds
        delay = 0.005
        while not self._try_create():
            holder = self.holder()
            if holder is None or (self._is_stale(holder) and self._break_if_stale(holder)):
                continue
            if time.monotonic() >= deadline:
                raise LockHeldError(
                    f"the repository is locked by {describe(holder)}",
                    hint=f"wait for that writer to finish; a lock whose process is gone is "
                    f"recovered automatically (file: {self.path})")
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.2)

    def release(self) -> None:
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


def describe(holder: dict[str, object]) -> str:
    if holder.get("corrupt"):
        return "an unreadable lock file"
    stamp = datetime.fromtimestamp(float(str(holder.get("time", 0))), UTC)
    purpose = f" ({holder['purpose']})" if holder.get("purpose") else ""
    return (f"pid {holder.get('pid')} on {holder.get('host')} since "
            f"{stamp:%Y-%m-%d %H:%M:%S} UTC{purpose}")
