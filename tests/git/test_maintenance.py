"""Git's automatic maintenance after expgit wrote objects: ``git maintenance run --auto``
past a (low) gc.auto, and the commit-graph with Bloom filters; off with gc.auto=0 or
maintenance.auto=false; a failure is one warning line and the command's result stands;
doctor reports and fixes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import EXAMPLE, CliResult, RunCli, git

from expgit.git import maintenance
from expgit.git.repo import GitRepo
from expgit.init import init_repository

SESSION = EXAMPLE / "sessions" / "pet-question.jsonl"


@pytest.fixture(autouse=True)
def nothing_pending() -> None:
    maintenance._pending.clear()


def common_dir(path: Path) -> Path:
    return Path(git(path, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())


def plant_loose(path: Path, in_17: int = 3, *, reachable: bool = False) -> None:
    """Write loose blobs (through expgit's writer) until ``objects/17`` holds ``in_17``:
    past gc.auto=1's threshold of 1, as git estimates it. ``reachable``: kept on a ref."""
    repo = GitRepo.discover(path)
    folder = common_dir(path) / "objects" / "17"
    planted: dict[str, str | None] = {}
    i = 0
    while len(list(folder.glob("*"))) < in_17:
        i += 1
        planted[f"planted/{i}"] = repo.write_blob(b"planted %d\n" % i)
    if reachable:
        tree = repo.edit_tree(None, planted)
        git(path, "update-ref", "refs/planted", repo.write_commit(tree, [], "planted\n"))
    repo.close()
    maintenance._pending.clear()  # only the command under test counts


def packs(path: Path) -> list[str]:
    return sorted(p.name for p in (common_dir(path) / "objects" / "pack").glob("*.pack"))


def has_bloom_filters(path: Path) -> bool:
    return maintenance.has_bloom_filters(common_dir(path) / "objects")


def new_repo(tmp_path: Path, config: dict[str, str] | None = None, *, bare: bool = False
             ) -> Path:
    path = tmp_path / ("hub.git" if bare else "repo")
    init_repository(path, bare=bare)
    for key, value in (config or {}).items():
        git(path, "config", key.replace("_", "."), value)
    return path


def ingest(run_cli: RunCli, path: Path, session: Path = SESSION) -> CliResult:
    return run_cli("-C", path, "sessions", "ingest", session, "--agent", "bot", "--json")


def test_past_gc_auto_a_writing_command_packs_and_writes_bloom_filters(tmp_path: Path,
                                                                       run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false"})
    plant_loose(path)
    assert packs(path) == [] and not has_bloom_filters(path)
    result = ingest(run_cli, path)
    assert result.code == 0, result.err
    assert json.loads(result.out)["commit"]
    assert packs(path)
    assert has_bloom_filters(path)
    # young unreachable objects are kept (git's grace period, never --prune=now)
    planted = git(path, "hash-object", "--stdin", input="planted 1\n").strip()
    assert git(path, "cat-file", "-t", planted).strip() == "blob"


def test_git_keeps_the_bloom_filters_in_later_commit_graphs(tmp_path: Path,
                                                            run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false",
                                 "maintenance_commit-graph_auto": "-1"})  # every time
    sessions = sorted((EXAMPLE / "sessions").glob("*.jsonl"))
    for session in sessions[:2]:
        plant_loose(path)
        assert ingest(run_cli, path, session).code == 0
        assert has_bloom_filters(path)
    git(path, "commit-graph", "verify")


def test_a_read_only_command_never_maintains(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false"})
    plant_loose(path)
    assert run_cli("-C", path, "list", "--json").code == 0
    assert packs(path) == []


@pytest.mark.parametrize("setting", [("gc.auto", "0"), ("maintenance.auto", "false")])
def test_the_users_settings_turn_it_off(tmp_path: Path, run_cli: RunCli,
                                        setting: tuple[str, str]) -> None:
    path = new_repo(tmp_path, {"gc_autoDetach": "false"})
    git(path, "config", "gc.auto", "1")
    git(path, "config", *setting)
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path) == []


def test_below_the_thresholds_nothing_is_packed(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_autoDetach": "false"})  # gc.auto: git's 6700
    git(path, "config", "maintenance.loose-objects.auto", "100000")
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path) == []
    assert has_bloom_filters(path)  # the first commit-graph, though


def test_a_hundred_loose_objects_are_packed_by_gits_loose_objects_task(
        tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_autoDetach": "false"})  # gc.auto: git's 6700
    plant_loose(path)  # about 900 loose objects: past 100, far below 6700
    assert ingest(run_cli, path).code == 0
    assert packs(path)  # all of them packed, unreachable ones too (no prune)
    other = EXAMPLE / "sessions" / "bags-then-cancel.jsonl"
    assert ingest(run_cli, path, other).code == 0  # deletes the loose copies git packed
    assert int(git(path, "count-objects").split()[0]) < 100
    planted = git(path, "hash-object", "--stdin", input="planted 1\n").strip()
    assert git(path, "cat-file", "-t", planted).strip() == "blob"  # packed, not lost
    git(path, "fsck", "--no-progress", "--no-dangling")


def test_commit_graph_off_is_honoured(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false",
                                 "gc_writeCommitGraph": "false"})
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path)
    assert not has_bloom_filters(path)


