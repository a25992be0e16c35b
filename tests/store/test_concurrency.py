"""Many writers at once, and writers that die: real ``python -m expgit`` processes.

* eight ``expgit apply`` processes, started together, each applying a different proposal
  made from the same ``main``: all succeed, one after the other, in a linear history;
* a writer killed while it holds the lock does not block the next one for ever;
* a live writer that holds the lock makes ``apply`` give up after ``lock_wait_seconds``
  (exit 4) naming the holder, with nothing changed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, edited, fsck, git, run_expgit

from expgit.errors import EXIT_LOCKED, LockHeldError
from expgit.init import init_repository
from expgit.store.lock import LOCK_NAME
from expgit.store.refnames import GRADIENTS, PROPOSAL_STATES, PROPOSALS
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import apply_proposal
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import merge

EXAMPLE = ROOT / "example_repo"
WRITERS = 8


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Child processes import this checkout's expgit even when it is not installed."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def make_proposals(repo: ExperienceRepository, names: list[str], tag: str
                   ) -> dict[str, tuple[str, str]]:
    """One proposal per experience, all planned on the current main:
    ``{proposal id: (experience, new text)}``."""
    made = {}
    for name in names:
        text = edited(name, f"\nNote {tag}: remember {name} when it applies.\n", repo)
        gradient = propose(repo, GradientRequest(name=name, content=text,
                                                 rationale=f"{tag} for {name}",
                                                 evidence=[f"test:{tag}"]))
        made[merge(repo, [gradient.id]).id] = (name, text)
    return made


def apply_together(paths: Path | list[Path], ids: list[str]) -> list[tuple[int, str, str]]:
    """Start one ``expgit apply --json`` process per id at once (in ``paths`` in turn);
    (code, out, err) of each."""
    where = paths if isinstance(paths, list) else [paths]
    procs = [subprocess.Popen([sys.executable, "-m", "expgit", "-C", str(where[i % len(where)]),
                               "apply", pid, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i, pid in enumerate(ids)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append((proc.returncode, out, err))
    return results


def main_of(path: Path) -> str:
    return git(path, "rev-parse", "refs/heads/main").strip()


@pytest.mark.parametrize("kind", ["worktree", "bare", "linked-worktrees"])
@pytest.mark.slow
def test_eight_writers_at_once_all_land_in_a_linear_history(tmp_path: Path,
                                                            kind: str) -> None:
    bare = kind == "bare"
    path = tmp_path / ("server.git" if bare else "repo")
    init_repository(path, bare=bare, seed=EXAMPLE, layout="flat")
    places = [path]
    if kind == "linked-worktrees":  # half the writers run in another work tree of it
        git(path, "worktree", "add", "-q", "-b", "review", str(tmp_path / "review"))
        places.append(tmp_path / "review")
    repo = ExperienceRepository.open(path)
    names = sorted(repo.snapshot().entries)[:WRITERS]
    assert len(names) == WRITERS
    base = repo.main_commit()
    made = make_proposals(repo, names, "concurrent")
    assert {repo.git.read_commit(repo.commit(PROPOSALS + pid)).parents[0]
            for pid in made} == {base}

    results = apply_together(places, list(made))

    report = "\n".join(f"exit {code}: {out} {err}" for code, out, err in results)
    assert [code for code, _out, _err in results] == [0] * WRITERS, report
    applied = [json.loads(out) for _code, out, _err in results]
    assert sorted(a["proposal"] for a in applied) == sorted(made)
    # one of them found main where the proposals were planned; the rest were rebuilt
    assert sorted(a["rebased"] for a in applied) == [False] + [True] * (WRITERS - 1), report
    # they went one after the other: each moved main from where the previous one left it
    commits = {a["commit"] for a in applied}
    assert {a["previous"] for a in applied} == {base} | commits - {main_of(path)}

    first_parent = git(path, "rev-list", "--first-parent", f"{base}..main").split()
    assert len(first_parent) == WRITERS and set(first_parent) == commits
    assert git(path, "rev-list", f"{base}..main").split() == first_parent
    assert git(path, "rev-list", "--merges", "main").split() == []
    assert git(path, "rev-list", "--count", "main").strip() == str(WRITERS + 1)

    final = ExperienceRepository.open(path).snapshot()
    for name, text in made.values():
        assert final.get(name) is not None and final.get(name).text == text  # type: ignore[union-attr]
    assert git(path, "for-each-ref", PROPOSALS, GRADIENTS) == ""
    assert len(git(path, "for-each-ref", PROPOSAL_STATES["applied"]).splitlines()) == WRITERS
    assert not (repo.git.common_dir / LOCK_NAME).exists()
    fsck(path)
    if not bare:
        # the checked-out main followed every move
        assert git(path, "status", "--porcelain") == ""
        for name, text in made.values():
            assert (path / "experiences" / f"{name}.md").read_text() == text


@pytest.mark.slow
def test_same_proposal_applied_by_many_at_once_lands_once(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo = ExperienceRepository.open(path)
    base = repo.main_commit()
    ((pid, (name, text)),) = make_proposals(repo, ["refund-method-rules"], "once").items()

    results = apply_together(path, [pid] * 4)

    codes = sorted(code for code, _out, _err in results)
    assert codes == [0, 3, 3, 3], results
    for code, _out, err in results:
        assert code == 0 or f"proposal {pid} was already applied" in err
    assert git(path, "rev-list", "--count", f"{base}..main").strip() == "1"
    assert ExperienceRepository.open(path).snapshot().get(name).text == text  # type: ignore[union-attr]


# ------------------------------------------------------------------ crashed writers
CRASH_WHILE_LOCKED = textwrap.dedent("""
    import os, signal, sys
    from expgit.store.repository import ExperienceRepository
    repo = ExperienceRepository.open(sys.argv[1])
    repo.lock("expgit apply (crashing writer)").acquire()
    os.kill(os.getpid(), signal.SIGKILL)
