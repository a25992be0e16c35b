"""Git's own maintenance after expgit wrote objects, as git's porcelain triggers it.

expgit writes loose objects itself (:mod:`expgit.git.loose`), so the ``git maintenance
run --auto`` that ``git commit`` or ``git fetch`` start never runs: without this module a
repository fed by expgit keeps every object loose for ever. The rule is git's:

* **when**: after a command that wrote objects, once the loose objects pass ``gc.auto``
  (default 6700), estimated as git does from ``objects/17`` (more than
  ``ceil(gc.auto / 256)`` objects there), or reach ``maintenance.loose-objects.auto``
  (default 100, estimated from ``objects/00`` to ``0f``) for git's loose-objects task:
  a loose object takes a whole disk block, so 6,700 of them would outweigh the packed
  repository many times over. ``gc.auto=0`` or ``maintenance.auto=false`` turn it off;
* **what**: git's loose-objects task (``git maintenance run --auto
  --task=loose-objects``: packs loose objects, deletes those already packed, never
  prunes), git's geometric repacking (``git repack --geometric=2 -d``, what ``git
  maintenance``'s incremental strategy uses: the small packs each run leaves are rolled
  up so that every pack holds at least twice the objects of the next smaller one, a few
  packs instead of ``gc.autoPackLimit`` (50) tiny ones with no delta between them; it
  keeps every object it finds, reachable or not, and deletes the loose copies of packed
  ones; off with ``gc.autoPackLimit=0``), ``git maintenance run --auto`` (its tasks,
  its ``maintenance.*`` settings, ``gc --auto`` with git's prune grace period, never
  ``--prune=now``), then the commit-graph with changed-path Bloom filters (``git
  commit-graph write --reachable --changed-paths``) unless ``core.commitGraph`` or
  ``gc.writeCommitGraph`` is false, so that history walks (``git log -- PATH``) stay
  cheap as history grows;
* **how**: in a detached process (``gc.autoDetach``, default true) started after the
  command's output, so it never delays the result or the exit code, and never holds the
  expgit lock; with ``gc.autoDetach=false`` in the foreground, after the output. One at a
  time: a lock file (``expgit/maintenance.lock``, besides git's own ``gc.pid``).
* **failure** (a read-only object store, a full disk) is never an error: one warning
  line. A detached run records its failure in ``expgit/maintenance-failed``; the next
  due check warns with it (and tries again), and ``expgit doctor`` shows it.

Long-running processes get the same check at most every :data:`PERIOD` seconds while
they write (always detached there: never inside a write that holds a lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from expgit.git.maintenance_settings import Runner, Settings, read_settings

LOOSE_SAMPLE = 16  # fan-out folders (00..0f) counted to estimate all loose objects
PERIOD = 60.0  # seconds between checks of a long-running process that keeps writing
STATE_DIR = "expgit"
LOCK_FILE = "maintenance.lock"
FAILED_FILE = "maintenance-failed"
LEFT_FILE = "maintenance-left"  # objects/17 count a successful run left (unreachable, young)
_HEX = frozenset("0123456789abcdef")


def sample_count(objects_dir: Path) -> int:
    """Loose objects in ``objects/17``, counted as git's ``too_many_loose_objects`` does."""
    try:
        names = os.listdir(objects_dir / "17")
    except OSError:
        return 0
    return sum(1 for n in names if len(n) == 38 and _HEX.issuperset(n))


def loose_estimate(objects_dir: Path) -> int:
    """About how many loose objects there are (256 times those in ``objects/17``)."""
    return sample_count(objects_dir) * 256


