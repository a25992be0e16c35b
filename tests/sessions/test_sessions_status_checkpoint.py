"""The status checkpoint on the sessions branch: written by the session writers once it is
due, it travels with a clone, and a status with no kept ledger (a fresh clone) moves it
forward by the manifests changed since instead of parsing every one. Anything wrong
with it is ignored: the sessions are counted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLE, RunCli
from test_sessions_status_ledger import blobs_read, manifest, without_details, write

from expgit.sessions.status import checkpoint as status_checkpoint
from expgit.sessions.status.counts import refresh_checkpoint, sessions_status
from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived.cache import CACHE_DIR, INDEX_NAME
from expgit.store.repository import ExperienceRepository


@pytest.fixture(autouse=True)
def every_five(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_checkpoint, "EVERY", 5)


def folder_tree(store: SessionStore) -> str:
    tree = store.branch.tree()
    assert tree is not None
    entry = store.repo.git.path_entry(tree, MANIFESTS)
    assert entry is not None
    return entry.sha


def forget_caches(repo: ExperienceRepository) -> None:
    """Delete the derived index (as after a clone)."""
    for cache in (repo.git.common_dir / CACHE_DIR).glob(f"{INDEX_NAME}*"):
        cache.unlink()


def test_written_when_due_and_changing_no_manifest(seeded_repo: ExperienceRepository) -> None:
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(4)})
    assert refresh_checkpoint(seeded_repo) is None  # 4 sessions: below EVERY
    write(store, {"0004": manifest("0004")})
    before = folder_tree(store)
    commit = refresh_checkpoint(seeded_repo)
    assert commit is not None and commit == store.branch.tip()
    assert folder_tree(store) == before  # one file at the root, no manifest changed
    checkpoint = status_checkpoint.read(store)
    assert checkpoint is not None and checkpoint.tree == before
    assert checkpoint.status.sessions == 5
    # fewer than EVERY changed manifests since: not written again
    write(store, {f"{i:04x}": manifest(f"{i:04x}", trained=True) for i in range(4)})
    assert refresh_checkpoint(seeded_repo) is None
    write(store, {"0009": manifest("0009")})
    assert refresh_checkpoint(seeded_repo) is not None
    last = status_checkpoint.read(store)
    assert last is not None and last.status.sessions == 6 and last.status.trained == 4


def test_a_status_without_caches_moves_the_checkpoint_forward(
        seeded_repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(30)})
    assert refresh_checkpoint(seeded_repo) is not None
    write(store, {"0003": manifest("0003", status="pending"), "0100": manifest("0100")})
    expected = sessions_status(seeded_repo, all_details=True)
    forget_caches(seeded_repo)
    read = blobs_read(seeded_repo, monkeypatch)
    status = sessions_status(seeded_repo)
    assert len(read) == 3  # the old and new 0003, the new 0100: nothing else
    assert status.sessions == 31 == expected.sessions
    assert without_details(status) == without_details(expected)
    assert [p.session for p in status.pending] == ["0003"]


def test_a_clone_gets_the_checkpoint(seeded_repo: ExperienceRepository, run_cli: RunCli,
                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl",
                 "fourth-bag-thumbs-down.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", EXAMPLE / "sessions" / name,
                         "--agent", "bot")
        assert ingest.code == 0, ingest.err
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(3)})
    # `sessions ingest` writes it once due (6 sessions now, EVERY is 5)
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"role": "user", "content": "May I change my seat?"}\n'
                     '{"role": "assistant", "content": "Yes."}\n')
    assert run_cli("-C", path, "sessions", "ingest", extra, "--agent", "bot").code == 0
    checkpoint = status_checkpoint.read(store)
    assert checkpoint is not None and checkpoint.tree == folder_tree(store)
    origin = json.loads(run_cli("-C", path, "sessions", "status", "--json").out)
    clone = tmp_path / "clone.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(path), str(clone)], check=True)
    copy = ExperienceRepository.open(clone)
    read = blobs_read(copy, monkeypatch)
    got = sessions_status(copy).model_dump(mode="json")
    assert read == []  # the checkpoint is of the clone's folder: no manifest parsed
    assert got == origin


@pytest.mark.parametrize("damage", ["not json", "other format", "bad shape", "no such tree",
                                    "too large"])
def test_a_damaged_checkpoint_is_ignored(seeded_repo: ExperienceRepository, damage: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(8)})
    assert refresh_checkpoint(seeded_repo) is not None
    good = json.loads(store.branch.read(status_checkpoint.PATH) or b"")
    good["ledger"]["status"]["trained"] = 99  # planted: shows if the checkpoint were used
    if damage == "not json":
        data = b"{not json"
    elif damage == "other format":
        data = json.dumps(dict(good, format="sessions-status-checkpoint-0")).encode()
    elif damage == "bad shape":
        data = json.dumps(dict(good, ledger={"tree": 5})).encode()
    elif damage == "no such tree":
        data = json.dumps(dict(good, ledger=dict(good["ledger"], tree="1" * 40))).encode()
    else:
        monkeypatch.setattr(status_checkpoint, "MAX_BYTES", 100)
        data = json.dumps(good).encode()
    store.branch.write({status_checkpoint.PATH: data}, "sessions: a damaged checkpoint")
    write(store, {"0100": manifest("0100")})
    forget_caches(seeded_repo)
    status = sessions_status(seeded_repo)
    assert status.sessions == 9 and status.trained == 0


def test_a_clone_with_a_work_tree_reads_the_sessions_of_origin(
        seeded_repo: ExperienceRepository, run_cli: RunCli, tmp_path: Path) -> None:
    """``git clone`` (not bare) holds the sessions branch only as origin/expgit/sessions:
    it is read there, and a write here builds on it (a fast-forward of origin's)."""
    path = seeded_repo.git.work_tree
    assert path is not None
    ingest = run_cli("-C", path, "sessions", "ingest", EXAMPLE / "sessions" /
                     "pet-question.jsonl", "--agent", "bot")
    assert ingest.code == 0, ingest.err
    origin = json.loads(run_cli("-C", path, "sessions", "status", "--json").out)
    keys = [m.session_key for m in SessionStore(seeded_repo).manifests()]
    assert len(keys) == 1
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(path), str(clone)], check=True)
    copy = ExperienceRepository.open(clone)
    branch = f"refs/heads/{copy.settings.sessions.branch}"
    assert copy.git.ref(branch) is None  # only refs/remotes/origin/expgit/sessions
    assert [m.session_key for m in SessionStore(copy).manifests()] == keys
    assert SessionStore(copy).transcript(keys[0]) == SessionStore(seeded_repo).transcript(
        keys[0])
    assert json.loads(run_cli("-C", clone, "sessions", "status", "--json").out) == origin
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"role": "user", "content": "May I change my seat?"}\n'
                     '{"role": "assistant", "content": "Yes."}\n')
    assert run_cli("-C", clone, "sessions", "ingest", extra, "--agent", "bot").code == 0
    tip = copy.git.ref(branch)
    assert tip is not None and copy.git.is_ancestor(
        copy.git.ref(f"refs/remotes/origin/{copy.settings.sessions.branch}") or "", tip)
    assert len(SessionStore(copy).manifests()) == 2
