"""``sessions status`` keeps one row per manifest in the derived index, with the blob id
it was read from: a status parses only manifests it has not seen, and the index never
outvotes git (a changed manifest is a new blob; a damaged index is rebuilt)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, RunCli

from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived.cache import index_file
from expgit.store.repository import ExperienceRepository

SESSIONS = EXAMPLE / "sessions"


def status(run_cli: RunCli, path: Path, *more: str) -> dict[str, Any]:
    result = run_cli("-C", path, "sessions", "status", "--json", *more)
    assert result.code == 0, result.err
    data: dict[str, Any] = json.loads(result.out)
    return data


def index(repo: ExperienceRepository, sql: str, *args: object) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(index_file(repo.git.common_dir))) as db, db:
        return db.execute(sql, args).fetchall()


def test_status_reads_manifests_once_and_follows_changes(seeded_repo: ExperienceRepository,
                                                          run_cli: RunCli) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", SESSIONS / name, "--agent", "bot")
        assert ingest.code == 0, ingest.err
    first = status(run_cli, path, "--all")
    assert first["sessions"] == 2
    entries = SessionStore(seeded_repo).branch.fanned_entries(MANIFESTS, suffix=".json")
    rows = index(seeded_repo, "SELECT blob FROM session_rows WHERE sign = 1")
    assert {blob for (blob,) in rows} == {e.sha for e in entries}
    # the row is what is read for a blob it holds (planted: 7 messages)
    index(seeded_repo, "UPDATE session_rows SET messages = 7 WHERE blob = ?", entries[0].sha)
    assert 7 in [d["messages"] for d in status(run_cli, path, "--all")["details"]]
    # a corrupt index file: deleted and built again
    index_file(seeded_repo.git.common_dir).write_bytes(b"not a database" * 100)
    assert status(run_cli, path, "--all") == first
    # a new session: its manifest is a new blob, summarised; the others are kept rows
    more = run_cli("-C", path, "sessions", "ingest", SESSIONS / "fourth-bag-thumbs-down.jsonl",
                   "--agent", "bot")
    assert more.code == 0, more.err
    index(seeded_repo, "UPDATE session_rows SET messages = 7 WHERE blob = ?", entries[0].sha)
    after = status(run_cli, path, "--all")
    assert after["sessions"] == 3
    assert 7 in [d["messages"] for d in after["details"]]
    assert len(index(seeded_repo, "SELECT blob FROM session_rows")) == 3


def test_status_bounds_details_and_sums_the_rows_of_the_tip(
        seeded_repo: ExperienceRepository, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from expgit.sessions.status import counts as status_module

    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl",
                 "fourth-bag-thumbs-down.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", SESSIONS / name, "--agent", "bot")
        assert ingest.code == 0, ingest.err
    monkeypatch.setattr(status_module, "DETAILS_LIMIT", 2)
    full = status(run_cli, path, "--all")
    assert len(full["details"]) == 3 and full["details_truncated"] is False
    bounded = status(run_cli, path)
    assert bounded["details"] == full["details"][:2] and bounded["details_truncated"] is True
    assert {k: v for k, v in bounded.items() if not k.startswith("details")} == \
        {k: v for k, v in full.items() if not k.startswith("details")}
    store = SessionStore(seeded_repo)
    [(folded,)] = index(seeded_repo, "SELECT commit_id FROM folds WHERE name = ?",
                        f"session_rows:{store.branch.ref}")
    assert folded == store.branch.tip()
    # the counts are sums of the rows while the tip is the same (planted count)
    index(seeded_repo, "UPDATE session_rows SET trained = trained + 41 WHERE name = "
                       "(SELECT min(name) FROM session_rows)")
    assert status(run_cli, path)["trained"] == full["trained"] + 41
    # a new session: only its manifest is read, the planted row is carried
    new = tmp_path / "new.jsonl"
    new.write_text('{"role": "user", "content": "May I change my seat?"}\n'
                   '{"role": "assistant", "content": "Yes."}\n')
    more = run_cli("-C", path, "sessions", "ingest", new, "--agent", "bot")
    assert more.code == 0, more.err
    after = status(run_cli, path)
    assert after["sessions"] == 4 and after["trained"] == full["trained"] + 41
    # rows folded to a commit that is not here: built again from every manifest
    index(seeded_repo, "UPDATE folds SET commit_id = ? WHERE name = ?", "0" * 40,
          f"session_rows:{store.branch.ref}")
    assert status(run_cli, path)["trained"] == full["trained"]


def test_two_processes_folding_at_once_agree(seeded_repo: ExperienceRepository) -> None:
    """Two statuses folding the same new rows at once: one waits for the other's write
    transaction, and both answer the whole count."""
    from test_sessions_status_ledger import manifest, write

    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}", trained=i % 2 == 0) for i in range(60)})
    path = seeded_repo.git.work_tree
    command = [sys.executable, "-m", "expgit", "-C", str(path), "sessions", "status", "--json"]
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    answers = [json.loads(p.communicate()[0]) for p in running]
    assert [p.returncode for p in running] == [0, 0]
    assert answers[0] == answers[1]
    assert answers[0]["sessions"] == 60 and answers[0]["trained"] == 30
    assert len(index(seeded_repo, "SELECT name FROM session_rows")) == 60
