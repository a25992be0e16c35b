"""Pushing side branches and expgit's refs to a shared bare repository: the union replay
when another clone pushed first, de-duplication, conflicts, and a lost lease; never a
forced push (the server logs every update)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_only_fast_forwards, fsck, git, shared_server

from expgit.errors import ConflictError, ExpgitError, InvalidInputError, UsageError
from expgit.store.derived import version_checkpoint
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch
from expgit.store.workflow import remote_sync
from expgit.store.workflow.remote_sync import (
    check_remote,
    push_checkpoint,
    push_refs,
    push_side_branch,
)

BRANCH = "expgit/trajectories"
REF = f"refs/heads/{BRANCH}"
CHECKPOINT = version_checkpoint.REF


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, ExperienceRepository, ExperienceRepository]:
    server, (one, other) = shared_server(tmp_path, 2)
    return server, ExperienceRepository.open(one), ExperienceRepository.open(other)


def write(repo: ExperienceRepository, files: dict[str, bytes], branch: str = BRANCH) -> str:
    commit = SideBranch(repo, branch, what="records").write(dict(files), "records")
    assert commit is not None
    return commit


def on_server(server: Path, branch: str = BRANCH) -> dict[str, str]:
    """``{path: content}`` at the server's tip of ``branch``."""
    names = git(server, "ls-tree", "-r", "--name-only", f"refs/heads/{branch}").split()
    return {n: git(server, "show", f"refs/heads/{branch}:{n}") for n in names}


@pytest.mark.slow
def test_a_push_replays_the_local_entries_on_a_tip_another_clone_pushed(two) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    first = write(one, {"trajectories/a.md": b"a\n"})
    assert push_side_branch(one, BRANCH, "origin").status == "pushed"
    assert git(server, "rev-parse", REF).strip() == first
    mine = write(other, {"trajectories/b.md": b"b\n"})  # an unrelated history of its own
    done = push_side_branch(other, BRANCH, "origin")
    assert done.status == "replayed" and done.kept_remote == []
    tip = git(server, "rev-parse", REF).strip()
    assert tip == done.commit == other.git.ref(REF)  # the local branch fast-forwarded
    assert git(server, "rev-list", "--parents", "-n", "1", tip).split()[1:] == [first, mine]
    assert on_server(server) == {"trajectories/a.md": "a\n", "trajectories/b.md": "b\n"}
    # the first clone moved on meanwhile: its entry joins both
    write(one, {"trajectories/c.md": b"c\n"})
    assert push_side_branch(one, BRANCH, "origin").status == "replayed"
    assert set(on_server(server)) == {f"trajectories/{x}.md" for x in "abc"}
    assert push_side_branch(one, BRANCH, "origin").status == "up to date"
    fsck(server)
    assert assert_only_fast_forwards(server) == 3


@pytest.mark.slow
def test_an_entry_both_clones_wrote_is_kept_once(two) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    write(one, {"trajectories/same.md": b"same\n", "trajectories/a.md": b"a\n"})
    write(other, {"trajectories/same.md": b"same\n"})
    push_side_branch(one, BRANCH, "origin")
    assert push_side_branch(other, BRANCH, "origin").status == "replayed"
    assert on_server(server) == {"trajectories/a.md": "a\n", "trajectories/same.md": "same\n"}
    assert assert_only_fast_forwards(server) == 2


def test_a_file_both_changed_differently_is_a_conflict_and_nothing_is_pushed(two) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    branch = "expgit/sessions"
    write(one, {"sessions/s.json": b"1\n"}, branch)
    write(other, {"sessions/s.json": b"2\n", "sessions/t.json": b"t\n"}, branch)
    theirs = push_side_branch(one, branch, "origin").commit
    local = other.git.ref(f"refs/heads/{branch}")
    with pytest.raises(ConflictError, match=r"sessions/s\.json") as caught:
        push_side_branch(other, branch, "origin")
    assert caught.value.conflicts == ["sessions/s.json"]
    assert git(server, "rev-parse", f"refs/heads/{branch}").strip() == theirs
    assert other.git.ref(f"refs/heads/{branch}") == local  # nothing moved here either
    # records whose first version stands: the remote's is kept, ours stays in history
    done = push_side_branch(other, branch, "origin", first_wins=True)
    assert done.status == "replayed" and done.kept_remote == ["sessions/s.json"]
    assert on_server(server, branch) == {"sessions/s.json": "1\n", "sessions/t.json": "t\n"}
    assert git(server, "show", f"{done.commit}^2:sessions/s.json") == "2\n"
    assert_only_fast_forwards(server)


