"""Skill usage from real sessions (issue 34, item 4): `sessions ingest` records each skill
load a session shows (a Claude Code `Skill` call, a read of `.agents/skills/<x>/SKILL.md`
in Codex), `list --usage` and `status` count them, `status` names the stale skills once
the sessions span `[skills] stale_days`, a `Skill` row naming no skill is counted (never
fatal), and a load in a thumbs-down segment counts in the skill's track record."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import git
from scripted_pipeline import lesson_bodies, merge_of, reflect_for

from expgit.llm.factory import LLMRuntime
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.sessions.ingest.command import ingest
from expgit.sessions.run import run
from expgit.sessions.status.ledger import Usage
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository

NOW = datetime.now(UTC).replace(microsecond=0)
BAGS = "checked-baggage-allowance"
REFUNDS = "refund-method-rules"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def claude_code(session: str, at: datetime, skills: list[dict[str, Any]],
                failing: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """A Claude Code transcript as it writes one: a user turn, then per Skill input an
    assistant `Skill` tool_use line, the user line with its tool_result ("Launching
    skill: x", or an error for the calls numbered in ``failing``) and the isMeta line
    with the skill's body that Claude Code adds."""
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/dev/shop",
            "sessionId": session, "version": "2.1.0", "gitBranch": "main"}
    rows: list[dict[str, Any]] = [{**base, "parentUuid": None, "type": "user", "uuid": "u0",
                                   "timestamp": stamp(at), "message": {
                                       "role": "user", "content": "How many bags are free?"}}]
    for n, skill_input in enumerate(skills, start=1):
        tool_id = f"toolu_{session[:4]}{n}"
        rows.append({**base, "parentUuid": rows[-1]["uuid"], "type": "assistant",
                     "uuid": f"a{n}", "timestamp": stamp(at + timedelta(seconds=n)),
                     "message": {"id": f"msg_{n}", "type": "message", "role": "assistant",
                                 "model": "claude-sonnet-4-5-20250929", "content": [
                                     {"type": "tool_use", "id": tool_id, "name": "Skill",
                                      "input": skill_input}]}})
        name = skill_input.get("skill")
        failed = n in failing
        rows.append({**base, "parentUuid": f"a{n}", "type": "user", "uuid": f"r{n}",
                     "timestamp": stamp(at + timedelta(seconds=n, milliseconds=500)),
                     "message": {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": tool_id, "is_error": failed,
                          "content": f"<tool_use_error>Unknown skill: {name}</tool_use_error>"
                          if failed else f"Launching skill: {name}"}]},
                     "toolUseResult": f"Error: Unknown skill: {name}" if failed
                     else {"success": True, "commandName": name}})
        if not failed:
            rows.append({**base, "parentUuid": f"r{n}", "type": "user", "uuid": f"b{n}",
                         "isMeta": True, "timestamp": rows[-1]["timestamp"],
                         "message": {"role": "user", "content": [{"type": "text", "text":
                             f"Base directory for this skill: /home/dev/shop/.claude/skills/"
                             f"{name}\n\n# {name}\n..."}]}})
    rows.append({**base, "parentUuid": rows[-1]["uuid"], "type": "assistant", "uuid": "end",
                 "timestamp": stamp(at + timedelta(seconds=30)), "message": {
                     "id": "msg_end", "type": "message", "role": "assistant",
                     "model": "claude-sonnet-4-5-20250929",
                     "content": [{"type": "text", "text": "Gold economy: 3 free bags."}]}})
    return rows


