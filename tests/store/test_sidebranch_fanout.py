"""Fanned-out side branch folders: trajectories and session records are written at
``folder/<ab>/<name>``, so no tree holds every record; a file directly in such a folder
is not a record and is not read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLE, RunCli, git

from expgit.errors import NotFoundError
from expgit.outcomes.targets import resolve_target
from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import fanned
from expgit.train.records.trajectory_store import FOLDER, TrajectoryStore

BRANCH = "refs/heads/expgit/trajectories"


def ids(count: int) -> list[str]:
    return [f"{i * 2654435761 % 16 ** 16:016x}" for i in range(1, count + 1)]


def tree_sizes(repo: Path, rev: str) -> dict[str, int]:
    """``{folder: entries}`` of every tree on ``rev``."""
    sizes: dict[str, int] = {}
    for line in git(repo, "ls-tree", "-r", "-t", rev).splitlines():
        path = line.split("\t", 1)[1]
        parent = path.rpartition("/")[0]
        sizes[parent] = sizes.get(parent, 0) + 1
    return sizes


def test_trajectories_are_fanned_out(seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    for tid in ids(40):
        uri, created = store.store(tid, f"# {tid}\n", f"trajectory {tid}")
        assert created and uri == f"{store.branch}:{FOLDER}/{tid[:2]}/{tid}.md"
    assert store.ids() == sorted(ids(40))
    sizes = tree_sizes(seeded_repo.git.git_dir, BRANCH)
    assert sizes[FOLDER] == len({tid[:2] for tid in ids(40)})  # sub-folders only
    assert all(len(folder) == len(FOLDER) + 3 for folder in sizes if folder != FOLDER
               and folder)
    assert store.find(ids(40)[3]) == f"# {ids(40)[3]}\n"


def ingest(run_cli: RunCli, repo: Path, session: Path) -> dict[str, object]:
    result = run_cli("-C", repo, "sessions", "ingest", session, "--agent", "bot", "--json")
    assert result.code == 0, result.err
    report: dict[str, object] = json.loads(result.out)
    return report


def test_a_file_directly_in_the_trajectories_folder_is_not_read(
        seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    kept, stray = ids(2)
    uri, _ = store.store(kept, "# kept\n", "kept trajectory")
    store.side.write({f"{FOLDER}/{stray}.md": b"# stray\n"}, "a file in no sub-folder")
    assert store.ids() == [kept]
    assert store.find(stray) is None and store.stored_uri(stray) is None
    for target in (f"{store.branch}:{FOLDER}/{stray}.md", stray,
                   f"{store.branch}:{FOLDER}/ff/{kept}.md"):  # not the path the store writes
        with pytest.raises(NotFoundError):
            resolve_target(seeded_repo, "trajectory", target)
    assert resolve_target(seeded_repo, "trajectory", uri) == uri
    assert resolve_target(seeded_repo, "trajectory", kept) == uri
    assert store.add_transcript(kept, b'{"messages": []}\n')
    assert store.find_transcript(kept) == b'{"messages": []}\n'
    assert store.transcript_of(uri) == b'{"messages": []}\n'
    assert not store.add_transcript(stray, b"{}")  # not stored: nothing written
    assert store.ids() == [kept]  # a transcript is not a trajectory


def test_session_records_are_fanned_out_and_a_file_beside_them_is_not_read(
        seeded_repo: ExperienceRepository, run_cli: RunCli, tmp_path: Path) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    session = tmp_path / "s.jsonl"
    lines = (EXAMPLE / "sessions" / "bags-then-cancel.jsonl").read_text().splitlines(True)
    session.write_text("".join(lines[:2]))
    ingest(run_cli, path, session)
    store = SessionStore(seeded_repo)
    [manifest] = store.manifests()
    key = manifest.session_key
    files = git(path, "ls-tree", "-r", "--name-only", store.branch.ref).split()
    assert fanned(MANIFESTS, f"{key}.json") in files
    assert fanned("transcripts", f"{key}.json") in files
    stray = manifest.model_copy(update={"session_key": "ffff"})
    store.branch.write({f"{MANIFESTS}/ffff.json": stray.model_dump_json().encode()},
                       "a file in no sub-folder")
    assert [m.session_key for m in store.manifests()] == [key]
    assert store.manifest("ffff") is None
    status = run_cli("-C", path, "sessions", "status", "--json")
    assert status.code == 0 and json.loads(status.out)["sessions"] == 1
    # the session grows: its records are rewritten in place
    shutil.copy(EXAMPLE / "sessions" / "bags-then-cancel.jsonl", session)
    ingest(run_cli, path, session)
    [again] = SessionStore(seeded_repo).manifests()
    assert again.session_key == key and len(again.segments) >= 1
    status = run_cli("-C", path, "sessions", "status", "--json")
    assert status.code == 0 and json.loads(status.out)["sessions"] == 1


def test_the_first_fanned_entries_read_only_the_first_sub_folders(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrajectoryStore(seeded_repo)
    names = ["ab" + "1" * 14, "ab" + "3" * 14, "cd" + "2" * 14, "ef" + "4" * 14]
    store.side.write({store.path_of(n): b"# t\n" for n in names} |
                     {f"{FOLDER}/{'a' * 16}.md": b"# in no sub-folder\n"}, "four")
    every = store.side.fanned_entries(FOLDER, suffix=".md")
    assert [e.name for e in every] == [f"{n}.md" for n in names]
    trees: list[str] = []
    real = seeded_repo.git.read_tree

    def spy(sha: str):  # type: ignore[no-untyped-def]
        trees.append(sha)
        return real(sha)

    monkeypatch.setattr(seeded_repo.git, "read_tree", spy)
    assert store.side.fanned_entries(FOLDER, suffix=".md", first=2) == every[:2]
    assert len(trees) == 2  # the folder and its first sub-folder (which holds two)
    assert store.side.fanned_entries(FOLDER, suffix=".md", first=3) == every[:3]
