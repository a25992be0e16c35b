"""Fanned-out side branch folders: trajectories and session records are written at
``folder/<ab>/<name>``, so no tree holds every record; the flat layout older versions
wrote is still read, and a rewritten record moves to its fanned place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import EXAMPLE, git

from expgit.git.repo import RefUpdate
from expgit.outcomes.targets import resolve_target
from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch, fanned
from expgit.train.trajectory_store import FOLDER, TrajectoryStore, added_files, folder_files

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


def flatten(repo: ExperienceRepository, ref: str, folders: tuple[str, ...]) -> None:
    """Rewrite ``ref``'s tip as an older expgit laid it out: every file of ``folders``
    directly in its folder."""
    g = repo.git
    tip = g.ref(ref)
    assert tip is not None
    side = SideBranch(repo, ref, what="records")
    changes: dict[str, str | None] = {}
    for folder in folders:
        for entry in side.fanned_entries(folder):
            changes[fanned(folder, entry.name)] = None
            changes[f"{folder}/{entry.name}"] = entry.sha
    tree = g.edit_tree(g.read_commit(tip).tree, changes)
    g.update_refs([RefUpdate(ref, g.write_commit(tree, [tip], "flat, as before"), tip)], "t")


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


def test_trajectories_stored_flat_by_an_older_version_are_still_read(
        seeded_repo: ExperienceRepository) -> None:
    store = TrajectoryStore(seeded_repo)
    old, new = ids(2)
    store.store(old, "# old\n", "old trajectory")
    flatten(seeded_repo, BRANCH, (FOLDER,))
    flat_uri = f"{store.branch}:{FOLDER}/{old}.md"
    assert seeded_repo.git.out("ls-tree", "--name-only", BRANCH, f"{FOLDER}/").split() \
        == [f"{FOLDER}/{old}.md"]
    assert store.find(old) == "# old\n"
    assert store.read(flat_uri) == "# old\n"
    assert store.read(store.uri_of(old)) == "# old\n"  # the fanned URI finds it too
    assert store.stored_uri(old) == flat_uri
    assert resolve_target(seeded_repo, "trajectory", old) == flat_uri
    assert resolve_target(seeded_repo, "trajectory", store.uri_of(old)) == flat_uri
    tip = store.side.tip()
    assert store.store(old, "# old\n", "again") == (flat_uri, False)  # stored once
    assert store.side.tip() == tip
    uri, created = store.store(new, "# new\n", "new trajectory")
    assert created and uri == store.uri_of(new)
    assert store.ids() == sorted([old, new])
    assert resolve_target(seeded_repo, "trajectory", uri) == uri


def test_a_flat_trajectory_gets_its_transcript_beside_it(
        seeded_repo: ExperienceRepository) -> None:
    # a trajectory an older version stored flat, before transcripts were kept: the
    # transcript added later lands beside the document, and every read finds it there
    store = TrajectoryStore(seeded_repo)
    [old] = ids(1)
    store.store(old, "# old\n", "old trajectory")
    flatten(seeded_repo, BRANCH, (FOLDER,))
    assert store.find_transcript(old) is None
    assert store.add_transcript(old, b'{"messages": []}\n')
    names = seeded_repo.git.out("ls-tree", "-r", "--name-only", BRANCH).split()
    assert names == [f"{FOLDER}/{old}.md", f"{FOLDER}/{old}.transcript.json"]
    assert store.find_transcript(old) == b'{"messages": []}\n'
    flat_uri = f"{store.branch}:{FOLDER}/{old}.md"
    assert store.transcript_of(flat_uri) == b'{"messages": []}\n'
    assert store.transcript_of(store.uri_of(old)) == b'{"messages": []}\n'
    assert not store.add_transcript(old, b"{}")  # it has one now: nothing written
    assert store.ids() == [old]  # a transcript is not a trajectory


def ingest(run_cli, repo: Path, session: Path) -> dict[str, object]:  # type: ignore[no-untyped-def]
    result = run_cli("-C", repo, "sessions", "ingest", session, "--agent", "bot", "--json")
    assert result.code == 0, result.err
    report: dict[str, object] = json.loads(result.out)
    return report


def test_session_records_flat_from_an_older_version_are_read_and_move_when_rewritten(
        seeded_repo: ExperienceRepository, run_cli, tmp_path: Path) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    session = tmp_path / "s.jsonl"
    lines = (EXAMPLE / "sessions" / "bags-then-cancel.jsonl").read_text().splitlines(True)
    session.write_text("".join(lines[:2]))
    ingest(run_cli, path, session)
    store = SessionStore(seeded_repo)
    ref = store.branch.ref
    [manifest] = store.manifests()
    key = manifest.session_key
    assert store.branch.locate(MANIFESTS, f"{key}.json") == fanned(MANIFESTS, f"{key}.json")
    flatten(seeded_repo, ref, ("sessions", "transcripts", "segments"))
    assert store.branch.locate(MANIFESTS, f"{key}.json") == f"{MANIFESTS}/{key}.json"
    assert [m.session_key for m in store.manifests()] == [key]
    assert store.transcript(key)
    assert store.segment_messages(manifest.segments[0].fingerprint)
    status = run_cli("-C", path, "sessions", "status", "--json")
    assert status.code == 0 and json.loads(status.out)["sessions"] == 1
    # the session grows: its manifest and transcript are rewritten, at their fanned place
    shutil.copy(EXAMPLE / "sessions" / "bags-then-cancel.jsonl", session)
    ingest(run_cli, path, session)
    files = git(path, "ls-tree", "-r", "--name-only", ref).split()
    assert fanned(MANIFESTS, f"{key}.json") in files
    assert f"{MANIFESTS}/{key}.json" not in files
    assert fanned("transcripts", f"{key}.json") in files
    [again] = SessionStore(seeded_repo).manifests()
    assert again.session_key == key and len(again.segments) >= 1


def test_added_trajectory_files_are_found_by_a_few_tree_diffs(
        seeded_repo: ExperienceRepository) -> None:
    g = seeded_repo.git
    blob = g.write_blob(b"# t\n")
    flat, old_fan, new_fan, later_flat = ("a" * 16, "ab" + "1" * 14, "cd" + "2" * 14,
                                          "e" * 16)
    old = g.edit_tree(None, {f"{flat}.md": blob, fanned("", f"{old_fan}.md")[1:]: blob})
    grown = g.edit_tree(old, {fanned("", f"{'ab' + '3' * 14}.md")[1:]: blob,
                              fanned("", f"{new_fan}.md")[1:]: blob, f"{later_flat}.md": blob})
    added = added_files(g, old, grown)
    assert added is not None
    assert sorted(e.name for e in added) == sorted(
        [f"{'ab' + '3' * 14}.md", f"{new_fan}.md", f"{later_flat}.md"])
    assert sorted(e.name for e in folder_files(g, grown)) == sorted(
        [f"{flat}.md", f"{old_fan}.md", f"{'ab' + '3' * 14}.md", f"{new_fan}.md",
         f"{later_flat}.md"])
    shrunk = g.edit_tree(grown, {fanned("", f"{old_fan}.md")[1:]: None})
    assert added_files(g, grown, shrunk) is None  # a removal: read the folder whole
    changed = g.edit_tree(grown, {f"{flat}.md": g.write_blob(b"# other\n")})
    assert added_files(g, grown, changed) is None
