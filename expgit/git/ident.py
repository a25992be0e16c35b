"""Author and committer identities as ``git commit-tree`` records them, without a process
per commit.

git takes an identity from ``GIT_AUTHOR_NAME``/``GIT_AUTHOR_EMAIL`` (``GIT_COMMITTER_*``),
the ``author.*``/``committer.*``/``user.*`` settings, ``EMAIL`` and the system, with strict
rules (``user.useConfigOnly``, no empty name): ``git var GIT_AUTHOR_IDENT`` applies exactly
the rules ``git commit-tree`` applies. Its ``Name <email>`` part is asked once per
repository object and environment: like git's own long-lived processes (``cat-file
--batch``), a GitRepo reads the configuration files when it first needs them; a change of
``os.environ`` (``GIT_AUTHOR_NAME``, ``HOME``, ...) makes it ask again. The date is git's:
``GIT_AUTHOR_DATE``/``GIT_COMMITTER_DATE`` when set (git parses it; its answer is kept with
the name), else the current second and the local UTC offset, formatted as git formats
them (``1700000000 +0100``).

A machine with no identity at all (``git var`` refuses) gets :func:`fallback_ident`.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

from expgit.git.env import environ_key
from expgit.git.objects import WRITER_CONFIG, loose_level

KINDS = ("AUTHOR", "COMMITTER")


def git_date(now: float) -> str:
    """``<seconds> <+hhmm>``: the time and local UTC offset as git writes them."""
    seconds = int(now)
    offset = (time.localtime(seconds).tm_gmtoff or 0) // 60
    sign = "-" if offset < 0 else "+"
    offset = abs(offset)
    return f"{seconds} {sign}{offset // 60:02d}{offset % 60:02d}"


def fallback_ident(now: float) -> str:
    """A neutral ``Name <email> <time> <tz>`` for a machine with no identity configured."""
    return f"expgit <expgit@localhost> {git_date(now)}"


GitRun = Callable[..., "subprocess.CompletedProcess[bytes]"]
"""``run(*args, input=..., check=False)``: one git process on the repository."""


class Identities:
    """The identities of one repository's commits, asked of git (``git var
    GIT_<kind>_IDENT``) once and then kept."""

    def __init__(self, run: GitRun) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._key: object = None
        self._known: dict[str, tuple[str, bool] | None] = {}

    def line(self, kind: str, now: float | None = None) -> str:
        """``Name <email> <seconds> <+hhmm>`` for ``kind`` (AUTHOR or COMMITTER), as
        ``git commit-tree`` would record it now (:func:`fallback_ident` when git has
        none). Kept by the environment (:func:`~expgit.git.env.environ_key`)."""
        when = time.time() if now is None else now
        key = environ_key()
        with self._lock:
            if key != self._key:
                if self._key is not None:
                    time.tzset()  # TZ may be what changed: local offsets as git sees them
                self._known, self._key = {}, key
            if kind not in self._known:
                proc = self._run("var", f"GIT_{kind}_IDENT", check=False)
                text = proc.stdout.decode().strip() if proc.returncode == 0 else ""
                fixed = bool(os.environ.get(f"GIT_{kind}_DATE"))
                if text and not fixed:
                    text = text.rsplit(" ", 2)[0]
                self._known[kind] = (text, fixed) if text else None
            known = self._known[kind]
        if known is None:
            return fallback_ident(when)
        text, fixed = known
        return text if fixed else f"{text} {git_date(when)}"


class WriterSettings:
    """The zlib level of loose objects (None: git must write them, see
    :func:`expgit.git.objects.loose_level`), asked of ``git config`` once, and again
    when the environment changed."""

    def __init__(self, run: GitRun) -> None:
        self._run = run
        self._cached: tuple[object, int | None] | None = None

    def level(self) -> int | None:
        key = environ_key()
        cached = self._cached
        if cached is None or cached[0] != key:
            config = self._run("config", "-z", "--get-regexp", WRITER_CONFIG,
                               check=False).stdout
            cached = self._cached = (key, loose_level(config))
        return cached[1]