def test_by_default_gc_runs_detached_after_the_result(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1"})
    plant_loose(path, reachable=True)
    result = ingest(run_cli, path)
    assert result.code == 0 and result.err == ""
    assert json.loads(result.out)["commit"]
    pid_file = common_dir(path) / "gc.pid"  # the detached gc's, removed when it ends
    deadline = time.monotonic() + 120
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_file.exists()
    assert packs(path)


def test_a_bare_hub_is_maintained_too(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false"}, bare=True)
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path)
    assert has_bloom_filters(path)


def test_a_failing_maintenance_is_one_warning_and_the_result_stands(tmp_path: Path,
                                                                    run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false"})
    plant_loose(path)
    pack_dir = common_dir(path) / "objects" / "pack"
    pack_dir.rmdir()
    pack_dir.write_text("not a folder: git cannot write a pack here\n")
    result = ingest(run_cli, path)
    assert result.code == 0
    assert json.loads(result.out)["commit"]
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("expgit: warning: git maintenance")
    assert "the command's result stands" in lines[0]
    assert git(path, "log", "-1", "--format=%s", "expgit/sessions").strip()


def test_doctor_reports_an_unmaintained_repository_and_fix_maintains_it(
        tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1"})
    plant_loose(path, reachable=True)
    result = run_cli("-C", path, "doctor", "--json")
    assert result.code == 3
    report = json.loads(result.out)
    assert report["healthy"] is False
    assert report["maintenance"]["due"] is True
    assert report["maintenance"]["loose_objects"] >= 3
    human = run_cli("-C", path, "doctor")
    assert "unmaintained: about" in human.out and "--fix" in human.out
    fixed = run_cli("-C", path, "doctor", "--fix", "--json")
    assert fixed.code == 0, fixed.out
    after = json.loads(fixed.out)
    assert after["maintained"] is True and after["healthy"] is True
    assert after["maintenance"]["due"] is False
    assert len(packs(path)) == 1 and has_bloom_filters(path)
    assert run_cli("-C", path, "doctor").code == 0


def test_doctor_shows_what_a_failed_detached_gc_left(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path)
    (common_dir(path) / "gc.log").write_text("error: disk full\nmore\n")
    report = json.loads(run_cli("-C", path, "doctor", "--json").out)
    assert report["maintenance"]["last_failure"] == "error: disk full"


def test_a_long_running_writer_maintains_periodically(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = new_repo(tmp_path, {"gc_auto": "1", "gc_autoDetach": "false"}, bare=True)
    plant_loose(path)
    monkeypatch.setattr(maintenance, "PERIOD", 0.0)
    before = list(maintenance._threads)
    repo = GitRepo.discover(path)
    repo.write_blob(b"one more record of a service that never exits\n")
    repo.close()
    started = [t for t in maintenance._threads if t not in before]
    assert len(started) == 1
    started[0].join(timeout=120)
    assert packs(path)
