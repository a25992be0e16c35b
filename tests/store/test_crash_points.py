"""A writer killed at each file operation of ``apply``'s ref transaction; the next
command recovers with no manual step.

The writer runs ``expgit apply`` in a child process whose audit hook (``sys.addaudithook``,
no hook in expgit itself) counts the file operations on refs, reflogs, ``HEAD``,
``packed-refs`` and the expgit lock, each ``renameat2`` call and each git process, and
``os._exit``\\s at the N-th: a crash between two system calls, for every N. Then a second
``apply`` of the same proposal and one of another must succeed, and the repository must be
whole: ``main`` has both, no lock file is left, the clean working tree follows ``main``,
``git fsck`` is clean and ``expgit doctor`` finds nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE, fsck, git, run_expgit

from expgit.init import init_repository
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import list_proposals, merge

CRASHING_APPLY = r"""
import os, sys
at, seen = int(os.environ["CRASH_AT"]), [0]
git_dir = os.environ["CRASH_GIT_DIR"]
watched = (os.path.join(git_dir, "refs"), os.path.join(git_dir, "logs"),
           os.path.join(git_dir, "HEAD"), os.path.join(git_dir, "packed-refs"),
           os.path.join(git_dir, "expgit.lock"))
writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND

def counts(event, args):
    if event in ("ctypes.call_function", "subprocess.Popen"):
        return True
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & writes)
        return writing and isinstance(path, str) and path.startswith(watched)
    if event in ("os.rename", "os.remove", "os.link", "os.rmdir", "os.mkdir"):
        return isinstance(args[0], str) and args[0].startswith(watched)
    return False

def hook(event, args):
    if counts(event, args):
        seen[0] += 1
        if seen[0] == at:
            os._exit(137)

sys.addaudithook(hook)
from expgit.cli import main
code = main(sys.argv[1:])
with open(os.environ["CRASH_COUNT"], "w") as out:
    out.write(str(seen[0]))
sys.exit(code)
"""


def _template(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "template"
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo = ExperienceRepository.open(path)
    pids = []
    for name in ("refund-method-rules", "checked-baggage-allowance"):
        entry = repo.snapshot().get(name)
        assert entry is not None
        gradient = propose(repo, GradientRequest(name=name, content=entry.text + "\n- New.\n",
                                                 rationale="seen in rollouts"))
        pids.append(merge(repo, [gradient.id]).id)
    return path, pids[0], pids[1]


def _crash(path: Path, at: int, pid: str, count_file: Path) -> int:
    env = {**os.environ, "CRASH_AT": str(at), "CRASH_GIT_DIR": str(path / ".git"),
           "CRASH_COUNT": str(count_file)}
    proc = subprocess.run([sys.executable, "-c", CRASHING_APPLY, "apply", pid], cwd=path,
                          env=env, capture_output=True, text=True)
    return proc.returncode


def _lock_files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in (path / ".git").rglob("*.lock"))


@pytest.mark.slow("minutes")
def test_apply_killed_at_every_file_operation_is_recovered_by_the_next(tmp_path: Path) -> None:
    template, first, second = _template(tmp_path)
    counted = tmp_path / "count"
    clean = tmp_path / "clean"
    shutil.copytree(template, clean, symlinks=True)
    assert _crash(clean, 0, first, counted) == 0
    total = int(counted.read_text())
    assert total >= 10, f"only {total} operations counted: the hook watches the wrong paths"

    outcomes: dict[str, int] = {}
    for at in range(1, total + 1):
        path = tmp_path / f"crash-{at}"
        shutil.copytree(template, path, symlinks=True)
        code = _crash(path, at, first, counted)
        assert code in (0, 137), f"kill point {at}: exit {code}"
        again = run_expgit("apply", first, cwd=path)
        assert again.returncode == 0 or (
            again.returncode == 3 and "already applied" in again.stderr), (
            f"kill point {at}: the next apply of the same proposal: {again.stderr}")
        outcomes["main moved" if again.returncode == 3 else "main not moved"] = \
            outcomes.get("main moved" if again.returncode == 3 else "main not moved", 0) + 1
        other = run_expgit("apply", second, cwd=path)
        assert other.returncode == 0, f"kill point {at}: the next apply: {other.stderr}"

        assert _lock_files(path) == [], f"kill point {at}: lock files left"
        assert git(path, "status", "--porcelain", "--untracked-files=no") == "", (
            f"kill point {at}: the working tree did not follow main")
        repo = ExperienceRepository.open(path)
        assert [p.id for p in list_proposals(repo)] == [], f"kill point {at}"
        assert sorted(p.id for p in list_proposals(repo, ("applied",))) == sorted(
            [first, second]), f"kill point {at}"
        doctor = run_expgit("doctor", cwd=path)
        assert doctor.returncode == 0 and "healthy" in doctor.stdout, (
            f"kill point {at}: {doctor.stdout}{doctor.stderr}")
        fsck(path)
        shutil.rmtree(path)
    # both sides of the compare-and-swap were hit
    assert outcomes.get("main moved") and outcomes.get("main not moved"), outcomes
