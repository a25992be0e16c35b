"""The trajectory store: content-addressed, on its own branch, safe under concurrency."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import fsck, git

from expgit.core.domain import Case, Message, Rollout, Rubric
from expgit.errors import ConflictError, InvalidInputError, NotFoundError, UsageError
from expgit.git.repo import RefMovedError, RefUpdate
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import ATTEMPTS, TrajectoryStore, rollout_id

BRANCH = "refs/heads/expgit/trajectories"


def rollout(text: str = "hello", **extra: object) -> Rollout:
    case = Case(name="c", task_signature="demo.task", input={"q": text},
                rubric=Rubric(name="r"))
    return Rollout(case=case, messages=[Message.text("user", text)],
                   policy_snapshot_id="snap", **extra)  # type: ignore[arg-type]


def repo_path(repo: ExperienceRepository) -> Path:
    assert repo.git.work_tree is not None
    return repo.git.work_tree


def test_rollout_id_is_a_stable_content_address() -> None:
    assert rollout_id(rollout("a")) == rollout_id(rollout("a"))
    assert len(rollout_id(rollout("a"))) == 16
    assert rollout_id(rollout("a")) != rollout_id(rollout("b"))
    assert rollout_id(rollout("a")) != rollout_id(rollout("a", error="boom"))


def test_same_content_is_stored_once_and_read_back_by_uri(
        seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    main = seeded_repo.main_commit()
    tid = rollout_id(rollout())
    uri, created = store.store(tid, "# first\n", "trajectory: first")
    assert created and uri == f"expgit/trajectories:trajectories/{tid[:2]}/{tid}.md"
    tip = seeded_repo.git.ref(BRANCH)
    assert store.read(uri) == "# first\n" and store.find(tid) == "# first\n"

    again, created = store.store(tid, "# first\n", "trajectory: first")
    assert (again, created) == (uri, False)
    assert seeded_repo.git.ref(BRANCH) == tip  # no new commit
    assert store.ids() == [tid]

    assert seeded_repo.main_commit() == main
    path = repo_path(seeded_repo)
    assert "trajectories" not in git(path, "ls-tree", "--name-only", "main")
    # an orphan history: its root has no parent and main is not in it
    assert git(path, "rev-list", "--max-parents=0", BRANCH).strip() == tip
    assert git(path, "show", "-s", "--format=%(trailers:key=Expgit-Kind,valueonly)",
               BRANCH).strip() == "trajectory"
    fsck(path)


def test_bad_uris_and_missing_trajectories(seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    with pytest.raises(InvalidInputError):
        store.read("no-colon-here")
    with pytest.raises(NotFoundError):
        store.read("expgit/trajectories:trajectories/0000000000000000.md")
    assert store.find("0000000000000000") is None and store.ids() == []


def test_the_branch_can_never_be_main(seeded_repo: ExperienceRepository) -> None:
    for name in ("main", "refs/heads/main"):
        settings = seeded_repo.settings.model_copy(update={
            "train": seeded_repo.settings.train.model_copy(
                update={"trajectories_branch": name})})
        with pytest.raises(UsageError, match="never on 'main'"):
            TrajectoryStore(ExperienceRepository(seeded_repo.git, settings))


def test_concurrent_writers_in_threads_all_land(seeded_repo: ExperienceRepository) -> None:
    path = repo_path(seeded_repo)
    main = seeded_repo.main_commit()
    ids = [rollout_id(rollout(f"r{i}")) for i in range(24)]
    errors: list[BaseException] = []

    def write(chunk: list[str]) -> None:
        store = TrajectoryStore(ExperienceRepository.open(path))  # one repo object each
        try:
            for tid in chunk:
                store.store(tid, f"# {tid}\n", f"trajectory {tid}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(ids[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    store = TrajectoryStore(ExperienceRepository.open(path))
    assert store.ids() == sorted(ids)
    assert all(store.find(tid) == f"# {tid}\n" for tid in ids)
    assert int(git(path, "rev-list", "--count", BRANCH)) == len(ids)
    assert seeded_repo.main_commit() == main
    fsck(path)


WRITER = """
import sys
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore
store = TrajectoryStore(ExperienceRepository.open(sys.argv[1]))
for i in range(int(sys.argv[3])):
    tid = f"{int(sys.argv[2]):08x}{i:08x}"
    store.store(tid, f"# {tid}\\n", f"trajectory {tid}")
