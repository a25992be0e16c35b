"""`sessions ingest --from claude-code|codex`: the tools' default folders, --path and
--since, only changed files read (size and mtime recorded in the manifests), files
still being written left for next time, files of no known format reported, never
stored."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, repo_state
from json_shapes import assert_shape

import expgit.sessions.ingest.report as ingest_report
from expgit.sessions.formats.parse import ParsedSession, SessionFormat, parse_session_file
from expgit.sessions.ingest.discovery import default_folder, find_session_files
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
CODEX = FIXTURES / "codex_rollout.jsonl"
PROJECTS = FIXTURES / "claude_projects"
EXTRA_TURN = [
    {"timestamp": "2026-11-30T09:20:00.000Z", "type": "response_item",
     "payload": {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "And bump the version."}]}},
    {"timestamp": "2026-11-30T09:20:04.000Z", "type": "response_item",
     "payload": {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Version is 1.4.1 now."}]}},
]


@pytest.fixture
def tool_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    homes = {"codex": tmp_path / "codex-home", "claude-code": tmp_path / "claude-config"}
    monkeypatch.setenv("CODEX_HOME", str(homes["codex"]))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(homes["claude-code"]))
    return homes


def codex_file(home: Path, name: str = "rollout-2026-11-30T09-10-00-0199a1b2.jsonl",
               source: Path = CODEX) -> Path:
    path = home / "sessions" / "2026" / "11" / "30" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, path)
    return path


def ingest_json(run_cli: Any, repo_dir: Path, *args: str) -> tuple[dict[str, Any], str]:
    out = run_cli("-C", repo_dir, "sessions", "ingest", *args, "--json")
    assert out.code == 0, out.err
    data = json.loads(out.out)
    assert_shape("sessions ingest", data)
    return data, out.err


def test_default_folders_honour_the_tools_environment_variables(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    home = Path(os.environ["HOME"])
    assert default_folder("claude-code") == home / ".claude" / "projects"
    assert default_folder("codex") == home / ".codex" / "sessions"
    env = {"CODEX_HOME": str(tmp_path / "c"), "CLAUDE_CONFIG_DIR": str(tmp_path / "k")}
    assert default_folder("codex", env) == tmp_path / "c" / "sessions"
    assert default_folder("claude-code", env) == tmp_path / "k" / "projects"


def test_from_codex_reads_only_changed_files_and_waits_for_an_incomplete_one(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        tool_homes: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    repo_dir = tmp_path / "repo"
    path = codex_file(tool_homes["codex"])
    data, _ = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert (data["source"], data["folder"]) == ("codex", str(path.parents[3]))
    assert [(f["format"], f["outcome"], f["messages"]) for f in data["files"]] == [
        ("codex", "new", 9)]
    assert data["commit"] is not None and data["not_read"] == 0
    [manifest] = SessionStore(seeded_repo).manifests()
    info = path.stat()
    assert (manifest.source_size, manifest.source_mtime_ns) == (info.st_size,
                                                                info.st_mtime_ns)

    opened: list[Path] = []  # an unchanged file is not even opened
    def parse(path: Path, session_format: SessionFormat) -> ParsedSession:
        opened.append(path)
        return parse_session_file(path, session_format)

    monkeypatch.setattr(ingest_report, "parse_session_file", parse)
    before = repo_state(repo_dir)
    data, _ = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert (data["files"], data["not_read"], data["commit"]) == ([], 1, None)
    assert opened == [] and repo_state(repo_dir) == before

    with path.open("a") as handle:  # a turn being written: its last line is cut off
        handle.write(json.dumps(EXTRA_TURN[0]) + "\n" + json.dumps(EXTRA_TURN[1])[:40])
    data, err = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert [(f["outcome"], f["truncated_line"]) for f in data["files"]] == [
        ("incomplete", 24)]
    assert data["incomplete"] == [str(path)] and data["commit"] is None
    assert "line 24 is still being written: left for the next ingest" in err
    assert repo_state(repo_dir) == before

    with path.open("a") as handle:  # the line is complete now
        handle.write(json.dumps(EXTRA_TURN[1])[40:] + "\n")
    data, _ = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert [(f["outcome"], f["messages"]) for f in data["files"]] == [("changed", 11)]
    assert opened == [path, path]


def test_a_touched_file_is_read_once_more_and_its_new_time_recorded(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        tool_homes: dict[str, Path]) -> None:
    repo_dir = tmp_path / "repo"
    path = codex_file(tool_homes["codex"])
    ingest_json(run_cli, repo_dir, "--from", "codex")
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))
    data, _ = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert [f["outcome"] for f in data["files"]] == ["unchanged"]
    assert data["commit"] is not None  # only the recorded modification time changed
    [manifest] = SessionStore(seeded_repo).manifests()
    assert manifest.source_mtime_ns == info.st_mtime_ns + 5_000_000_000
    assert manifest.segments == [] and manifest.status == "pending"
    data, _ = ingest_json(run_cli, repo_dir, "--from", "codex")
    assert (data["files"], data["not_read"]) == ([], 1)


def test_from_claude_code_finds_sessions_and_subagent_files_but_not_compaction_agents(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        tool_homes: dict[str, Path]) -> None:
    shutil.copytree(PROJECTS, tool_homes["claude-code"] / "projects")
    data, _ = ingest_json(run_cli, tmp_path / "repo", "--from", "claude-code")
    assert sorted(Path(f["file"]).name for f in data["files"]) == [
        "7e1f3a5b-2c4d-4e6f-8a0b-1c2d3e4f5a6b.jsonl", "agent-a7f3e21.jsonl"]
    manifests = SessionStore(seeded_repo).manifests()
    [parent] = [m for m in manifests if m.parent_session is None]
    [sub] = [m for m in manifests if m.parent_session is not None]
    assert parent.subagents == {"toolu_task2": sub.session_key}
    assert [(s.start, s.end, s.agent_model) for s in sub.active()] == [
        (0, 3, "claude-haiku-4-5-20251001")]
    data, _ = ingest_json(run_cli, tmp_path / "repo", "--from", "claude-code")
    assert (data["files"], data["not_read"], data["commit"]) == ([], 2, None)


def test_path_and_since_choose_the_folder_and_the_files(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    old = codex_file(folder, "rollout-old.jsonl")
    new = codex_file(folder, "rollout-new.jsonl", FIXTURES / "responses_items.jsonl")
    os.utime(old, (1_700_000_000, 1_700_000_000))  # 2023-11-14
    assert find_session_files("codex", folder) == [new, old]
    data, _ = ingest_json(run_cli, tmp_path / "repo", "--from", "codex", "--path",
                          str(folder), "--since", "2024-01-01")
    assert [Path(f["file"]).name for f in data["files"]] == ["rollout-new.jsonl"]
    assert data["files"][0]["format"] == "responses"


def test_a_missing_default_folder_is_a_one_line_note(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        tool_homes: dict[str, Path]) -> None:
    repo_dir = tmp_path / "repo"
    before = repo_state(repo_dir)
    out = run_cli("-C", repo_dir, "sessions", "ingest", "--from", "claude-code")
    assert out.code == 0, out.err
    folder = tool_homes["claude-code"] / "projects"
    assert (f"note: no Claude Code sessions: {folder} does not exist (--path names "
            "another folder)") in out.out
    assert repo_state(repo_dir) == before


def test_a_file_of_no_known_format_is_named_and_never_stored(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        tool_homes: dict[str, Path]) -> None:
    repo_dir = tmp_path / "repo"
    junk = codex_file(tool_homes["codex"], "rollout-junk.jsonl", CODEX)
    junk.write_text('{"event": "login", "user": "sam"}\n{"event": "logout"}\n')
    before = repo_state(repo_dir)
    out = run_cli("-C", repo_dir, "sessions", "ingest", junk)  # named: an error
    assert out.code == 5
    assert out.err.strip().splitlines()[0] == (
        f'expgit: error: session file {junk}: no known session format: line 1: '
        '{"event": "login", "user": "sam"} (rows of: claude_code, codex, responses, '
        'anthropic, openai)')
    assert repo_state(repo_dir) == before
    good = codex_file(tool_homes["codex"])
    data, err = ingest_json(run_cli, repo_dir, "--from", "codex")  # found: reported
    assert data["unrecognized"] == [str(junk)]
    assert {Path(f["file"]).name: f["outcome"] for f in data["files"]} == {
        junk.name: "unrecognized", good.name: "new"}
    assert f"{junk}: no known session format: line 1: " in err
    assert len(SessionStore(seeded_repo).manifests()) == 1


def test_a_named_file_with_a_truncated_last_line_is_read_without_it(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text(CODEX.read_text() + json.dumps(EXTRA_TURN[0])[:30])
    out = run_cli("-C", tmp_path / "repo", "sessions", "ingest", path, "--json")
    assert out.code == 0, out.err
    [report] = json.loads(out.out)["files"]
    assert (report["outcome"], report["messages"], report["truncated_line"]) == (
        "new", 9, 23)
    assert f"{path}: line 23 is incomplete (still being written?): skipped" in out.err


def test_from_and_files_do_not_mix(run_cli: Any, seeded_repo: ExperienceRepository,
                                   tmp_path: Path) -> None:
    repo_dir = tmp_path / "repo"
    assert run_cli("-C", repo_dir, "sessions", "ingest").code == 2
    assert run_cli("-C", repo_dir, "sessions", "ingest", CODEX, "--from", "codex").code == 2
    assert run_cli("-C", repo_dir, "sessions", "ingest", CODEX, "--since",
                   "2026-01-01").code == 2
