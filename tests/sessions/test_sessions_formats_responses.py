"""The OpenAI Responses API item format and the Codex CLI rollout envelope: parsing,
detection, reasoning summaries kept (never the encrypted reasoning), the agent model."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, git
from test_sessions_ingest import llm, reply

from expgit.core.domain import Message, TextPart, ToolPart
from expgit.llm.scripted import Step
from expgit.sessions.formats.parse import detect_format, parse_session_file, parse_session_lines
from expgit.sessions.ingest.command import ingest
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
CODEX = FIXTURES / "codex_rollout.jsonl"
RESPONSES = FIXTURES / "responses_items.jsonl"
ENCRYPTED = "gAAAAABpZENCRYPTEDREASONINGBLOBxyz0123456789"


def tools(message: Message) -> list[ToolPart]:
    return [p for p in message.parts if isinstance(p, ToolPart)]


def test_codex_rollout_reads_response_items_once_and_skips_the_rest() -> None:
    session = parse_session_file(CODEX)
    assert session.format == "codex"
    assert session.session_id == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert session.invalid_lines == [] and session.unrecognized is None
    # every event_msg repeats a response_item: skipped, counted, never a message
    assert session.skipped_rows == {"codex:event_msg": 5, "codex:ghost_record": 1}
    assert [m.role for m in session.messages] == [
        "system", "system", "user", "assistant", "assistant", "assistant", "user",
        "assistant", "assistant"]
    assert session.messages[0].plain_text.startswith("<user_instructions>")  # context
    assert session.messages[2].plain_text.startswith("The balance report rounds cents")
    assert session.message_lines == [2, 3, 4, 8, 12, 15, 17, 20, 22]
    assert sum(m.plain_text.count("Now add a changelog") for m in session.messages) == 1


def test_codex_calls_pair_with_outputs_and_reasoning_summary_is_kept() -> None:
    session = parse_session_file(CODEX)
    [shell] = tools(session.messages[3])
    assert shell.tool_name == "shell" and shell.tool_id == "call_shell_1"
    assert shell.tool_input["command"] == ["bash", "-lc", "sed -n 1,40p ledger/money.py"]
    assert shell.tool_output == "def round_cents(x):\n    return int(x * 100) / 100\n"
    assert shell.tool_status == "completed"
    assert session.messages[3].reasoning == (
        "**Reading the rounding helper**\n\nI will look at round_cents first.")
    [patch] = tools(session.messages[4])
    assert patch.tool_name == "apply_patch"
    assert patch.tool_input["input"].startswith("*** Begin Patch")
    assert patch.tool_output == "Success. Updated the following files:\nM ledger/money.py"
    dumped = json.dumps([m.model_dump(mode="json") for m in session.messages])
    assert ENCRYPTED not in dumped
    # messages without reasoning serialise as before: no "reasoning" key
    assert "reasoning" not in session.messages[2].model_dump(mode="json")


def test_turn_context_gives_each_assistant_message_its_model() -> None:
    session = parse_session_file(CODEX)
    assert session.message_models == [
        None, None, None, "gpt-5-codex", "gpt-5-codex", "gpt-5-codex", None,
        "gpt-5.1-codex-mini", "gpt-5.1-codex-mini"]


def test_responses_items_with_outputs_errors_search_and_unknown_items() -> None:
    session = parse_session_file(RESPONSES)
    assert session.format == "responses" and session.invalid_lines == []
    assert session.skipped_rows == {"responses:mcp_list_tools": 1}
    assert [m.role for m in session.messages] == [
        "system", "user", "assistant", "assistant", "user", "assistant", "assistant"]
    assert session.messages[1].plain_text == (
        "Is the 07:05 train to Lyon on time?\n[image omitted]")
    [board] = tools(session.messages[2])
    assert board.tool_input == {"station": "Paris Gare de Lyon", "time": "07:05"}
    assert board.tool_output == '[{"train": "TGV 6601", "delay_min": 12}]'
    assert session.messages[2].reasoning == "Look up the departure board."
    search, text = session.messages[3].parts
    assert isinstance(search, ToolPart) and search.tool_name == "web_search"
    assert isinstance(text, TextPart) and text.text.startswith("TGV 6601 leaves")
    [seat] = tools(session.messages[5])
    assert (seat.tool_output, seat.tool_status) == ("coach 7 is full", "error")
    assert "ENCRYPTED" not in json.dumps([m.model_dump() for m in session.messages])


def test_a_shell_output_with_a_failing_exit_code_is_an_error() -> None:
    session = parse_session_lines([json.dumps(r) for r in (
        {"type": "message", "role": "user", "content": "run it"},
        {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c",
         "output": json.dumps({"output": "boom", "metadata": {"exit_code": 2}})},
    )])
    [call] = tools(session.messages[1])
    assert (call.tool_output, call.tool_status) == ("boom", "error")


@pytest.mark.parametrize(("row", "expected"), [
    ({"type": "response_item", "payload": {"type": "message", "role": "user",
                                           "content": []}}, "codex"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, "responses"),
    ({"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": "hi"}]}, "responses"),
    ({"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, "openai"),
])
def test_detect_responses_and_codex(row: dict[str, object], expected: str) -> None:
    assert detect_format([row]) == expected


def test_a_reasoning_only_response_adds_no_message_and_is_counted() -> None:
    session = parse_session_lines([json.dumps(r) for r in (
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}],
         "encrypted_content": "zzz"},
    )], "responses")
    assert [m.role for m in session.messages] == ["user"]
    assert session.reasoning_dropped == 1


def test_ingested_codex_segments_record_their_agent_model_and_no_encrypted_reasoning(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    chat, structured = llm(Step("segment", reply((1, "round cents"), (7, "changelog"))))
    report = asyncio.run(ingest(seeded_repo, [CODEX], llm=structured, agent="codex"))
    chat.assert_done()
    assert report.files[0].format == "codex" and report.commit is not None
    [manifest] = SessionStore(seeded_repo).manifests()
    assert [(s.start, s.end, s.agent_model) for s in manifest.active()] == [
        (0, 6, "gpt-5-codex"), (6, 9, "gpt-5.1-codex-mini")]
    assert [(m.start, m.model) for m in manifest.models] == [
        (3, "gpt-5-codex"), (7, "gpt-5.1-codex-mini")]
    repo_dir = tmp_path / "repo"
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"],
                             cwd=repo_dir, capture_output=True, check=True).stdout
    assert ENCRYPTED.encode() not in objects
    assert b"I will look at round_cents first." in objects  # the summary is kept
    assert "0199a1b2-c3d4" not in git(repo_dir, "log", "-p", "--all")  # id hashed
