"""Git's own automatic maintenance after a command wrote objects, as ``git commit`` runs it.

expgit writes objects without ``git commit`` or ``git fetch``, whose ``git maintenance run
--auto`` would otherwise never run: a repository fed by expgit would keep every object
loose for ever. So once a command that wrote objects has printed its result, expgit runs
what git runs, unless ``maintenance.auto`` is false:

* ``git maintenance run --auto --quiet`` with the tasks ``commit-graph``, ``loose-objects``
  and ``gc``: git decides what is due (``maintenance.commit-graph.auto``,
  ``maintenance.loose-objects.auto``, ``gc.auto``, ``gc.autoPackLimit``; ``gc.auto=0``
  turns packing off) and ``git gc --auto`` detaches itself as ``gc.autoDetach`` says, so it
  never delays the exit code. git's locks keep two from running at once, and a detached
  ``gc`` that failed leaves ``gc.log``, which git reports at its next run. The
  ``loose-objects`` task (which ``git commit`` does not run) packs loose objects from 100
  on: 1,000 sessions ingested take 0.75 MiB instead of 19 MiB of loose objects below
  ``gc.auto`` (docs/development.md);
* the first commit-graph is written with changed-path Bloom filters (``git commit-graph
  write --reachable --changed-paths``), which ``expgit log`` relies on: git keeps them in
  every later commit-graph it writes (its ``commit-graph`` task, ``gc``). Not when
  ``core.commitGraph`` or ``gc.writeCommitGraph`` is false.

A failure (a read-only object store, a full disk) is never an error: one warning line,
and the command's result stands. ``expgit doctor`` shows the loose objects against
``gc.auto`` and ``gc.log``; ``doctor --fix`` runs ``git gc`` in the foreground. A
long-running process runs the same at most every :data:`PERIOD` seconds while it writes,
in a thread of its own.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

PERIOD = 60.0  # seconds between maintenances of a long-running process that keeps writing
GC_AUTO_DEFAULT = 6700
_FALSE = ("false", "no", "off", "0")
_CONFIG = r"^(maintenance\.auto|core\.commitgraph|gc\.writecommitgraph|gc\.auto)$"


@dataclass(frozen=True)
class Target:
    """What maintaining one repository needs: where it is and the environment of a git
    process there (nothing that keeps the repository object alive)."""

    common_dir: Path
    objects_dir: Path
    environ: Callable[[], Mapping[str, str]]

    def run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", *args], capture_output=True, check=False,
                              stdin=subprocess.DEVNULL, env=dict(self.environ()),
                              cwd=self.common_dir)

    def config(self) -> dict[str, str]:
        """The settings that decide the maintenance, lower-case names (last value wins)."""
        out = self.run("config", "-z", "--get-regexp", _CONFIG).stdout.decode(errors="replace")
        return {key.lower(): value.strip().lower() for item in out.split("\0")
                for key, _, value in [item.partition("\n")] if key}


def _failure(proc: subprocess.CompletedProcess[bytes], what: str) -> str:
    lines = [ln.strip() for ln in proc.stderr.decode(errors="replace").splitlines()
             if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return f"{what}: {(fatal or lines or [f'exit {proc.returncode}'])[0]}"[:300]


def has_bloom_filters(objects_dir: Path) -> bool:
    """Whether the commit-graph (its base layer, for a chain of them) has changed-path
    Bloom filters: a ``BIDX`` chunk in its table of contents."""
    info = objects_dir / "info"
    graph = info / "commit-graph"
    with contextlib.suppress(OSError, IndexError):
        if not graph.is_file():
            base = (info / "commit-graphs" / "commit-graph-chain").read_text().split()[0]
            graph = info / "commit-graphs" / f"graph-{base}.graph"
        with open(graph, "rb") as handle:
            return b"BIDX" in handle.read(256)
    return False


def maintain(target: Target, *, full: bool = False) -> str | None:
    """git's maintenance of ``target`` now (see the module; ``full``: ``git gc``, as
    ``doctor --fix`` asks); None when it went well, else what failed, in one line."""
    config = target.config()
    if not full and config.get("maintenance.auto") in _FALSE:
        return None
    try:
        if full:
            proc = target.run("gc", "--quiet")
        else:
            packing = config.get("gc.auto") != "0"  # as for gc: no loose-objects task
            proc = target.run("maintenance", "run", "--auto", "--quiet", "--task=commit-graph",
                              *(["--task=loose-objects"] if packing else []), "--task=gc")
        if proc.returncode != 0:
            return _failure(proc, "git gc" if full else "git maintenance")
        graphs = all(config.get(k) not in _FALSE
                     for k in ("core.commitgraph", "gc.writecommitgraph"))
        if graphs and not has_bloom_filters(target.objects_dir):
            proc = target.run("commit-graph", "write", "--reachable", "--changed-paths",
                              "--no-progress")
            if proc.returncode != 0:
                return _failure(proc, "git commit-graph write")
    except OSError as exc:
        return f"git maintenance: {exc.strerror or exc}"
    return None


@dataclass(frozen=True)
class Status:
    """What ``expgit doctor`` reports: whether git's ``gc --auto`` is overdue."""

    due: bool  # more loose objects than gc.auto (and gc.auto is not 0)
    loose: int  # loose objects (``git count-objects``)
    threshold: int  # gc.auto (0: automatic packing off)
    failure: str | None  # what the last detached gc left in gc.log


def status(target: Target) -> Status:
    config = target.config()
    counts = dict(line.partition(": ")[::2] for line in
                  target.run("count-objects", "-v").stdout.decode().splitlines())
    loose = int(counts.get("count", "0") or 0)
    try:
        gc_auto = max(0, int(config.get("gc.auto", GC_AUTO_DEFAULT)))
    except ValueError:
        gc_auto = GC_AUTO_DEFAULT
    if config.get("maintenance.auto") in _FALSE:
        gc_auto = 0
    try:
        failure: str | None = (target.common_dir / "gc.log").read_text().strip() or None
    except OSError:
        failure = None
    return Status(0 < gc_auto < loose, loose, gc_auto, failure and failure.splitlines()[0])


class Watch:
    """Told that a repository wrote objects; one per :class:`~expgit.git.repo.GitRepo`."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._checked = time.monotonic()

    def wrote(self) -> None:
        """Called for every object written: cheap unless a long-running writer is due."""
        _pending.setdefault(self.target.common_dir, self.target)
        if time.monotonic() - self._checked >= PERIOD:
            self._checked = time.monotonic()
            thread = threading.Thread(target=maintain, args=(self.target,), daemon=True,
                                      name="expgit-maintenance")
            _threads.append(thread)
            thread.start()


_pending: dict[Path, Target] = {}  # repositories written to since the last command ended
_threads: list[threading.Thread] = []  # maintenances of long-running writers


def after_command() -> list[str]:
    """At the end of a command, after its output: maintain each repository it wrote to;
    the warning lines to print. Never raises."""
    warnings: list[str] = []
    while _pending:
        _, target = _pending.popitem()
        if "GIT_QUARANTINE_PATH" in os.environ:  # a push in progress: git forbids it there
            continue
        try:
            failure = maintain(target)
        except Exception as exc:  # maintenance never fails a command
            failure = f"git maintenance skipped: {type(exc).__name__}: {exc}"
        if failure is not None:
            warnings.append(f"{failure} (the command's result stands)")
    return warnings
