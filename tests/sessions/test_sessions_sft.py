"""SFT examples: messages -> OpenAI chat fine-tuning example -> validated -> messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from expgit.core.domain import Message, TextPart, ToolPart
from expgit.errors import InvalidInputError
from expgit.sessions.formats.parse import parse_session_file
from expgit.sessions.sft import (
    from_sft_example,
    to_sft_example,
    validate_sft_example,
    write_sft_jsonl,
)

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


def without_error_status(messages: list[Message]) -> list[Message]:
    """The messages as the format can carry them (no ``error`` tool status)."""
    out = []
    for message in messages:
        parts = [p.model_copy(update={"tool_status": "completed"})
                 if isinstance(p, ToolPart) and p.tool_status == "error" else p
                 for p in message.parts]
        out.append(Message(role=message.role, parts=parts))
    return out


@pytest.mark.parametrize("name", ["openai_tools.jsonl", "anthropic_thinking.jsonl",
                                  "claude_code.jsonl", "plain_two_tasks.jsonl"])
def test_fixture_sessions_round_trip(name: str) -> None:
    messages = parse_session_file(FIXTURES / name).messages
    example = to_sft_example(messages)
    validate_sft_example(example)
    json.loads(json.dumps(example))  # plain JSON data
    assert from_sft_example(example) == without_error_status(messages)


def test_example_shape_with_tool_calls() -> None:
    messages = parse_session_file(FIXTURES / "openai_tools.jsonl").messages[:5]
    example = to_sft_example(messages)
    assert example["messages"][2] == {
        "role": "assistant", "tool_calls": [{
            "id": "call_schema_1", "type": "function",
            "function": {"name": "describe_table", "arguments": '{"table": "orders"}'}}]}
    assert example["messages"][3] == {
        "role": "tool", "tool_call_id": "call_schema_1",
        "content": "order_id INTEGER, status TEXT, shipped_at TIMESTAMP, total NUMERIC"}
    roles = [m["role"] for m in example["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool",
                     "assistant"]
    assert set(example) == {"messages"}


def test_unanswered_calls_are_dropped_mid_example_and_kept_at_the_end() -> None:
    call = ToolPart(tool_id="c9", tool_name="search", tool_input={"q": "x"},
                    tool_status="pending")
    middle = [Message.text("user", "find x"),
              Message(role="assistant", parts=[TextPart(text="searching"), call]),
              Message.text("user", "never mind")]
    assert to_sft_example(middle)["messages"][1] == {"role": "assistant",
                                                     "content": "searching"}
    end = [Message.text("user", "find x"), Message(role="assistant", parts=[call])]
    example = to_sft_example(end)
    assert example["messages"][1]["tool_calls"][0]["id"] == "c9"
    assert from_sft_example(example) == end


def test_missing_ids_get_generated_ones_and_orphans_are_answered_only_if_open() -> None:
    messages = [
        Message.text("user", "go"),
        Message(role="assistant", parts=[ToolPart(tool_id="", tool_name="ls",
                                                  tool_output="a b")]),
        Message(role="tool", parts=[ToolPart(tool_id="nobody", tool_name="x",
                                             tool_output="orphan")]),
        Message.text("assistant", "done"),
    ]
    example = to_sft_example(messages)
    call_id = example["messages"][1]["tool_calls"][0]["id"]
    assert call_id and example["messages"][2] == {"role": "tool", "tool_call_id": call_id,
                                                  "content": "a b"}
    assert "orphan" not in json.dumps(example)


def test_a_segment_without_an_assistant_reply_is_not_an_example() -> None:
    with pytest.raises(InvalidInputError, match="at least one assistant message"):
        to_sft_example([Message.text("user", "hello?")])


@pytest.mark.parametrize(("example", "problem"), [
    ({"messages": []}, "at least 1"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "at least one assistant"),
    ({"messages": [{"role": "assistant"}]}, "content or tool_calls"),
    ({"messages": [{"role": "assistant", "content": "x"}], "topic": "t"}, "topic"),
    ({"messages": [{"role": "assistant", "content": "x"},
                   {"role": "tool", "tool_call_id": "a", "content": "r"}]}, "answers no"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}}]}]},
     "not JSON"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                   {"role": "user", "content": "and?"}]}, "not answered"),
    ({"messages": [{"role": "narrator", "content": "x"}]}, "narrator"),
])
def test_validation_rejects(example: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid SFT example") as info:
        validate_sft_example(example)
    assert problem in info.value.message


def test_write_validates_everything_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    out.write_text("previous export\n")
    good = to_sft_example(parse_session_file(FIXTURES / "plain_two_tasks.jsonl").messages)
    bad = {"messages": [{"role": "user", "content": "no reply"}]}
    with pytest.raises(InvalidInputError, match="example 2") as info:
        write_sft_jsonl([good, bad], out)
    assert info.value.hint == "nothing was written"
    assert out.read_text() == "previous export\n"
    assert write_sft_jsonl([good, good], out) == 2
    written = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in written] == [good, good]
    assert "如何用 Python" in written[0]  # UTF-8 kept, not escaped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]  # no temp file
    assert write_sft_jsonl([], out) == 0 and out.read_text() == ""