def write(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cli_json(run_cli: Any, repo: Path, *args: str) -> Any:
    result = run_cli("-C", repo, *args, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_claude_code_skill_calls_show_in_list_usage_and_status(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    assert "skills:" not in run_cli("-C", root, "status").out  # no session yet: no part
    recent = write(tmp_path / "recent.jsonl", claude_code(
        "1111aaaa", NOW - timedelta(days=2), [{"skill": BAGS}, {"skill": BAGS}]))
    report = cli_json(run_cli, root, "sessions", "ingest", str(recent))
    assert (report["skill_loads"], report["unknown_skill_loads"]) == (2, 0)
    [manifest] = SessionStore(seeded_repo).manifests()
    assert [(load.skill, load.message_index, load.via) for load in manifest.skill_loads] == [
        (BAGS, 1, "skill_tool"), (BAGS, 2, "skill_tool")]
    listed = {e["name"]: e for e in cli_json(run_cli, root, "list", "--usage")["experiences"]}
    last = int((NOW - timedelta(days=2) + timedelta(seconds=2)).timestamp())
    assert listed[BAGS]["usage"] == {"loads_30d": 2, "last_load": last, "loads": 2}
    assert listed[REFUNDS]["usage"] == {"loads_30d": 0, "last_load": None, "loads": 0}
    human = run_cli("-C", root, "list", "--usage")
    assert human.code == 0 and f"{BAGS:<44} loads (30 days)     2" in human.out
    # one session of one day: not enough history to call a skill stale
    skills = cli_json(run_cli, root, "status")["skills"]
    assert skills["enough_history"] is False and skills["stale"] == []
    assert skills["usage"][BAGS]["loads_30d"] == 2
    text = run_cli("-C", root, "status").out
    assert "stale: not enough history yet (the sessions span 0 of 30 days)" in text
    # an old session (40 days ago) loads a skill: the sessions now span 38+ days
    old = write(tmp_path / "old.jsonl", claude_code(
        "2222bbbb", NOW - timedelta(days=40), [{"skill": REFUNDS}]))
    cli_json(run_cli, root, "sessions", "ingest", str(old))
    skills = cli_json(run_cli, root, "status")["skills"]
    assert skills["enough_history"] is True and skills["span_days"] >= 30
    assert BAGS not in skills["stale"]  # loaded two days ago
    assert REFUNDS in skills["stale"]  # loaded, but not in the last 30 days
    assert "flight-change-rules" in skills["stale"]  # never loaded
    assert skills["usage"][REFUNDS] == {
        "loads_30d": 0, "loads": 1,
        "last_load": int((NOW - timedelta(days=40, seconds=-1)).timestamp())}
    assert "stale (no load in 30 days): " in run_cli("-C", root, "status").out
    # stale_days is a setting: at 60 days the history (about 40) is too short again
    settings = root / "expgit.toml"
    settings.write_text(settings.read_text() + "\n[skills]\nstale_days = 60\n")
    git(root, "commit", "-q", "-am", "stale after 60 days")
    skills = cli_json(run_cli, root, "status")["skills"]
    assert (skills["stale_days"], skills["enough_history"], skills["stale"]) == (60, False, [])


def test_skill_rows_without_a_known_name_are_counted_not_fatal(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    path = write(tmp_path / "s.jsonl", claude_code("3333cccc", NOW, [
        {"skill": BAGS, "args": "gold"}, {"args": "no name"}, {"skill": "no-such-skill"},
        {"skill": "sk-ant-api03-" + "A" * 40}, {"skill": 7}, {"skill": "shop:no-such"},
        {"skill": REFUNDS}], failing=(3, 7)))
    result = run_cli("-C", root, "sessions", "ingest", path)
    assert result.code == 0, result.err
    assert "skill loads: 7 (5 naming no skill on main, 2 failed)" in result.out
    report = cli_json(run_cli, root, "sessions", "ingest", str(path))  # unchanged: counted
    assert (report["skill_loads"], report["unknown_skill_loads"],
            report["failed_skill_loads"]) == (7, 5, 2)
    assert report["files"][0]["unknown_skill_loads"] == 5
    [manifest] = SessionStore(seeded_repo).manifests()
    # a name the redactor would change, or not a string, is kept as no name
    assert [(load.skill, load.failed) for load in manifest.skill_loads] == [
        (BAGS, False), (None, False), ("no-such-skill", True), (None, False),
        (None, False), ("shop:no-such", False), (REFUNDS, True)]
    skills = cli_json(run_cli, root, "status")["skills"]
    assert skills["unknown_loads"] == 1  # the named one not on main that did load
    assert skills["usage"][BAGS]["loads_30d"] == 1
    assert skills["usage"][REFUNDS]["loads"] == 0  # its call failed: nothing loaded


def test_codex_reading_a_skill_file_is_a_load(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    at = NOW - timedelta(hours=1)

    def envelope(kind: str, payload: dict[str, Any], seconds: int) -> dict[str, Any]:
        return {"timestamp": stamp(at + timedelta(seconds=seconds)), "type": kind,
                "payload": payload}

    def shell(call: str, command: str, seconds: int) -> list[dict[str, Any]]:
        return [envelope("response_item", {
                    "type": "function_call", "name": "shell", "call_id": call,
                    "arguments": json.dumps({"command": ["bash", "-lc", command]})}, seconds),
                envelope("response_item", {"type": "function_call_output", "call_id": call,
                                           "output": "---\nname: x\n---\n"}, seconds)]

    rows = [envelope("session_meta", {"id": "0199-codex-skill", "cwd": "/w"}, 0),
            envelope("response_item", {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What refund do I get?"}]}, 1),
            # paging through one SKILL.md in one turn is one load
            *shell("c1", f"sed -n 1,80p .agents/skills/{REFUNDS}/SKILL.md", 2),
            *shell("c2", f"sed -n 80,160p .agents/skills/{REFUNDS}/SKILL.md", 3),
            *shell("c3", "cat ~/.codex/skills/notes/README.md", 4),  # not a SKILL.md
            envelope("response_item", {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "A refund to the card."}]}, 5)]
    path = write(tmp_path / "rollout-codex.jsonl", rows)
    report = cli_json(run_cli, tmp_path / "repo", "sessions", "ingest", str(path))
    assert report["files"][0]["format"] == "codex"
    assert (report["skill_loads"], report["unknown_skill_loads"]) == (1, 0)
    [manifest] = SessionStore(seeded_repo).manifests()
    [load] = manifest.skill_loads
    assert (load.skill, load.via) == (REFUNDS, "skill_file")
    assert load.at == at + timedelta(seconds=2)
    listed = {e["name"]: e for e in cli_json(run_cli, tmp_path / "repo", "list",
                                             "--usage")["experiences"]}
    assert listed[REFUNDS]["usage"]["loads_30d"] == 1


def test_a_load_in_a_thumbs_down_segment_counts_in_the_track_record(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"role": "user", "content": "How many bags are free for gold economy?",
         "timestamp": stamp(NOW)},
        {"role": "assistant", "content": "Let me check.", "response_id": "resp-1",
         "timestamp": stamp(NOW + timedelta(seconds=5)), "tool_calls": [
             {"id": "call_1", "type": "function", "function": {
                 "name": "Skill", "arguments": json.dumps({"skill": BAGS})}}]},
        {"_type": "feedback", "response_id": "resp-1", "kind": "thumb_down",
         "text": "wrong", "at": stamp(NOW + timedelta(seconds=30))}]
    asyncio.run(ingest(seeded_repo, [write(tmp_path / "down.jsonl", rows)]))
    bodies = {BAGS: lesson_bodies(seeded_repo)[BAGS]}
    chat = ScriptedChatModel([Step("reflect", reflect_for(bodies)),
                              Step("merge", merge_of(bodies))])
    report = asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(chat)))
    assert report.errors == [] and len(report.trained) == 1
    stats = {e["name"]: e["stats"] for e in cli_json(
        run_cli, tmp_path / "repo", "list", "--stats")["experiences"]}
    assert stats[BAGS]["times_used"] == 1 and stats[BAGS]["failed"] == 1
    assert stats[REFUNDS]["times_used"] == 0  # not loaded: not in its record


def test_usage_is_folded_per_changed_manifest_as_a_whole_count_gives_it(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """The kept status moved forward by one grown session equals a whole count."""
    from expgit.sessions.status import counts as status
    from expgit.store.derived.cache import index_file

    path = tmp_path / "grows.jsonl"
    write(path, claude_code("4444dddd", NOW - timedelta(days=3), [{"skill": BAGS}]))
    other = write(tmp_path / "other.jsonl", claude_code(
        "5555eeee", NOW - timedelta(days=3), [{"skill": BAGS}]))
    asyncio.run(ingest(seeded_repo, [path, other]))
    assert status.sessions_usage(seeded_repo).loads[BAGS]
    write(path, claude_code("4444dddd", NOW - timedelta(days=3),
                            [{"skill": BAGS}, {"skill": REFUNDS}]))
    asyncio.run(ingest(seeded_repo, [path]))
    kept = status.sessions_usage(seeded_repo)
    index_file(seeded_repo.git.common_dir).unlink()  # a whole count: every manifest read
    whole = status.sessions_usage(seeded_repo)
    assert kept == whole
    assert sum(n for n, _ in kept.loads[BAGS].values()) == 2
    assert sum(n for n, _ in kept.loads[REFUNDS].values()) == 1
    assert kept != Usage()


def test_a_session_ingested_before_loads_were_recorded_gets_them_on_the_next_ingest(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    from expgit.sessions.store import MANIFESTS
    from expgit.store.sidebranch import fanned

    path = write(tmp_path / "s.jsonl", claude_code("6666ffff", NOW, [{"skill": BAGS}]))
    asyncio.run(ingest(seeded_repo, [path]))
    store = SessionStore(seeded_repo)
    [manifest] = store.manifests()
    old = manifest.model_dump(mode="json", exclude={"skill_loads", "started_at", "ended_at"})
    store.branch.write({fanned(MANIFESTS, f"{manifest.session_key}.json"):
                        json.dumps(old).encode()}, "sessions: as an older expgit wrote it")
    assert store.manifests()[0].skill_loads == []
    report = asyncio.run(ingest(seeded_repo, [path]))
    [file] = report.files
    assert file.outcome == "changed" and file.segmentation is None  # not segmented again
    [again] = SessionStore(seeded_repo).manifests()
    assert [load.skill for load in again.skill_loads] == [BAGS]
    assert again.started_at == NOW and again.segments == manifest.segments
    assert asyncio.run(ingest(seeded_repo, [path])).commit is None  # then: unchanged
