"""``sessions status`` keeps each manifest's part by blob id in the derived-data cache:
a status parses only manifests it has not seen, and the cache never outvotes git (a
changed manifest is a new blob; a corrupt cache file is ignored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, RunCli

from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived import CACHE_DIR
from expgit.store.repository import ExperienceRepository

SESSIONS = EXAMPLE / "sessions"


def status(run_cli: RunCli, path: Path, *more: str) -> dict[str, Any]:
    result = run_cli("-C", path, "sessions", "status", "--json", *more)
    assert result.code == 0, result.err
    data: dict[str, Any] = json.loads(result.out)
    return data


def cache_files(repo: ExperienceRepository) -> list[Path]:
    return sorted((repo.git.common_dir / CACHE_DIR).glob("session-status-*.json"))


def test_status_reads_manifests_once_and_follows_changes(seeded_repo: ExperienceRepository,
                                                          run_cli: RunCli) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", SESSIONS / name, "--agent", "bot")
        assert ingest.code == 0, ingest.err
    # --all: every row, counted from the per-manifest rows (the whole status kept by
    # folder tree is another cache, tested below)
    first = status(run_cli, path, "--all")
    assert first["sessions"] == 2
    [cache] = cache_files(seeded_repo)
    stored = json.loads(cache.read_text())
    entries = SessionStore(seeded_repo).branch.fanned_entries(MANIFESTS, suffix=".json")
    assert set(stored["entries"]) == {e.sha for e in entries}
    # the cache is what is read for a blob it holds (planted: 7 messages)
    planted = next(iter(stored["entries"]))
    stored["entries"][planted][0]["messages"] = 7
    cache.write_text(json.dumps(stored))
    assert 7 in [d["messages"] for d in status(run_cli, path, "--all")["details"]]
    # a row of another shape: ignored, that manifest is read again
    stored["entries"][planted][0]["messages"] = "seven"
    cache.write_text(json.dumps(stored))
    assert status(run_cli, path, "--all") == first
    # a corrupt cache file: ignored and written anew
    cache.write_text("{not json")
    assert status(run_cli, path, "--all") == first
    assert json.loads(cache.read_text())["format"] == "session-status-3"
    # a new session: its manifest is a new blob, summarised; the others come from the cache
    more = run_cli("-C", path, "sessions", "ingest", SESSIONS / "fourth-bag-thumbs-down.jsonl",
                   "--agent", "bot")
    assert more.code == 0, more.err
    after = status(run_cli, path, "--all")
    assert after["sessions"] == 3
    assert len(json.loads(cache.read_text())["entries"]) == 3


def test_status_bounds_details_and_keeps_totals_by_folder_tree(
        seeded_repo: ExperienceRepository, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from expgit.sessions import status as status_module

    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl",
                 "fourth-bag-thumbs-down.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", SESSIONS / name, "--agent", "bot")
        assert ingest.code == 0, ingest.err
    monkeypatch.setattr(status_module, "DETAILS_LIMIT", 2)
    every = run_cli("-C", path, "sessions", "status", "--json", "--all")
    assert every.code == 0, every.err
    full = json.loads(every.out)
    assert len(full["details"]) == 3 and full["details_truncated"] is False
    bounded = status(run_cli, path)
    assert bounded["details"] == full["details"][:2] and bounded["details_truncated"] is True
    assert {k: v for k, v in bounded.items() if not k.startswith("details")} == \
        {k: v for k, v in full.items() if not k.startswith("details")}
    [totals] = sorted((seeded_repo.git.common_dir / CACHE_DIR).glob("session-totals-*.json"))
    stored = json.loads(totals.read_text())
    branch_tree = SessionStore(seeded_repo).branch.tree()
    assert branch_tree is not None
    folder = seeded_repo.git.path_entry(branch_tree, MANIFESTS)
    assert folder is not None and stored["entries"]["tree"] == folder.sha
    # the kept status is what is read while the folder's tree is the same (planted count)
    stored["entries"]["status"]["trained"] = 41
    totals.write_text(json.dumps(stored))
    assert status(run_cli, path)["trained"] == 41
    # --all never reads it: counted from the manifests
    assert json.loads(run_cli("-C", path, "sessions", "status", "--json", "--all").out
                      )["trained"] == full["trained"]
    # a kept status of another shape: ignored, computed again
    stored["entries"]["status"]["trained"] = "many"
    totals.write_text(json.dumps(stored))
    assert status(run_cli, path) == bounded
    # a new session changes the folder's tree: the kept status is moved forward by the
    # one manifest that changed (the planted count is carried: only the change is read)
    stored["entries"]["status"]["trained"] = 41
    totals.write_text(json.dumps(stored))
    new = tmp_path / "new.jsonl"
    new.write_text('{"role": "user", "content": "May I change my seat?"}\n'
                   '{"role": "assistant", "content": "Yes."}\n')
    more = run_cli("-C", path, "sessions", "ingest", new, "--agent", "bot")
    assert more.code == 0, more.err
    after = status(run_cli, path)
    assert after["sessions"] == 4 and after["trained"] == 41
    # a kept status whose tree is not an object here: counted whole again
    stored = json.loads(totals.read_text())
    stored["entries"]["tree"] = "0" * 40
    totals.write_text(json.dumps(stored))
    assert status(run_cli, path)["trained"] == full["trained"]
