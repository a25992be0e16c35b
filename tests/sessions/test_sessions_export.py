"""``expgit export-sft``: labelled segments on the sessions branch -> validated JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, git
from json_shapes import assert_shape

from expgit.core.domain import Message
from expgit.core.redaction.messages import redact_messages
from expgit.sessions.export import export_sft
from expgit.sessions.fingerprint import fingerprint, hash_id
from expgit.sessions.formats.parse import parse_session_file
from expgit.sessions.manifest import SegmentRecord, SessionManifest
from expgit.sessions.metrics import METRIC_NAMES, MetricScore, SegmentMetrics
from expgit.sessions.sft import from_sft_example
from expgit.sessions.store import SessionChanges, SessionStore
from expgit.store.repository import ExperienceRepository

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


def metrics(score: float, task_type: str) -> SegmentMetrics:
    return SegmentMetrics(overall_score=score, task_type=task_type,
                          metrics={n: MetricScore(score=score, reason="r") for n in METRIC_NAMES})


def segment(messages: list[Message], start: int, score: float | None, task_type: str = "code",
            status: str = "active") -> SegmentRecord:
    return SegmentRecord(
        start=start, end=start + len(messages), fingerprint=fingerprint(messages),
        topic="t", status=status,  # type: ignore[arg-type]
        metrics=None if score is None else metrics(score, task_type),
        sft_eligible=score is not None and score >= 0.8)


def manifest(key: str, segments: list[SegmentRecord]) -> SessionManifest:
    return SessionManifest(session_key=hash_id(key), source_hash=hash_id(key),
                           format="openai", message_count=max(s.end for s in segments),
                           content_hash="0" * 16, segments=segments)


@pytest.fixture
def hub(seeded_repo: ExperienceRepository) -> dict[str, list[Message]]:
    """Two sessions: six kinds of segments, one fingerprint in both sessions."""
    code = parse_session_file(FIXTURES / "claude_code.jsonl").messages
    plain = parse_session_file(FIXTURES / "plain_two_tasks.jsonl").messages
    openai = parse_session_file(FIXTURES / "openai_tools.jsonl").messages
    # stored unredacted on purpose: the export must redact on its own
    leaky = [Message.text("user", "mail jo@example.com the compose file"), plain[3]]
    only_user = [Message.text("user", "hello? anyone?")]
    segs = {"code": code, "writing": leaky, "csv": plain[:2], "sql": openai[:5],
            "user_only": only_user, "old": openai[5:]}
    changes = SessionChanges(segments={fingerprint(m): m for m in segs.values()})
    changes.put(manifest("a", [
        segment(code, 0, 0.9, "debugging"), segment(leaky, 7, 0.85, "writing"),
        segment(plain[:2], 9, 0.75), segment(only_user, 11, 0.95),
        segment(openai[5:], 12, 0.99, status="superseded")]), None)
    changes.put(manifest("b", [segment(code, 0, 0.9, "debugging"),
                               segment(openai[:5], 7, None)]), None)
    SessionStore(seeded_repo).save(changes, "sessions: test fixture")
    return segs


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_default_export_takes_sft_eligible_segments_best_first(
        seeded_repo: ExperienceRepository, hub: dict[str, list[Message]],
        tmp_path: Path) -> None:
    refs = git(tmp_path / "repo", "for-each-ref")
    out = tmp_path / "sft.jsonl"
    report = export_sft(seeded_repo, out=out)
    assert (report.written, report.candidates) == (2, 5)
    assert report.skipped == {"below_threshold": 1, "duplicate": 1, "not_a_chat_example": 1}
    assert report.redactions.counts == {"email": 1, "home_path": 3}  # stored unredacted
    lines = read(out)
    assert from_sft_example(lines[0]) == [
        m.model_copy(update={"parts": [p.model_copy(update={"tool_status": "completed"})
                                       if getattr(p, "tool_status", "") == "error" else p
                                       for p in m.parts]}) for m in redact_messages(hub["code"])[0]]
    assert lines[1]["messages"][0] == {"role": "user",
                                       "content": "mail [REDACTED:email] the compose file"}
    assert "jo@example.com" not in out.read_text()
    assert git(tmp_path / "repo", "for-each-ref") == refs  # an export commits nothing


def test_filters_min_score_task_type_and_limit(seeded_repo: ExperienceRepository,
                                              hub: dict[str, list[Message]],
                                              tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    low = export_sft(seeded_repo, min_score=0.7, out=out)
    assert low.written == 3 and low.threshold == 0.7
    assert read(out)[2]["messages"][0]["content"] == "如何用 Python 读取 CSV？"  # noqa: RUF001
    typed = export_sft(seeded_repo, task_type="Debugging", out=out)
    assert typed.written == 1 and typed.skipped["other_task_type"] == 3
    limited = export_sft(seeded_repo, limit=1, out=out)
    assert limited.written == 1 and limited.skipped["over_limit"] == 1
    assert len(read(out)) == 1


def test_cli_export_sft(seeded_repo: ExperienceRepository, hub: dict[str, list[Message]],
                        tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "train.jsonl"
    result = run_cli("-C", tmp_path / "repo", "export-sft", "-o", out, "--min-score", "0.8",
                     "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert_shape("export-sft", data)
    assert data["written"] == 2 and data["out"] == str(out)
    assert len(read(out)) == 2
    human = run_cli("-C", tmp_path / "repo", "export-sft", "-o", out, "--task-type",
                    "writing")
    assert human.code == 0
    assert f"wrote 1 example(s) to {out}" in human.out
    assert "redacted 1: email 1" in human.out
    bad = run_cli("-C", tmp_path / "repo", "export-sft", "-o", out, "--min-score", "1.5")
    assert bad.code == 2 and "1.5" in bad.err
    assert len(read(out)) == 1  # unchanged by the refused run


def test_export_with_no_sessions_writes_an_empty_file(seeded_repo: ExperienceRepository,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "empty.jsonl"
    report = export_sft(seeded_repo, out=out)
    assert report.written == 0 and report.candidates == 0 and out.read_text() == ""


def test_segments_a_pending_resegmentation_may_replace_are_not_exported(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    code = parse_session_file(FIXTURES / "claude_code.jsonl").messages
    plain = parse_session_file(FIXTURES / "plain_two_tasks.jsonl").messages
    waiting = manifest("w", [segment(code, 0, 0.9, "debugging"), segment(plain, 7, 0.95)])
    waiting.resume_from = 7  # messages from 7 on wait for the model: the second may change
    changes = SessionChanges(segments={fingerprint(m): m for m in (code, plain)})
    changes.put(waiting, None)
    SessionStore(seeded_repo).save(changes, "sessions: pending fixture")
    out = tmp_path / "sft.jsonl"
    report = export_sft(seeded_repo, out=out)
    assert (report.written, report.candidates) == (1, 2)
    assert report.skipped == {"pending_resegmentation": 1}
    assert from_sft_example(read(out)[0])[0] == code[0]


def test_an_example_over_the_token_limit_is_left_out(
        seeded_repo: ExperienceRepository, hub: dict[str, list[Message]],
        tmp_path: Path) -> None:
    path = tmp_path / "repo"
    settings = (path / "expgit.toml").read_text() + "\n[sessions]\nsft_max_tokens = 50\n"
    (path / "expgit.toml").write_text(settings)
    git(path, "commit", "-qam", "tiny SFT examples")
    report = export_sft(ExperienceRepository.open(path), out=tmp_path / "sft.jsonl")
    assert report.written == 0 and report.skipped["over_token_limit"] == 2
