"""Git's automatic maintenance after expgit wrote objects: triggered past a (low) gc.auto,
off with gc.auto=0 or maintenance.auto=false, detached by default, one at a time, a
failure is one warning line and the command's result stands; doctor reports and fixes."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from conftest import EXAMPLE, CliResult, RunCli, git

from expgit.git import maintenance, maintenance_settings
from expgit.git.repo import GitRepo
from expgit.init import init_repository

SESSION = EXAMPLE / "sessions" / "pet-question.jsonl"


@pytest.fixture(autouse=True)
def nothing_pending() -> None:
    maintenance._pending.clear()


def common_dir(path: Path) -> Path:
    return Path(git(path, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())


def plant_loose(path: Path, in_17: int = 3) -> None:
    """Write loose blobs (through expgit's writer) until ``objects/17`` holds ``in_17``:
    past gc.auto=1's threshold of 1, as git estimates it."""
    repo = GitRepo.discover(path)
    folder = common_dir(path) / "objects" / "17"
    i = 0
    while maintenance.sample_count(folder.parent) < in_17:
        i += 1
        repo.write_blob(b"planted %d\n" % i)
    repo.close()
    maintenance._pending.clear()  # only the command under test counts


def packs(path: Path) -> list[str]:
    return sorted(p.name for p in (common_dir(path) / "objects" / "pack").glob("*.pack"))


def has_bloom_filters(path: Path) -> bool:
    graph = common_dir(path) / "objects" / "info" / "commit-graph"
    return graph.is_file() and b"BIDX" in graph.read_bytes()[:200]


def new_repo(tmp_path: Path, *, bare: bool = False, **config: str) -> Path:
    path = tmp_path / ("hub.git" if bare else "repo")
    init_repository(path, bare=bare)
    for key, value in config.items():
        git(path, "config", key.replace("_", "."), value)
    return path


def ingest(run_cli: RunCli, path: Path, session: Path = SESSION) -> CliResult:
    return run_cli("-C", path, "sessions", "ingest", session, "--agent", "bot", "--json")


def test_past_gc_auto_a_writing_command_packs_and_writes_bloom_filters(tmp_path: Path,
                                                                       run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    assert packs(path) == []
    result = ingest(run_cli, path)
    assert result.code == 0, result.err
    assert json.loads(result.out)["commit"]
    assert result.err == ""
    assert len(packs(path)) == 1
    assert has_bloom_filters(path)
    # young unreachable objects are kept (git's grace period, never --prune=now)
    planted = git(path, "hash-object", "--stdin", input="planted 1\n").strip()
    assert git(path, "cat-file", "-t", planted).strip() == "blob"
    # what is left does not make every later command run it again
    assert not maintenance.is_due(common_dir(path), common_dir(path) / "objects",
                                  maintenance_settings.Settings(gc_auto=1))


def test_a_read_only_command_never_maintains(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    assert run_cli("-C", path, "list", "--json").code == 0
    assert packs(path) == []


@pytest.mark.parametrize("setting", [("gc.auto", "0"), ("maintenance.auto", "false")])
def test_the_users_settings_turn_it_off(tmp_path: Path, run_cli: RunCli,
                                        setting: tuple[str, str]) -> None:
    path = new_repo(tmp_path, gc_autoDetach="false")
    git(path, "config", "gc.auto", "1")
    git(path, "config", *setting)
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path) == []
    assert not has_bloom_filters(path)


def test_below_the_thresholds_nothing_runs(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_autoDetach="false")  # gc.auto: git's 6700
    git(path, "config", "maintenance.loose-objects.auto", "100000")
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert packs(path) == []


def test_a_hundred_loose_objects_are_packed_by_gits_loose_objects_task(
        tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_autoDetach="false")  # gc.auto: git's 6700
    plant_loose(path)  # about 900 loose objects: past 100, far below 6700
    objects = common_dir(path) / "objects"
    assert ingest(run_cli, path).code == 0
    assert len(packs(path)) == 1  # all of them packed, unreachable ones too (no prune)
    assert has_bloom_filters(path)
    # the next run deletes the loose copies git packed (prune-packed): nothing is lost
    other = EXAMPLE / "sessions" / "bags-then-cancel.jsonl"
    assert ingest(run_cli, path, other).code == 0
    assert maintenance.loose_sample(objects) * 16 < 100
    planted = git(path, "hash-object", "--stdin", input="planted 1\n").strip()
    assert git(path, "cat-file", "-t", planted).strip() == "blob"  # packed, not lost
    git(path, "fsck", "--no-progress", "--no-dangling")


def test_the_small_packs_each_run_leaves_are_rolled_up_geometrically(
        tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_autoDetach="false")
    sessions = sorted((EXAMPLE / "sessions").glob("*.jsonl"))
    for round_ in range(3):  # three maintained runs, each packing its loose objects
        plant_loose(path, in_17=3 * (round_ + 1))
        assert ingest(run_cli, path, sessions[round_]).code == 0
    assert len(packs(path)) < 3  # rolled up, not one small pack per run
    for i in (1, 3 * 3):  # unreachable planted objects of every run: all kept
        planted = git(path, "hash-object", "--stdin", input=f"planted {i}\n").strip()
        assert git(path, "cat-file", "-t", planted).strip() == "blob"
    git(path, "fsck", "--no-progress", "--no-dangling")


def test_gc_auto_pack_limit_zero_keeps_the_packs_apart(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_autoDetach="false", gc_autoPackLimit="0")
    sessions = sorted((EXAMPLE / "sessions").glob("*.jsonl"))
    for round_ in range(3):
        plant_loose(path, in_17=3 * (round_ + 1))
        assert ingest(run_cli, path, sessions[round_]).code == 0
    assert len(packs(path)) == 3


def test_commit_graph_off_is_honoured(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false", gc_writeCommitGraph="false")
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert len(packs(path)) == 1
    assert not has_bloom_filters(path)


def test_by_default_it_runs_detached_after_the_result(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1")
    plant_loose(path)
    result = ingest(run_cli, path)
    assert result.code == 0 and result.err == ""
    assert json.loads(result.out)["commit"]
    child = maintenance._children[-1]
    assert child.wait(timeout=120) == 0
    assert len(packs(path)) == 1
    assert has_bloom_filters(path)


def test_a_bare_hub_is_maintained_too(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, bare=True, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    assert ingest(run_cli, path).code == 0
    assert len(packs(path)) == 1
    assert has_bloom_filters(path)


def test_never_twice_at_once(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    lock = common_dir(path) / "expgit" / maintenance.LOCK_FILE
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another maintenance is running
        assert ingest(run_cli, path).code == 0
        assert packs(path) == []
    other = EXAMPLE / "sessions" / "bags-then-cancel.jsonl"
    assert ingest(run_cli, path, other).code == 0  # none running any more: this one packs
    assert len(packs(path)) == 1


def test_a_failing_maintenance_is_one_warning_and_the_result_stands(tmp_path: Path,
                                                                    run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false")
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
    assert maintenance.last_failure(common_dir(path)) is not None
    assert git(path, "log", "-1", "--format=%s", "expgit/sessions").strip()


def test_a_read_only_object_store_is_one_warning(tmp_path: Path, run_cli: RunCli,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What the OS answers for a read-only mount (root ignores file modes, so a chmod
    cannot make one here): the objects folder is not writable."""
    path = new_repo(tmp_path, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    objects = common_dir(path) / "objects"
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: (
        False if Path(p) == objects and mode == os.W_OK else real_access(p, mode)))
    result = ingest(run_cli, path)
    assert result.code == 0
    lines = result.err.splitlines()
    assert len(lines) == 1 and "read-only: git maintenance skipped" in lines[0]
    assert packs(path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_doctor_fix_on_a_read_only_pack_folder_warns(tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1")
    plant_loose(path)
    pack_dir = common_dir(path) / "objects" / "pack"
    pack_dir.chmod(0o555)
    try:
        result = run_cli("-C", path, "doctor", "--fix", "--json")
    finally:
        pack_dir.chmod(0o755)
    assert json.loads(result.out)["maintenance_warning"]
    assert packs(path) == []


def test_doctor_reports_an_unmaintained_repository_and_fix_maintains_it(
        tmp_path: Path, run_cli: RunCli) -> None:
    path = new_repo(tmp_path, gc_auto="1")
    plant_loose(path)
    result = run_cli("-C", path, "doctor", "--json")
    assert result.code == 3
    report = json.loads(result.out)
    assert report["healthy"] is False
    assert report["maintenance"]["due"] is True
    assert report["maintenance"]["loose_objects"] >= 3 * 256
    human = run_cli("-C", path, "doctor")
    assert "unmaintained: about" in human.out and "--fix" in human.out
    fixed = run_cli("-C", path, "doctor", "--fix", "--json")
    assert fixed.code == 0, fixed.out
    after = json.loads(fixed.out)
    assert after["maintained"] is True and after["healthy"] is True
    assert after["maintenance"]["due"] is False
    assert len(packs(path)) == 1 and has_bloom_filters(path)
    assert run_cli("-C", path, "doctor").code == 0


def test_a_long_running_writer_checks_periodically(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = new_repo(tmp_path, bare=True, gc_auto="1", gc_autoDetach="false")
    plant_loose(path)
    monkeypatch.setattr(maintenance, "PERIOD", 0.0)
    before = list(maintenance._children)
    repo = GitRepo.discover(path)
    repo.write_blob(b"one more record of a service that never exits\n")
    repo.close()
    started = [c for c in maintenance._children if c not in before]
    assert len(started) == 1  # always detached there, whatever gc.autoDetach says
    assert started[0].wait(timeout=120) == 0
    assert len(packs(path)) == 1


def test_settings_are_read_as_git_reads_them() -> None:
    parsed = maintenance_settings.parse_settings(
        "gc.auto\n2k\0gc.autodetach\nno\0maintenance.auto\n\0core.commitgraph\noff\0")
    assert parsed == maintenance_settings.Settings(gc_auto=2048, enabled=True, detach=False,
                                          commit_graph=False)
    assert parsed.threshold == 8  # git's DIV_ROUND_UP(2048, 256)
    assert maintenance_settings.parse_settings("") == maintenance_settings.Settings()
    parse = maintenance_settings.parse_settings
    assert parse("maintenance.loose-objects.auto\n0\0").loose_auto == 0
    assert parse("").pack_limit == 50 and parse("gc.autopacklimit\n0\0").pack_limit == 0
    assert maintenance_settings.Settings(gc_auto=6700).threshold == 27


def test_the_estimate_counts_only_object_names(tmp_path: Path) -> None:
    folder = tmp_path / "objects" / "17"
    folder.mkdir(parents=True)
    (folder / ("a" * 38)).write_bytes(b"")
    (folder / "tmp_obj_123").write_bytes(b"")
    (folder / ("g" * 38)).write_bytes(b"")
    assert maintenance.sample_count(tmp_path / "objects") == 1
    assert maintenance.loose_estimate(tmp_path / "objects") == 256
