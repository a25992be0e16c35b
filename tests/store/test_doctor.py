"""``expgit doctor``: a diagnosis that changes nothing, and ``--fix``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLE, git, repo_state, run_expgit
from json_shapes import assert_shape

from expgit.init import init_repository
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import list_proposals, merge


def _repo(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "repo"
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo = ExperienceRepository.open(path)
    entry = repo.snapshot().get("refund-method-rules")
    assert entry is not None
    propose(repo, GradientRequest(name="refund-method-rules", content=entry.text + "\n- x\n",
                                  rationale="why"))
    return path, merge(repo).id


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_healthy(tmp_path: Path) -> None:
    path, _ = _repo(tmp_path)
    result = run_expgit("doctor", "--json", cwd=path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert_shape("doctor", data)
    assert data["healthy"] is True and data["lock"] == "free"


def test_a_forge_merge_leaves_branches_that_fix_settles(tmp_path: Path) -> None:
    path, pid = _repo(tmp_path)
    git(path, "merge", "-q", "--ff-only", f"expgit/proposals/{pid}")
    before = repo_state(path)
    shown = run_expgit("doctor", cwd=path)
    assert shown.returncode == 3, shown.stdout + shown.stderr
    assert f"refs/heads/expgit/proposals/{pid}" in shown.stdout
    assert "expgit doctor --fix" in shown.stdout
    assert repo_state(path) == before  # a diagnosis writes nothing
    fixed = run_expgit("doctor", "--fix", cwd=path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert git(path, "branch", "--list", "expgit/*") == ""
    repo = ExperienceRepository.open(path)
    assert [p.id for p in list_proposals(repo, ("applied",))] == [pid]


@pytest.mark.slow
def test_a_dead_writers_leftovers_are_shown_then_recovered(tmp_path: Path) -> None:
    path, pid = _repo(tmp_path)
    git_dir = path / ".git"
    main = git(path, "rev-parse", "main").strip()
    proposal = git(path, "rev-parse", f"expgit/proposals/{pid}").strip()
    mine = git_dir / "refs" / "heads" / "main.lock"
    mine.write_text(proposal + "\n")
    foreign = git_dir / "refs" / "heads" / "other.lock"
    foreign.write_text("")
    record = {"pid": _dead_pid(), "host": socket.gethostname(), "time": time.time(),
              "token": "t", "purpose": "expgit apply " + pid,
              "pidns": os.readlink("/proc/self/ns/pid"),
              "ref_locks": [str(mine)], "updates": [["refs/heads/main", main, proposal]]}
    (git_dir / "expgit.lock").write_text(json.dumps(record))

    shown = run_expgit("doctor", cwd=path)
    assert shown.returncode == 4, shown.stdout + shown.stderr  # the foreign lock is held
    assert "lock: stale" in shown.stdout and "refs/heads/main.lock" in shown.stdout
    assert "refs/heads/other.lock" in shown.stdout
    assert mine.exists() and foreign.exists()

    fixed = run_expgit("doctor", "--fix", cwd=path)
    assert "removed 1 ref lock file" in fixed.stderr, fixed.stderr
    assert not mine.exists() and not (git_dir / "expgit.lock").exists()
    assert foreign.exists()  # not the dead writer's: never touched
    assert fixed.returncode == 4 and "refs/heads/other.lock" in fixed.stdout
    assert git(path, "rev-parse", "main").strip() == main  # nothing was installed
    foreign.unlink()
    assert run_expgit("apply", pid, cwd=path).returncode == 0
    assert run_expgit("doctor", cwd=path).returncode == 0


@pytest.mark.slow
def test_recovery_removes_only_lock_files_expgit_makes_inside_the_git_dir(
        tmp_path: Path) -> None:
    """A crash record is a file in the git dir: whatever else it lists (a path outside,
    ``..``, a symbolic link out, a name no ref transaction makes) is never deleted."""
    path, pid = _repo(tmp_path)
    git_dir = path / ".git"
    main = git(path, "rev-parse", "main").strip()
    proposal = git(path, "rev-parse", f"expgit/proposals/{pid}").strip()
    mine = git_dir / "refs" / "heads" / "main.lock"
    mine.write_text(proposal + "\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    victims = [outside / "victim.lock", tmp_path / "outside.lock", git_dir / "config.lock",
               outside / "linked.lock"]
    for victim in victims:
        victim.write_text("keep me\n")
    (git_dir / "refs" / "heads" / "out").symlink_to(outside)  # a folder link out
    (git_dir / "refs" / "heads" / "x.lock").symlink_to(victims[1])  # a file link
    record = {"pid": _dead_pid(), "host": socket.gethostname(), "time": time.time(),
              "token": "t", "purpose": "expgit apply " + pid,
              "pidns": os.readlink("/proc/self/ns/pid"),
              "ref_locks": [str(mine), str(victims[0]), "../outside.lock",
                            str(git_dir / ".." / ".." / "outside.lock"),
                            str(git_dir / "config.lock"),
                            str(git_dir / "refs" / "heads" / "out" / "linked.lock"),
                            str(git_dir / "refs" / "heads" / "x.lock")],
              "updates": [["refs/heads/main", main, proposal]]}
    (git_dir / "expgit.lock").write_text(json.dumps(record))

    shown = run_expgit("doctor", "--json", cwd=path)
    assert json.loads(shown.stdout)["dead_writer_locks"] == ["refs/heads/main.lock"]

    recovered = run_expgit("apply", pid, cwd=path)  # takes the stale lock: recovers
    assert recovered.returncode == 0, recovered.stderr
    assert "removed 1 ref lock file it left" in recovered.stderr
    assert "left alone 6 recorded files that no ref transaction of expgit makes" \
        in recovered.stderr
    assert all(victim.read_text() == "keep me\n" for victim in victims)
    assert (git_dir / "refs" / "heads" / "x.lock").is_symlink()
    assert not (git_dir / "expgit.lock").exists()
    assert git(path, "rev-parse", "main").strip() != main  # the legitimate lock cleared