""")

HOLD = textwrap.dedent("""
    import sys
    from expgit.store.repository import ExperienceRepository
    repo = ExperienceRepository.open(sys.argv[1])
    with repo.lock("expgit apply (slow writer)").held():
        print("locked", flush=True)
        sys.stdin.readline()
""")


def start_holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "locked\n", proc.communicate()[1]
    return proc


@pytest.fixture
def repo(tmp_path: Path) -> ExperienceRepository:
    init_repository(tmp_path / "repo", seed=EXAMPLE, layout="flat")
    return ExperienceRepository.open(tmp_path / "repo")


def the_proposal(repo: ExperienceRepository, name: str = "refund-method-rules"
                 ) -> tuple[str, str]:
    ((pid, (_name, text)),) = make_proposals(repo, [name], "crash").items()
    return pid, text


@pytest.mark.parametrize("how", ["kills-itself", "killed-by-test"])
@pytest.mark.slow
def test_apply_recovers_the_lock_of_a_killed_writer(repo: ExperienceRepository,
                                                    how: str) -> None:
    path = repo.git.work_tree
    assert path is not None
    pid, text = the_proposal(repo)
    if how == "kills-itself":
        writer = subprocess.Popen([sys.executable, "-c", CRASH_WHILE_LOCKED, str(path)],
                                  stderr=subprocess.PIPE)
        writer.wait(timeout=60)
    else:
        writer = start_holder(path)  # type: ignore[assignment]
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL
    lock_file = repo.git.common_dir / LOCK_NAME
    assert json.loads(lock_file.read_text())["pid"] == writer.pid

    started = time.monotonic()
    proc = run_expgit("-C", path, "apply", pid)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 20  # recovered, not waited out
    assert "warning: removing stale lock" in proc.stderr
    assert f"pid {writer.pid} on {socket.gethostname()}" in proc.stderr
    assert "crashing writer" in proc.stderr or "slow writer" in proc.stderr
    assert ExperienceRepository.open(path).snapshot().get(
        "refund-method-rules").text == text  # type: ignore[union-attr]
    assert not lock_file.exists()
    fsck(path)


@pytest.mark.slow
def test_apply_gives_up_on_a_live_holder_after_lock_wait_seconds(
        repo: ExperienceRepository) -> None:
    path = repo.git.work_tree
    assert path is not None
    settings = path / "expgit.toml"
    settings.write_text(settings.read_text() + "lock_wait_seconds = 0.5\n")
    git(path, "commit", "-q", "-am", "wait less for the lock")
    repo = ExperienceRepository.open(path)
    assert repo.settings.lock_wait_seconds == 0.5
    pid, text = the_proposal(repo)
    before = main_of(path)

    holder = start_holder(path)
    try:
        started = time.monotonic()
        proc = run_expgit("-C", path, "apply", pid)
        waited = time.monotonic() - started
        assert proc.returncode == EXIT_LOCKED, proc.stderr
        assert f"pid {holder.pid} on {socket.gethostname()}" in proc.stderr
        assert "slow writer" in proc.stderr
        assert 0.5 <= waited < 20
        assert main_of(path) == before
        assert git(path, "for-each-ref", "--format=%(refname)", PROPOSALS + pid).strip()
        assert git(path, "status", "--porcelain") == ""
    finally:
        assert holder.stdin is not None
        holder.stdin.write("done\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    # once the holder is done, the same command goes through
    proc = run_expgit("-C", path, "apply", pid)
    assert proc.returncode == 0, proc.stderr
    assert "stale" not in proc.stderr
    assert ExperienceRepository.open(path).snapshot().get(
        "refund-method-rules").text == text  # type: ignore[union-attr]


def test_library_apply_with_a_short_wait_raises_lock_held(repo: ExperienceRepository
                                                          ) -> None:
    path = repo.git.work_tree
    assert path is not None
    pid, _text = the_proposal(repo)
    before = repo.main_commit()
    impatient = ExperienceRepository(
        repo.git, repo.settings.model_copy(update={"lock_wait_seconds": 0.2}))
    holder = start_holder(path)
    try:
        with pytest.raises(LockHeldError) as info:
            apply_proposal(impatient, pid)
        assert f"pid {holder.pid}" in str(info.value)
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert repo.main_commit() == before
    # the killed holder's lock is recovered by the next writer
    result = apply_proposal(impatient, pid)
    assert result.previous == before and not result.rebased


# ------------------------------------------------------- writers that skip the lock
def commit_on_main(path: Path, name: str, note: str) -> str:
    """What a person does in the work tree, without expgit or its lock."""
    file = path / "experiences" / f"{name}.md"
    file.write_text(file.read_text() + f"\n{note}\n")
    git(path, "commit", "-q", "-am", note)
    return main_of(path)


@pytest.mark.parametrize("same_experience", [False, True], ids=["other", "same"])
@pytest.mark.slow
def test_main_moved_by_plain_git_during_apply_is_guarded_again(
        repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch,
        same_experience: bool) -> None:
    import expgit.store.workflow.apply as apply_module
    from expgit.errors import ConflictError

    path = repo.git.work_tree
    assert path is not None
    pid, text = the_proposal(repo, "refund-method-rules")
    moved: list[str] = []
    real_build_on = apply_module.build_on

    def racing_build_on(*args, **kwargs):  # type: ignore[no-untyped-def]
        built = real_build_on(*args, **kwargs)
        if not moved:  # someone commits to main between our read and our CAS
            moved.append(commit_on_main(
                path, "refund-method-rules" if same_experience else "flight-change-rules",
                "A note committed by hand."))
        return built

    monkeypatch.setattr(apply_module, "build_on", racing_build_on)
    if same_experience:
        with pytest.raises(ConflictError) as info:
            apply_proposal(repo, pid)
        assert "refund-method-rules" in str(info.value)
        assert main_of(path) == moved[0]
        assert git(path, "for-each-ref", PROPOSALS + pid).strip()
        return
    result = apply_proposal(repo, pid)
    assert result.attempts == 2 and result.rebased and result.previous == moved[0]
    assert main_of(path) == result.commit
    assert repo.git.read_commit(result.commit).parents == (moved[0],)
    final = ExperienceRepository.open(path).snapshot()
    assert final.get("refund-method-rules").text == text  # type: ignore[union-attr]
    assert "A note committed by hand." in final.get("flight-change-rules").text  # type: ignore[union-attr]
    assert git(path, "status", "--porcelain") == ""
    fsck(path)


@pytest.mark.slow
def test_apply_gives_up_when_plain_git_keeps_moving_main(
        repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt loses the race: after ATTEMPTS, the RefMovedError (exit 3) and
    nothing of expgit's written: main holds the last hand commit, the proposal is open."""
    import expgit.store.workflow.apply as apply_module
    from expgit.errors import EXIT_CONFLICT, ConflictError

    path = repo.git.work_tree
    assert path is not None
    pid, _text = the_proposal(repo, "refund-method-rules")
    moved: list[str] = []
    real_build_on = apply_module.build_on

    def racing_build_on(*args, **kwargs):  # type: ignore[no-untyped-def]
        built = real_build_on(*args, **kwargs)
        moved.append(commit_on_main(path, "flight-change-rules", f"Note {len(moved)}."))
        return built

    monkeypatch.setattr(apply_module, "build_on", racing_build_on)
    with pytest.raises(ConflictError) as info:
        apply_proposal(repo, pid)
    assert info.value.exit_code == EXIT_CONFLICT
    assert len(moved) == apply_module.ATTEMPTS
    assert main_of(path) == moved[-1]
    assert git(path, "for-each-ref", PROPOSALS + pid).strip()
    fsck(path)


