"""Redaction: a corpus of secrets where none survives, ordinary text left unchanged."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import ROOT

from expgit.core.domain import Message, TextPart, ToolPart
from expgit.core.redaction.messages import redact_messages
from expgit.core.redaction.text import Redaction, cap_text, redact_text
from expgit.sessions.formats.parse import parse_session_file

CORPUS = ROOT / "tests" / "fixtures" / "sessions" / "secrets"
SECRETS = [json.loads(line) for line in (CORPUS / "secrets.jsonl").read_text().splitlines()]
ORDINARY = (CORPUS / "ordinary.txt").read_text().splitlines()


@pytest.mark.parametrize("case", SECRETS, ids=lambda c: f"{c['kind']}:{c['text'][:30]}")
def test_no_secret_survives(case: dict[str, object]) -> None:
    text = str(case["text"])
    redacted, counts = redact_text(text)
    for secret in case["secrets"]:  # type: ignore[attr-defined]
        assert secret not in redacted
    assert f"[REDACTED:{case['kind']}]" in redacted
    assert counts[str(case["kind"])] >= 1
    assert redacted.count("[REDACTED:") == sum(counts.values())


@pytest.mark.parametrize("case", SECRETS, ids=lambda c: f"{c['kind']}:{c['text'][:30]}")
def test_redaction_is_idempotent(case: dict[str, object]) -> None:
    once, _ = redact_text(str(case["text"]))
    twice, counts = redact_text(once)
    assert twice == once and not counts


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_text_is_unchanged(line: str) -> None:
    assert redact_text(line) == (line, Counter())


def test_context_around_a_secret_is_kept() -> None:
    text = ('curl -u admin:x https://api:Zq9pass77@api.example.com/v1 -H "Authorization: '
            'Bearer abc123def456ghi789" # call me: +1 415 555 2671, done')
    redacted, counts = redact_text(text)
    assert redacted == ('curl -u admin:x https://api:[REDACTED:password]@api.example.com/v1 '
                        '-H "Authorization: Bearer [REDACTED:bearer_token]" # call me: '
                        '[REDACTED:phone], done')
    assert counts == Counter({"password": 1, "bearer_token": 1, "phone": 1})


def test_card_numbers_need_a_valid_luhn_checksum_and_brand() -> None:
    assert redact_text("4111 1111 1111 1112")[0] == "4111 1111 1111 1112"  # bad checksum
    assert redact_text("1234567812345670")[0] == "1234567812345670"  # Luhn ok, no brand
    assert redact_text("4111-1111-1111-1111")[0] == "[REDACTED:card_number]"


def test_redact_messages_covers_texts_tool_inputs_recursively_and_outputs() -> None:
    messages = [
        Message(role="user", parts=[TextPart(text="my mail is bob@example.com")]),
        Message(role="assistant", parts=[ToolPart(
            tool_id="t1", tool_name="http", tool_status="error",
            tool_input={"url": "https://bob:pw12345@internal.example/api",
                        "headers": {"X-Api-Key": "k3y-value-123", "Accept": "json"},
                        "env": [{"DB_PASSWORD": "hunter22"}, "sk-abcdefghijklmnopqrstuvwx"],
                        "retries": 3, "password": "None"},
            tool_output="token=abcd1234efgh5678 ok")]),
    ]
    redacted, counts = redact_messages(messages)
    part = redacted[1].parts[0]
    assert isinstance(part, ToolPart)
    assert part.tool_input == {
        "url": "https://bob:[REDACTED:password]@internal.example/api",
        "headers": {"X-Api-Key": "[REDACTED:secret]", "Accept": "json"},
        "env": [{"DB_PASSWORD": "[REDACTED:secret]"}, "[REDACTED:api_key]"],
        "retries": 3, "password": "None"}
    assert part.tool_output == "token=[REDACTED:secret] ok"
    assert (part.tool_id, part.tool_name, part.tool_status) == ("t1", "http", "error")
    assert redacted[0].plain_text == "my mail is [REDACTED:email]"
    assert counts == Counter({"email": 1, "password": 1, "secret": 3, "api_key": 1})
    assert messages[0].plain_text == "my mail is bob@example.com"  # input untouched
    again, more = redact_messages(redacted)
    assert again == redacted and not more


def test_fixture_sessions_lose_their_secrets() -> None:
    messages = parse_session_file(CORPUS.parent / "anthropic_thinking.jsonl").messages
    redacted, counts = redact_messages(messages)
    dumped = json.dumps([m.model_dump() for m in redacted])
    assert "OldBackupPass2023" not in dumped and "ops@example.org" not in dumped
    assert counts == Counter({"secret": 1, "email": 1})


def test_redaction_counts_model() -> None:
    one = Redaction.of(Counter({"email": 2, "phone": 0}))
    assert one.counts == {"email": 2} and one.total == 2
    assert one.plus(Redaction(counts={"email": 1, "card_number": 1})).counts == {
        "card_number": 1, "email": 3}


def test_home_folders_and_their_user_names_are_redacted() -> None:
    text = ("Read /home/alice/project/main.py, /Users/alice/notes and "
            "C:\\Users\\bob\\app\\config.json; alice and bob agreed (not alicea).")
    redacted, counts = redact_text(text)
    assert redacted == ("Read ~/project/main.py, ~/notes and ~\\app\\config.json; "
                        "[REDACTED:user_name] and [REDACTED:user_name] agreed (not alicea).")
    assert counts == Counter({"home_path": 3, "user_name": 2})
    assert redact_text(redacted) == (redacted, Counter())


def test_user_names_come_from_the_whole_transcript() -> None:
    messages = [Message.text("user", "I am alice, fix it"),
                Message(role="assistant", parts=[ToolPart(
                    tool_id="t", tool_name="Bash", tool_input={"cwd": "/home/alice/repo"},
                    tool_output="x" * 100)])]
    redacted, counts = redact_messages(messages, max_chars=30)
    assert redacted[0].plain_text == "I am [REDACTED:user_name], fix it"
    part = redacted[1].parts[0]
    assert isinstance(part, ToolPart) and part.tool_input == {"cwd": "~/repo"}
    assert part.tool_output is not None and "[... 70 characters removed ...]" in part.tool_output
    assert counts["cut_messages"] == 1 and counts["home_path"] == 1


def test_cap_keeps_head_and_tail() -> None:
    text, removed = cap_text("a" * 10 + "b" * 4_999_980 + "c" * 10, 30)
    assert removed == 4_999_970
    assert text.startswith("a" * 10) and text.endswith("c" * 10)
    assert "[... 4,999,970 characters removed ...]" in text
    assert cap_text("short", 30) == ("short", 0)
    assert cap_text(text, 30) == (text, 0)  # cut once, never again
