"""``sessions status`` keeps each manifest's part by blob id in the derived-data cache:
a status parses only manifests it has not seen, and the cache never outvotes git (a
changed manifest is a new blob; a corrupt cache file is ignored)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EXAMPLE

from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived import CACHE_DIR
from expgit.store.repository import ExperienceRepository

SESSIONS = EXAMPLE / "sessions"


def status(run_cli, path: Path) -> dict[str, object]:  # type: ignore[no-untyped-def]
    result = run_cli("-C", path, "sessions", "status", "--json")
    assert result.code == 0, result.err
    data: dict[str, object] = json.loads(result.out)
    return data


def cache_files(repo: ExperienceRepository) -> list[Path]:
    return sorted((repo.git.common_dir / CACHE_DIR).glob("session-status-*.json"))


def test_status_reads_manifests_once_and_follows_changes(seeded_repo: ExperienceRepository,
                                                          run_cli) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    for name in ("pet-question.jsonl", "bags-then-cancel.jsonl"):
        ingest = run_cli("-C", path, "sessions", "ingest", SESSIONS / name, "--agent", "bot")
        assert ingest.code == 0, ingest.err
    first = status(run_cli, path)
    assert first["sessions"] == 2
    [cache] = cache_files(seeded_repo)
    stored = json.loads(cache.read_text())
    entries = SessionStore(seeded_repo).branch.fanned_entries(MANIFESTS, suffix=".json")
    assert set(stored["entries"]) == {e.sha for e in entries}
    # the cache is what is read for a blob it holds (planted: 7 messages)
    planted = next(iter(stored["entries"]))
    stored["entries"][planted][0]["messages"] = 7
    cache.write_text(json.dumps(stored))
    assert 7 in [d["messages"] for d in status(run_cli, path)["details"]]  # type: ignore[index, union-attr]
    # a row of another shape: ignored, that manifest is read again
    stored["entries"][planted][0]["messages"] = "seven"
    cache.write_text(json.dumps(stored))
    assert status(run_cli, path) == first
    # a corrupt cache file: ignored and written anew
    cache.write_text("{not json")
    assert status(run_cli, path) == first
    assert json.loads(cache.read_text())["format"] == "session-status-2"
    # a new session: its manifest is a new blob, summarised; the others come from the cache
    more = run_cli("-C", path, "sessions", "ingest", SESSIONS / "fourth-bag-thumbs-down.jsonl",
                   "--agent", "bot")
    assert more.code == 0, more.err
    after = status(run_cli, path)
    assert after["sessions"] == 3
    assert len(json.loads(cache.read_text())["entries"]) == 3
