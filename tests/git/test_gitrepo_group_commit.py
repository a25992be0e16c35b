"""SideBranch group commit: writers queued behind one writer are committed by it, each as
its own commit with its own outcome, and the branch moves once per group."""

from __future__ import annotations

import threading

import pytest
from conftest import fsck, git

from expgit.errors import ConflictError
from expgit.git.repo import GitRepo, RefMovedError, RefUpdate
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch

BRANCH = "refs/heads/expgit/records"


def test_queued_writers_are_chained_and_keep_their_own_outcomes(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    side = SideBranch(seeded_repo, "expgit/records", what="records")
    side.write({"seed.txt": b"seed\n"}, "seed")
    git_repo = seeded_repo.git
    moves: list[list[RefUpdate]] = []
    real = GitRepo.update_refs
    entered, release = threading.Event(), threading.Event()

    def slow_first(self: GitRepo, updates: list[RefUpdate], message: str) -> None:
        moves.append(list(updates))
        if len(moves) == 1:  # hold the first writer while the others queue up
            entered.set()
            assert release.wait(30)
        real(self, updates, message)

    monkeypatch.setattr(GitRepo, "update_refs", slow_first)
    outcomes: dict[str, object] = {}

    def write(name: str, changes: object) -> None:
        try:
            outcomes[name] = side.write(changes, f"write {name}")  # type: ignore[arg-type]
        except Exception as exc:
            outcomes[name] = exc

    def refuse(tip: str | None) -> dict[str, bytes | None]:
        raise ConflictError("changed meanwhile")

    def append(tip: str | None) -> dict[str, bytes | None]:  # sees the chain built so far
        before = side.read("log.txt", tip=tip) or b""
        return {"log.txt": before + b"appended\n"}

    first = threading.Thread(target=write, args=("first", {"log.txt": b"first\n"}))
    first.start()
    assert entered.wait(30)
    others = [threading.Thread(target=write, args=args) for args in (
        ("a", {"a.txt": b"a\n"}), ("refused", refuse), ("append", append),
        ("same", {"a.txt": b"a\n"}))]
    for thread in others:
        thread.start()
    while len(side._queue) < len(others):  # all queued behind the first writer
        threading.Event().wait(0.01)
    release.set()
    for thread in [first, *others]:
        thread.join(30)

    assert isinstance(outcomes["refused"], ConflictError)
    commits = {name: outcomes[name] for name in ("first", "a", "append", "same")}
    assert commits["same"] is None  # nothing left to change after "a"
    path = git_repo.work_tree
    assert path is not None
    chain = git(path, "rev-list", "--reverse", BRANCH).split()
    assert chain[1:] == [commits["first"], commits["a"], commits["append"]]
    assert len(moves) == 2  # the first writer, then the rest in one move
    assert side.read("log.txt") == b"first\nappended\n" and side.read("a.txt") == b"a\n"
    assert git(path, "log", "-1", "--format=%s", str(commits["a"])).strip() == "write a"
    fsck(path)


def test_a_lone_writer_still_gives_up_after_bounded_attempts(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    side = SideBranch(seeded_repo, "expgit/records", what="records")

    def moved(self: GitRepo, updates: list[RefUpdate], message: str) -> None:
        raise RefMovedError("moved")

    monkeypatch.setattr(GitRepo, "update_refs", moved)
    with pytest.raises(ConflictError, match="kept moving"):
        side.write({"x": b"x\n"}, "x")
    monkeypatch.undo()
    assert side.write({"x": b"x\n"}, "x") is not None  # nothing queued was left behind
    assert side._queue == []


def test_writers_of_separate_repository_objects_share_the_queue(
        seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        side = SideBranch(ExperienceRepository.open(path), "expgit/records", what="records")
        try:
            for i in range(5):
                assert side.write({f"w{n}/{i}.txt": f"{n} {i}\n".encode()}, f"w{n} {i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert int(git(path, "rev-list", "--count", BRANCH)) == 30
    fsck(path)