"""


@pytest.mark.slow
def test_concurrent_writer_processes_race_by_compare_and_swap(
        seeded_repo: ExperienceRepository) -> None:
    path = repo_path(seeded_repo)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), "6"],
                              stderr=subprocess.PIPE, text=True) for n in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = TrajectoryStore(ExperienceRepository.open(path))
    assert len(store.ids()) == 24
    assert int(git(path, "rev-list", "--count", BRANCH)) == 24
    fsck(path)


def test_a_lost_race_re_reads_the_tip_and_retries(seeded_repo: ExperienceRepository,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrajectoryStore(seeded_repo)
    store.store("a" * 16, "# a\n", "trajectory a")
    git_repo = seeded_repo.git
    real = git_repo.update_refs
    calls = []

    def racing(updates: list[RefUpdate], message: str) -> None:
        calls.append(updates)
        if len(calls) == 1:  # another analyzer commits first
            tip = git_repo.ref(BRANCH)
            assert tip is not None
            tree = git_repo.edit_tree(git_repo.read_commit(tip).tree,
                                      {store.path_of("b" * 16):
                                       git_repo.write_blob(b"# b\n")})
            real([RefUpdate(BRANCH, git_repo.write_commit(tree, [tip], "other"), tip)], "x")
        real(updates, message)

    monkeypatch.setattr(git_repo, "update_refs", racing)
    uri, created = store.store("c" * 16, "# c\n", "trajectory c")
    assert created and len(calls) == 2
    assert store.ids() == ["a" * 16, "b" * 16, "c" * 16]
    assert store.read(uri) == "# c\n"
    fsck(repo_path(seeded_repo))


def test_gives_up_after_bounded_attempts(seeded_repo: ExperienceRepository,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrajectoryStore(seeded_repo)
    calls = []

    def always_moved(updates: list[RefUpdate], message: str) -> None:
        calls.append(updates)
        raise RefMovedError("moved")

    monkeypatch.setattr(seeded_repo.git, "update_refs", always_moved)
    with pytest.raises(ConflictError, match="kept moving"):
        store.store("d" * 16, "# d\n", "trajectory d")
    assert len(calls) == ATTEMPTS
    assert seeded_repo.git.ref(BRANCH) is None


def test_the_transcript_is_stored_beside_the_document_in_one_commit_and_once(
        seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    tid = rollout_id(rollout())
    assert store.transcript_path_of(tid) == f"trajectories/{tid[:2]}/{tid}.transcript.json"
    uri, created = store.store(tid, "# doc\n", "trajectory: doc", b'{"messages": []}\n')
    tip = seeded_repo.git.ref(BRANCH)
    assert created and store.find_transcript(tid) == b'{"messages": []}\n'
    assert store.transcript_of(uri) == b'{"messages": []}\n'
    path = repo_path(seeded_repo)
    assert git(path, "show", "--name-only", "--format=", BRANCH).split() == [
        f"trajectories/{tid[:2]}/{tid}.md", f"trajectories/{tid[:2]}/{tid}.transcript.json"]
    # again: same content, same blobs, no commit; ids() lists documents only
    assert store.store(tid, "# doc\n", "trajectory: doc", b'{"messages": []}\n') == (
        uri, False)
    assert seeded_repo.git.ref(BRANCH) == tip and store.ids() == [tid]
    # a trajectory stored without one (the code before transcripts): none to read
    old = rollout_id(rollout("old"))
    store.store(old, "# old\n", "trajectory: old")
    assert store.find_transcript(old) is None and store.transcript_of(store.uri_of(old)) is None
