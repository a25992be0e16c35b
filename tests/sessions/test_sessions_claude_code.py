"""Claude Code, complete: sub-agents (inline sidechains and subagents/agent-*.jsonl
files) as sessions of their own linked to the parent's Task call, compaction summaries
as context, isMeta rows and system reminders never a task boundary, the model of the
assistant rows."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from conftest import ROOT
from test_sessions_ingest import llm, reply, window_numbers

from expgit.core.domain import ToolPart
from expgit.llm.scripted import Step
from expgit.sessions.formats.parse import parse_session_file
from expgit.sessions.ingest.command import ingest
from expgit.sessions.manifest import SessionManifest
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
TASKS = FIXTURES / "claude_code_tasks.jsonl"
PROJECT = FIXTURES / "claude_projects" / "-home-dev-projects-shop"
SESSION2 = PROJECT / "7e1f3a5b-2c4d-4e6f-8a0b-1c2d3e4f5a6b.jsonl"


def by_parent(repo: ExperienceRepository) -> tuple[list[SessionManifest],
                                                   list[SessionManifest]]:
    manifests = SessionStore(repo).manifests()
    return ([m for m in manifests if m.parent_session is None],
            [m for m in manifests if m.parent_session is not None])


def test_inline_sidechain_is_a_subagent_session_linked_to_its_task_call() -> None:
    session = parse_session_file(TASKS)
    # the Task call and its result stay in the parent
    task = session.messages[1].parts[0]
    assert isinstance(task, ToolPart) and task.tool_name == "Task"
    assert task.tool_output == "Two calls: shop/cart.py:41 and shop/invoice.py:88."
    assert not any(isinstance(p, ToolPart) and p.tool_name == "Grep"
                   for m in session.messages for p in m.parts)
    [sub] = session.subagents
    assert sub.parent_tool_id == "toolu_task1"  # linked by the Task prompt
    assert [m.role for m in sub.messages] == ["user", "assistant", "assistant"]
    [grep] = [p for p in sub.messages[1].parts if isinstance(p, ToolPart)]
    assert grep.tool_name == "Grep"
    assert grep.tool_output is not None and "shop/invoice.py:88" in grep.tool_output
    assert sub.message_models == [None, "claude-haiku-4-5-20251001",
                                  "claude-haiku-4-5-20251001"]


def test_compaction_summary_is_context_and_reminders_and_meta_are_not_turns() -> None:
    session = parse_session_file(TASKS)
    assert [m.role for m in session.messages] == [
        "user", "assistant", "assistant", "system", "assistant", "assistant", "user",
        "assistant"]
    assert session.messages[3].plain_text.startswith("This session is being continued")
    users = [m.plain_text for m in session.messages if m.role == "user"]
    assert users == ["Replace legacy_price() with price_of() everywhere and keep the "
                     "tests green.", "Run the linter, please."]
    dumped = json.dumps([m.model_dump() for m in session.messages])
    assert "system-reminder" not in dumped and "TodoWrite" not in dumped
    assert "/clear" not in dumped  # the isMeta row
    assert session.skipped_rows["system_reminder"] == 2
    assert session.skipped_rows["meta"] == 1
    assert session.message_models == [
        None, "claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929", None,
        "claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", None,
        "claude-opus-4-1-20250805"]


def test_a_subagent_file_holds_only_its_subagent_and_its_id_links_the_task() -> None:
    parent = parse_session_file(SESSION2)
    assert parent.task_agents == {"toolu_task2": "a7f3e21"}
    assert parent.subagents == []
    child = parse_session_file(PROJECT / SESSION2.stem / "subagents" / "agent-a7f3e21.jsonl")
    assert child.messages == [] and child.skipped_rows == {"sidechain": 4}
    [sub] = child.subagents
    assert sub.agent_id == "a7f3e21" and sub.session_id == parent.session_id


def test_ingest_stores_each_subagent_as_one_segment_linked_both_ways(
        seeded_repo: ExperienceRepository) -> None:
    # the parent: one segment call; the compaction summary (message 4) may not start a
    # task, so the model's task at 4 is joined to the one before it
    chat, structured = llm(Step("segment", reply((1, "replace legacy_price"),
                                                 (4, "continue"), (7, "lint"))))
    report = asyncio.run(ingest(seeded_repo, [TASKS], llm=structured))
    chat.assert_done()
    assert window_numbers(chat.calls[0][1]) == [f"[{n}] {r}:" for n, r in enumerate(
        ["user", "assistant", "assistant", "system", "assistant", "assistant", "user",
         "assistant"], start=1)]
    [parent], [sub] = by_parent(seeded_repo)
    assert [(s.start, s.end, s.agent_model) for s in parent.active()] == [
        (0, 6, "claude-sonnet-4-5-20250929"), (6, 8, "claude-opus-4-1-20250805")]
    assert sub.parent_session == parent.session_key
    assert sub.parent_tool_id == "toolu_task1"
    assert parent.subagents == {"toolu_task1": sub.session_key}
    [segment] = sub.active()  # a sub-agent did one task: one segment, no LLM call
    assert (segment.start, segment.end, segment.agent_model) == (
        0, 3, "claude-haiku-4-5-20251001")
    assert segment.topic.startswith("Find every call of legacy_price()")
    grep_text = json.dumps([m.model_dump() for m in
                            SessionStore(seeded_repo).segment_messages(segment.fingerprint)])
    assert "shop/invoice.py:88" in grep_text and "Grep" in grep_text
    assert {f.parent_session for f in report.files} == {None, parent.session_key}


def test_naming_a_session_reads_the_subagent_files_beside_it(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    session = project / SESSION2.name
    chat, structured = llm(Step("segment", reply((1, "vat on books"))))
    report = asyncio.run(ingest(seeded_repo, [session], llm=structured))
    chat.assert_done()
    # the compaction agent's file is not read
    assert [Path(f.file).name for f in report.files] == [session.name, "agent-a7f3e21.jsonl"]
    [parent], [sub] = by_parent(seeded_repo)
    assert parent.subagents == {"toolu_task2": sub.session_key}
    assert sub.parent_session == parent.session_key and sub.parent_tool_id is None
    assert [(s.start, s.end) for s in sub.active()] == [(0, 3)]
    again = asyncio.run(ingest(seeded_repo, [session], llm=llm()[1]))
    assert again.commit is None
    assert [f.outcome for f in again.files] == ["unchanged", "unchanged"]