# --------------------------------------------------------------------- work trees
def test_apply_with_a_deleted_linked_worktree_on_main(tmp_path: Path) -> None:
    """A linked work tree of main whose folder was deleted (``git worktree prune`` not
    run yet) must not turn a successful apply into a crash."""
    import shutil

    server = tmp_path / "server.git"
    init_repository(server, bare=True, seed=EXAMPLE, layout="flat")
    git(server, "worktree", "add", "-q", str(tmp_path / "gone"), "main")
    git(server, "worktree", "add", "-q", "-f", str(tmp_path / "kept"), "main")
    shutil.rmtree(tmp_path / "gone")
    repo = ExperienceRepository.open(server)
    pid, text = the_proposal(repo)

    proc = run_expgit("-C", server, "apply", pid)

    assert proc.returncode == 0, proc.stderr
    assert "gone" in proc.stderr and "warning" in proc.stderr
    assert ExperienceRepository.open(server).snapshot().get(
        "refund-method-rules").text == text  # type: ignore[union-attr]
    # the work tree that still exists followed main
    assert (tmp_path / "kept" / "experiences" / "refund-method-rules.md").read_text() == text
    assert git(tmp_path / "kept", "status", "--porcelain") == ""


def test_uncommitted_changes_elsewhere_are_carried_over(repo: ExperienceRepository
                                                         ) -> None:
    path = repo.git.work_tree
    assert path is not None
    pid, text = the_proposal(repo, "refund-method-rules")
    other = path / "experiences" / "flight-change-rules.md"
    mine = other.read_text() + "\nMy unfinished note.\n"
    other.write_text(mine)

    proc = run_expgit("-C", path, "apply", pid)

    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    assert (path / "experiences" / "refund-method-rules.md").read_text() == text
    assert other.read_text() == mine
    assert git(path, "status", "--porcelain").splitlines() == [
        " M experiences/flight-change-rules.md"]


def test_uncommitted_change_in_the_applied_file_is_kept_and_the_hint_works(
        repo: ExperienceRepository) -> None:
    path = repo.git.work_tree
    assert path is not None
    pid, text = the_proposal(repo, "refund-method-rules")  # appends a line at the end
    file = path / "experiences" / "refund-method-rules.md"
    original = file.read_text()
    local = original.replace("# Refund method rules", "# Refund method rules (draft)", 1)
    assert local != original
    file.write_text(local)

    proc = run_expgit("-C", path, "apply", pid)

    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and str(path) in proc.stderr
    assert file.read_text() == local  # nothing was overwritten
    recipe = proc.stderr.split("Catch up with: ", 1)[1].strip()
    assert "stash" not in recipe
    subprocess.run(recipe, shell=True, cwd=path, check=True, capture_output=True)
    # the working tree is main plus the local edit, and only that is uncommitted
    assert file.read_text() == text.replace("# Refund method rules",
                                            "# Refund method rules (draft)", 1)
    diff = git(path, "diff", "HEAD", "--", "experiences/")
    assert "+# Refund method rules (draft)" in diff
    assert "remember refund-method-rules" not in diff
