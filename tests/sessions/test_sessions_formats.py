"""Session parsing: the three row formats, auto-detection, bad lines, fingerprints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from expgit.core.domain import Message, TextPart, ToolPart
from expgit.errors import InvalidInputError, NotFoundError
from expgit.sessions.fingerprint import canonical_json, fingerprint, hash_id
from expgit.sessions.formats.parse import detect_format, parse_session_file, parse_session_lines

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


def tools(message: Message) -> list[ToolPart]:
    return [p for p in message.parts if isinstance(p, ToolPart)]


def lines(*rows: object) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in rows]


# ------------------------------------------------------------------------------ OpenAI
def test_openai_session_with_tool_calls_metadata_blank_and_invalid_lines() -> None:
    session = parse_session_file(FIXTURES / "openai_tools.jsonl")
    assert session.format == "openai"
    assert session.session_id == "sess-7f3a9c"
    assert (session.line_count, session.blank_lines, session.skipped_metadata) == (16, 1, 1)
    # a cut-off JSON line, a JSON array, an unknown role
    assert session.invalid_lines == [12, 14, 15]
    assert session.reasoning_dropped == 1
    assert [m.role for m in session.messages] == [
        "system", "user", "assistant", "assistant", "assistant", "user", "assistant", "user"]
    assert session.message_lines == [2, 3, 4, 6, 9, 11, 13, 16]

    schema_call = session.messages[2]
    assert schema_call.parts == [ToolPart(
        tool_id="call_schema_1", tool_name="describe_table", tool_input={"table": "orders"},
        tool_output="order_id INTEGER, status TEXT, shipped_at TIMESTAMP, total NUMERIC",
        tool_status="completed")]
    counting = session.messages[3]
    assert counting.plain_text == "Running the count now."
    sql = tools(counting)
    assert [p.tool_id for p in sql] == ["call_sql_2", "call_sql_3"]
    assert sql[0].tool_input["query"].startswith("SELECT count(*) FROM orders WHERE status")
    assert sql[0].tool_output == '[{"count": 1842}]'
    assert sql[1].tool_output == '[{"count": 1907}]'  # content given as a list of parts
    assert all(m.role != "tool" for m in session.messages)  # results merged into calls
    assert session.messages[5].plain_text.endswith("settings.\n[image_url omitted]")


def test_orphan_result_unanswered_call_and_non_object_arguments() -> None:
    session = parse_session_lines(lines(
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "not json"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "zzz", "name": "h", "content": "late result"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "a", "content": "again"},
    ))
    call_a, call_b = tools(session.messages[1])
    assert call_a.tool_input == {"arguments": "not json"} and call_a.tool_output == "A"
    assert call_b.tool_input == {} and call_b.tool_status == "pending"
    assert call_b.tool_output is None
    orphans = session.messages[2:]
    assert [m.role for m in orphans] == ["tool", "tool"]
    assert tools(orphans[0])[0].tool_name == "h"
    assert tools(orphans[1])[0].tool_output == "again"  # a second result: its own message
    assert session.invalid_lines == []


def test_developer_role_is_system_and_reasoning_only_message_is_not_kept() -> None:
    session = parse_session_lines(lines(
        {"role": "developer", "content": "be brief"},
        {"role": "assistant", "content": None, "reasoning_content": "thinking..."},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ))
    assert [m.role for m in session.messages] == ["system", "user"]
    assert session.skipped_rows == {"empty": 1}
    assert session.reasoning_dropped == 1


# --------------------------------------------------------------------------- Anthropic
def test_anthropic_session_with_thinking_tool_use_and_errors() -> None:
    session = parse_session_file(FIXTURES / "anthropic_thinking.jsonl")
    assert session.format == "anthropic"
    assert session.session_id == "anthropic-run-0042"
    assert session.reasoning_dropped == 3  # two thinking blocks, one redacted_thinking
    assert session.skipped_rows == {"empty": 1}  # the thinking-only reply
    assert [m.role for m in session.messages] == [
        "user", "assistant", "assistant", "assistant", "user", "assistant", "user",
        "assistant"]
    read = session.messages[1]
    assert read.plain_text == "I'll look at the backup log."
    assert tools(read)[0].tool_input == {"path": "/var/log/backup.log", "tail": 50}
    assert "password authentication failed" in (tools(read)[0].tool_output or "")
    denied = tools(session.messages[2])[0]
    assert (denied.tool_status, denied.tool_output) == (
        "error", "grep: /etc/backup/env: Permission denied")
    assert tools(session.messages[3])[0].tool_output == "3:PGPASSWORD=OldBackupPass2023"
    assert session.messages[4].plain_text == "(I approved the sudo prompt.)"
    assert "thinking" not in json.dumps([m.model_dump() for m in session.messages])


# ------------------------------------------------------------------------- Claude Code
def test_claude_code_transcript_with_bash_read_edit_and_skipped_lines() -> None:
    session = parse_session_file(FIXTURES / "claude_code.jsonl")
    assert session.format == "claude_code"
    assert session.session_id == "9b2e4c1a-5d6f-4e7a-8b9c-0d1e2f3a4b5c"
    assert session.skipped_rows == {
        "claude_code:file-history-snapshot": 1, "claude_code:summary": 1,
        "claude_code:system": 1, "empty": 1, "meta": 1, "sidechain": 1}
    assert session.invalid_lines == [] and session.reasoning_dropped == 1
    assert [m.role for m in session.messages] == [
        "user", "assistant", "assistant", "assistant", "assistant", "assistant", "user"]
    first = session.messages[1]  # three streamed lines of msg_01X, merged
    assert first.plain_text == "Let me run the failing test."
    bash = tools(first)[0]
    assert bash.tool_name == "Bash" and bash.tool_status == "error"
    assert "day is out of range" in (bash.tool_output or "")
    names = [p.tool_name for m in session.messages for p in tools(m)]
    assert names == ["Bash", "Read", "Edit", "Bash"]
    edit = tools(session.messages[3])[0]
    assert edit.tool_input["new_string"] == "    return date.fromisoformat(text)"
    assert edit.tool_output == "The file /home/dev/projects/webapp/app/dates.py has been updated."
    assert session.messages[-1].plain_text == "thanks!"
    assert "sub-agent" not in json.dumps([m.model_dump() for m in session.messages])


# ----------------------------------------------------------------- detection, forcing
def test_plain_rows_read_the_same_as_openai_or_anthropic() -> None:
    path = FIXTURES / "plain_two_tasks.jsonl"
    auto = parse_session_file(path)
    assert auto.format == "openai" and len(auto.messages) == 4
    assert auto.messages[0] == Message.text("user", "如何用 Python 读取 CSV？")  # noqa: RUF001
    assert parse_session_file(path, "anthropic").messages == auto.messages


@pytest.mark.parametrize(("row", "expected"), [
    ({"role": "user", "content": "hi"}, "openai"),
    ({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x",
                                        "input": {}}]}, "anthropic"),
    ({"role": "assistant", "content": "x", "tool_calls": []}, "openai"),
    ({"type": "summary", "summary": "s"}, "claude_code"),
    ({"type": "user", "message": {"role": "user", "content": "hi"}}, "claude_code"),
])
def test_detect_format(row: dict[str, object], expected: str) -> None:
    assert detect_format([row]) == expected


def test_detection_skips_ambiguous_rows_until_a_decisive_one() -> None:
    rows = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"},
                                              {"type": "text", "text": "hello"}]}]
    session = parse_session_lines(lines(*rows))
    assert session.format == "anthropic" and session.reasoning_dropped == 1


def test_forced_format_reports_rows_of_another_shape_as_invalid() -> None:
    session = parse_session_file(FIXTURES / "claude_code.jsonl", "openai")
    assert session.messages == [] and len(session.invalid_lines) == 18


def test_undecodable_line_is_invalid_and_missing_file_is_not_found(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"role": "user", "content": "ok"}\n\xff\xfe garbage\n\n')
    session = parse_session_file(path)
    assert session.invalid_lines == [2] and session.blank_lines == 1
    assert session.messages == [Message.text("user", "ok")]
    with pytest.raises(NotFoundError, match="does not exist"):
        parse_session_file(tmp_path / "missing.jsonl")
    with pytest.raises(InvalidInputError, match="unknown session format"):
        parse_session_lines([], "gemini")  # type: ignore[arg-type]


# ------------------------------------------------------------------------ fingerprints
def test_fingerprint_is_stable_and_covers_texts_and_tool_calls() -> None:
    messages = parse_session_file(FIXTURES / "openai_tools.jsonl").messages
    again = parse_session_file(FIXTURES / "openai_tools.jsonl").messages
    fp = fingerprint(messages)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fingerprint(again) == fp
    changed_output = [m.model_copy(deep=True) for m in messages]
    part = changed_output[2].parts[0]
    assert isinstance(part, ToolPart)
    changed_output[2].parts[0] = part.model_copy(update={"tool_output": "other"})
    assert fingerprint(changed_output) != fp
    assert fingerprint(messages[:3]) != fp
    assert fingerprint([Message(role="user", parts=[TextPart(text="a")])]) != \
        fingerprint([Message(role="assistant", parts=[TextPart(text="a")])])


def test_canonical_json_and_hash_id() -> None:
    assert canonical_json({"b": 1, "a": [Message.text("user", "é")]}) == \
        '{"a":[{"parts":[{"text":"é","type":"text"}],"role":"user"}],"b":1}'
    assert canonical_json({"a": 1, "b": 2}) == canonical_json({"b": 2, "a": 1})
    assert hash_id("/home/alice/sessions/a.jsonl") == hash_id("/home/alice/sessions/a.jsonl")
    assert len(hash_id("x")) == 16 and hash_id("x") != hash_id("y")
    assert hash_id("x") == "2d711642b726b044"  # sha256("x")[:16]