@pytest.mark.slow
def test_a_lost_lease_fetches_again_and_retries(two, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    write(one, {"trajectories/a.md": b"a\n"})
    push_side_branch(one, BRANCH, "origin")
    write(other, {"trajectories/b.md": b"b\n"})
    real = remote_sync.fetch_tip
    calls: list[str | None] = []

    def racing(repo: ExperienceRepository, remote: str, ref: str) -> str | None:
        tip = real(repo, remote, ref)
        calls.append(tip)
        if len(calls) == 1:  # the other clone pushes between this fetch and the push
            write(one, {"trajectories/c.md": b"c\n"})
            git(Path(one.git.work_tree or "."), "push", "-q", "origin", REF)
        return tip

    monkeypatch.setattr(remote_sync, "fetch_tip", racing)
    done = push_side_branch(other, BRANCH, "origin")
    assert done.status == "replayed" and done.attempts == 2
    assert calls[0] != calls[1]  # the refused lease saw the new tip
    assert set(on_server(server)) == {f"trajectories/{x}.md" for x in "abc"}
    fsck(server)
    assert_only_fast_forwards(server)


def test_refs_go_in_one_atomic_push_and_a_repeat_is_up_to_date(two) -> None:  # type: ignore[no-untyped-def]
    server, one, _ = two
    main = one.main_commit()
    refs = {"refs/heads/expgit/gradients/aaaaaaaaaaaa": main,
            "refs/heads/expgit/proposals/bbbbbbbbbbbb": main}
    assert sorted(push_refs(one, refs, "origin")) == sorted(refs)
    assert push_refs(one, refs, "origin") == []
    before = git(server, "for-each-ref")
    with pytest.raises(ExpgitError, match="push to 'origin' failed"):
        # one ref would not be a fast-forward: the other new one is not pushed either
        orphan = one.git.write_commit(one.git.read_commit(main).tree, [], "not main\n")
        push_refs(one, {"refs/heads/expgit/gradients/cccccccccccc": main,
                        "refs/heads/main": orphan}, "origin")
    assert git(server, "for-each-ref") == before
    assert_only_fast_forwards(server)


def test_an_unknown_remote_is_refused(two) -> None:  # type: ignore[no-untyped-def]
    _, one, _ = two
    check_remote(one, "origin")
    for name in ("nope", ""):
        with pytest.raises(UsageError, match="unknown remote") as caught:
            check_remote(one, name)
        assert "git remote -v" in (caught.value.hint or "")
    with pytest.raises(InvalidInputError, match="--remote '-x' is refused: it starts with"):
        check_remote(one, "-x")  # git would read it as an option: invalid input (exit 5)


def checkpoint(repo: ExperienceRepository, version: int = 1) -> str:
    """A versions checkpoint of ``main`` written here (``version``: of a made-up path, so
    that two clones write different commits)."""
    main = repo.main_commit()
    tip = version_checkpoint.write(repo.git, repo.root, main, {"x.md": (version, main, main)})
    assert tip is not None
    return tip


@pytest.mark.slow
def test_the_versions_checkpoint_is_pushed_as_a_fast_forward(two) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    assert push_checkpoint(one, "origin").status == "absent"
    first = checkpoint(one)
    assert push_checkpoint(one, "origin").status == "pushed"
    assert git(server, "rev-parse", CHECKPOINT).strip() == first
    assert push_checkpoint(one, "origin").status == "up to date"
    # a clone that has only origin/expgit/versions builds on it: the push fast-forwards
    git(other.git.work_tree, "fetch", "-q", "origin")
    assert other.git.ref(CHECKPOINT) is None
    second = checkpoint(other, 2)
    assert list(other.git.read_commit(second).parents) == [first]
    assert push_checkpoint(other, "origin").status == "pushed"
    assert git(server, "rev-parse", CHECKPOINT).strip() == second
    assert push_checkpoint(one, "origin").status == "up to date"  # behind: nothing to do
    fsck(server)
    assert assert_only_fast_forwards(server) == 2


def test_a_checkpoint_that_went_another_way_is_left_on_the_remote(two) -> None:  # type: ignore[no-untyped-def]
    server, one, other = two
    theirs = checkpoint(one)
    push_checkpoint(one, "origin")
    mine = checkpoint(other, 2)  # not fetched: a history of its own
    done = push_checkpoint(other, "origin")
    assert (done.status, done.commit) == ("diverged", theirs)
    assert git(server, "rev-parse", CHECKPOINT).strip() == theirs  # never forced
    assert other.git.ref(CHECKPOINT) == mine
    assert_only_fast_forwards(server)