def left_behind(common_dir: Path) -> int:
    """How many objects the last successful maintenance left in ``objects/17``: young
    unreachable ones git keeps for its grace period (they do not make it due again)."""
    try:
        return int((common_dir / STATE_DIR / LEFT_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def loose_sample(objects_dir: Path) -> int:
    """Loose objects in the first :data:`LOOSE_SAMPLE` fan-out folders (``00`` to
    ``0f``): a finer estimate than ``objects/17`` alone, for the small threshold of git's
    loose-objects task."""
    total = 0
    for i in range(LOOSE_SAMPLE):
        try:
            total += sum(1 for n in os.listdir(objects_dir / f"{i:02x}")
                         if len(n) == 38 and _HEX.issuperset(n))
        except OSError:
            continue
    return total


def is_overdue(common_dir: Path, objects_dir: Path, settings: Settings) -> bool:
    """Whether git's ``gc --auto`` would pack now (and the user lets it), not counting
    what the last maintenance had to leave: loose objects past ``gc.auto``."""
    count = sample_count(objects_dir)
    return (settings.enabled and settings.gc_auto > 0 and count > settings.threshold
            and count - left_behind(common_dir) > settings.threshold)


def is_due(common_dir: Path, objects_dir: Path, settings: Settings) -> bool:
    """Whether to start git's maintenance now: ``gc --auto`` would pack
    (:func:`is_overdue`), or there are ``maintenance.loose-objects.auto`` loose objects
    (about) for git's loose-objects task. ``gc.auto=0`` and ``maintenance.auto=false``
    turn both off."""
    if is_overdue(common_dir, objects_dir, settings):
        return True
    return (settings.enabled and settings.gc_auto > 0 and settings.loose_auto > 0
            and loose_sample(objects_dir) * (256 // LOOSE_SAMPLE) >= settings.loose_auto)


def failure_file(common_dir: Path) -> Path:
    return common_dir / STATE_DIR / FAILED_FILE


def last_failure(common_dir: Path) -> str | None:
    """The one line a detached maintenance that failed left, None if the last succeeded."""
    try:
        return failure_file(common_dir).read_text(encoding="utf-8").strip() or "failed"
    except OSError:
        return None


def _failure_line(proc: subprocess.CompletedProcess[bytes], what: str) -> str:
    lines = [ln.strip() for ln in proc.stderr.decode(errors="replace").splitlines()
             if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return f"{what}: {(fatal or lines or [f'exit {proc.returncode}'])[0]}"[:300]


def run_tasks(run: Runner, settings: Settings) -> str | None:
    """Git's maintenance in this process (git's own locks keep two from packing at
    once); None when it succeeded, else what failed, in one line."""
    try:
        if settings.loose_auto > 0:  # git's own threshold decides (--auto)
            proc = run("maintenance", "run", "--auto", "--quiet", "--task=loose-objects",
                       check=False)
            if proc.returncode != 0:
                return _failure_line(proc, "git maintenance")
        if settings.pack_limit > 0:  # gc.autoPackLimit=0: the user keeps packs apart
            proc = run("repack", "--geometric=2", "-d", "--quiet", check=False)
            if proc.returncode != 0:
                return _failure_line(proc, "git repack --geometric")
        proc = run("-c", "gc.autoDetach=false", "maintenance", "run", "--auto", "--quiet",
                   check=False)
        if proc.returncode != 0:
            return _failure_line(proc, "git maintenance")
        if settings.commit_graph:
            proc = run("commit-graph", "write", "--reachable", "--changed-paths",
                       "--no-progress", check=False)
            if proc.returncode != 0:
                return _failure_line(proc, "git commit-graph write")
    except OSError as exc:
        return f"git maintenance: {exc.strerror or exc}"
    return None


def _record(common_dir: Path, failure: str | None) -> None:
    path = failure_file(common_dir)
    with contextlib.suppress(OSError):
        if failure is None:
            path.unlink(missing_ok=True)
            left = sample_count(common_dir / "objects")
            (common_dir / STATE_DIR / LEFT_FILE).write_text(f"{left}\n")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(failure + "\n", encoding="utf-8")


@contextlib.contextmanager
def _exclusive(common_dir: Path) -> Iterator[bool]:
    """Held while this process maintains the repository; yields False when another
    process is at it (or the lock cannot be made: then git's own locks still hold)."""
    try:
        (common_dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
        fd = os.open(common_dir / STATE_DIR / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def maintain_now(common_dir: Path, run: Runner, settings: Settings) -> str | None:
    """Run the maintenance here and now (``doctor --fix``, ``gc.autoDetach=false``): None
    when done (or another process is at it), else the failure in one line."""
    with _exclusive(common_dir) as mine:
        if not mine:
            return None
        failure = run_tasks(run, settings)
        _record(common_dir, failure)
        return failure


@dataclass(frozen=True)
class Target:
    """What maintaining one repository needs: where it is and the environment of a git
    process there (nothing that keeps the repository object alive)."""

    common_dir: Path
    objects_dir: Path
    environ: Callable[[], Mapping[str, str]]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", *args], capture_output=True, check=check,
                              stdin=subprocess.DEVNULL, env=dict(self.environ()),
                              cwd=self.common_dir)


_children: list[subprocess.Popen[bytes]] = []  # detached runs, reaped by later checks
_children_lock = threading.Lock()


def _spawn(target: Target) -> str | None:
    """Start the detached maintenance; None, or why it could not start."""
    with _children_lock:
        _children[:] = [c for c in _children if c.poll() is None]
        try:
            _children.append(subprocess.Popen(
                [sys.executable, "-m", "expgit.git.maintenance", str(target.common_dir)],
                env=dict(target.environ()), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                start_new_session=True, cwd=str(target.common_dir)))
        except OSError as exc:
            return f"could not start git maintenance: {exc.strerror or exc}"
    return None


def check(target: Target, *, foreground: bool | None = None) -> list[str]:
    """Maintain the repository if it is due (detached unless ``gc.autoDetach=false`` or
    ``foreground``); the warning lines to print (none when all went well)."""
    if sample_count(target.objects_dir) <= 1 and loose_sample(target.objects_dir) == 0:
        return []  # below any threshold: no process at all
    if "GIT_QUARANTINE_PATH" in os.environ:  # a push in progress: git forbids it there
        return []
    settings = read_settings(target.run)
    if not is_due(target.common_dir, target.objects_dir, settings):
        return []
    loose = loose_estimate(target.objects_dir)
    warnings = []
    earlier = last_failure(target.common_dir)
    if earlier is not None:
        warnings.append(f"git maintenance failed earlier ({earlier}); trying again")
    if not os.access(target.objects_dir, os.W_OK):
        return [f"about {loose} loose objects, but {target.objects_dir} is read-only: "
                "git maintenance skipped"]
    run_here = (not settings.detach) if foreground is None else foreground
    failure = maintain_now(target.common_dir, target.run, settings) if run_here \
        else _spawn(target)
    if failure is not None:
        warnings = [f"{failure} (about {loose} loose objects; the command's result stands)"]
    return warnings


@dataclass(frozen=True)
class Status:
    """What ``expgit doctor`` reports: whether maintenance is due and how it went."""

    due: bool
    loose: int  # estimated loose objects
    threshold: int  # gc.auto (0: automatic maintenance off)
    failure: str | None  # what the last maintenance that failed said


def status(target: Target) -> Status:
    settings = read_settings(target.run)
    return Status(is_overdue(target.common_dir, target.objects_dir, settings),
                  loose_estimate(target.objects_dir),
                  settings.gc_auto if settings.enabled else 0,
                  last_failure(target.common_dir))


def maintain(target: Target) -> str | None:
    """Maintain the repository now, in the foreground (``doctor --fix``); None when done,
    else the failure in one line."""
    if not os.access(target.objects_dir, os.W_OK):
        return f"{target.objects_dir} is read-only: git maintenance skipped"
    return maintain_now(target.common_dir, target.run, read_settings(target.run))


class Watch:
    """Tells this module a repository wrote objects; one per :class:`GitRepo`."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._checked = time.monotonic()

    def wrote(self) -> None:
        """Called for every object written: cheap unless a check is due."""
        _pending.setdefault(self.target.common_dir, self.target)
        if time.monotonic() - self._checked >= PERIOD:  # a long-running writer
            self._checked = time.monotonic()
            with contextlib.suppress(Exception):  # never fails the write
                check(self.target, foreground=False)


_pending: dict[Path, Target] = {}  # repositories written to since the last command ended


def after_command() -> list[str]:
    """At the end of a command, after its output: maintain each repository it wrote to
    when due; the warning lines to print. Never raises."""
    warnings: list[str] = []
    while _pending:
        _, target = _pending.popitem()
        try:
            warnings += check(target)
        except Exception as exc:  # maintenance never fails a command
            warnings.append(f"git maintenance skipped: {type(exc).__name__}: {exc}")
    return warnings


def _child(argv: list[str]) -> int:
    """The detached run: ``python -m expgit.git.maintenance COMMON_DIR`` with the git
    environment of the repository."""
    common_dir = Path(argv[0])
    target = Target(common_dir, common_dir / "objects", lambda: os.environ)
    maintain_now(common_dir, target.run, read_settings(target.run))
    return 0


if __name__ == "__main__":  # pragma: no cover - run detached, tested through check()
    sys.exit(_child(sys.argv[1:]))
