"""Feedback events in session files: parsed beside the messages (never as messages),
redacted, part of the fingerprints, and the label of their segment's training rollout
(no score call); a malformed event stops the ingest before anything is stored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from scripted_pipeline import lesson_bodies, merge_of, reflect_for
from test_sessions_run import GOLD, PETS, score_reply, write

from expgit.errors import InvalidInputError
from expgit.llm.factory import LLMRuntime
from expgit.llm.port import ChatMessages
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.sessions.fingerprint import fingerprint, hash_id
from expgit.sessions.formats.parse import parse_session_file
from expgit.sessions.ingest.command import ingest
from expgit.sessions.manifest import SegmentRecord
from expgit.sessions.run import run
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository

STAMPED = [{**GOLD[0], "timestamp": "2026-05-01T10:00:00Z"},
           {**GOLD[1], "response_id": "resp-1", "timestamp": "2026-05-01T10:00:05Z"}]
# a chat service's /feedback event as it logged it (the seed-004 field names)
THUMB_DOWN = {"_type": "feedback", "response_id": "resp-1", "session_id": "chat-9",
              "feedback_type": "thumb_down", "feedback_text": "wrong, ask jane@example.com",
              "feedback_delay_sec": 25.0, "timestamp": "2026-05-01T10:00:30Z"}


def segments(repo: ExperienceRepository) -> list[SegmentRecord]:
    return [s for m in SessionStore(repo).manifests() for s in m.segments]


def test_feedback_rows_are_signals_not_messages(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", [*STAMPED, THUMB_DOWN,
                                        {"_type": "feedback", "kind": "thumb_up"}])
    parsed = parse_session_file(path)
    assert [m.role for m in parsed.messages] == ["user", "assistant"]
    assert parsed.session_id is None  # the event's session_id is not the session's
    assert parsed.signals is not None
    rid = hash_id("response:resp-1")
    assert [(s.index, s.response_id) for s in parsed.signals.message_stamps] == [
        (0, None), (1, rid)]
    down, up = parsed.signals.feedback_events
    assert (down.kind, down.text, down.response_id) == (
        "thumb_down", "wrong, ask jane@example.com", rid)
    assert up.response_id == rid  # no response_id: the response before the row
    plain = parse_session_file(write(tmp_path / "plain.jsonl", STAMPED))
    assert plain.signals is None  # no feedback rows: no timestamps read either


@pytest.mark.parametrize(("row", "says"), [
    ({"_type": "feedback", "response_id": "resp-1", "feedback_type": "shrug"},
     "line 3: feedback event: kind"),
    ({"_type": "feedback", "response_id": "resp-1", "kind": "rating"}, "needs a rating"),
    ({"_type": "feedback", "response_id": "resp-9", "kind": "thumb_up"},
     "line 3: feedback on response 'resp-9', which no assistant row"),
    ({"_type": "feedback", "response_id": "resp-1", "kind": "thumb_up", "user": "x"},
     "line 3: feedback event: user"),
])
def test_a_malformed_event_stops_the_ingest(seeded_repo: ExperienceRepository,
                                            tmp_path: Path, row: dict[str, Any],
                                            says: str) -> None:
    good = write(tmp_path / "pets.jsonl", PETS)
    bad = write(tmp_path / "bad.jsonl", [*STAMPED, row])
    with pytest.raises(InvalidInputError, match="session file") as info:
        asyncio.run(ingest(seeded_repo, [good, bad]))
    assert says in info.value.message and str(bad) in info.value.message
    assert SessionStore(seeded_repo).manifests() == []  # nothing of either file stored
    early = write(tmp_path / "early.jsonl", [{"_type": "feedback", "kind": "thumb_up"}, *PETS])
    with pytest.raises(InvalidInputError, match="line 1: feedback names no response_id"):
        asyncio.run(ingest(seeded_repo, [early]))


def test_cli_refuses_a_malformed_event(run_cli: Any, seeded_repo: ExperienceRepository,
                                       tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.jsonl", [*STAMPED, {**THUMB_DOWN, "feedback_type": "meh"}])
    out = run_cli("-C", tmp_path / "repo", "sessions", "ingest", bad)
    assert out.code == 5 and "line 3: feedback event: kind" in out.err
    assert git(tmp_path / "repo", "branch", "--list", "expgit/sessions").strip() == ""


def test_feedback_is_redacted_and_in_the_fingerprints(seeded_repo: ExperienceRepository,
                                                      tmp_path: Path) -> None:
    report = asyncio.run(ingest(seeded_repo, [write(tmp_path / "s.jsonl",
                                                    [*STAMPED, THUMB_DOWN])]))
    assert report.redactions.get("email") == 1
    [manifest] = SessionStore(seeded_repo).manifests()
    assert manifest.signals is not None
    assert manifest.signals.feedback_events[0].text == "wrong, ask [REDACTED:email]"
    messages = SessionStore(seeded_repo).transcript(manifest.session_key)
    assert manifest.content_hash == fingerprint(messages, manifest.signals)
    [segment] = manifest.segments
    assert segment.fingerprint == fingerprint(messages, manifest.signals)
    assert segment.fingerprint != fingerprint(messages)
    data = git(tmp_path / "repo", "log", "-p", "expgit/sessions")
    assert "jane@example.com" not in data and "resp-1" not in data


def test_a_session_without_events_is_fingerprinted_as_before(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    asyncio.run(ingest(seeded_repo, [write(tmp_path / "s.jsonl", STAMPED)]))
    [manifest] = SessionStore(seeded_repo).manifests()
    messages = SessionStore(seeded_repo).transcript(manifest.session_key)
    assert manifest.signals is None
    assert manifest.content_hash == manifest.segments[0].fingerprint == fingerprint(messages)


def feedback_script(repo: ExperienceRepository, prompts: list[str],
                    scores: int) -> ScriptedChatModel:
    bodies = {"checked-baggage-allowance": lesson_bodies(repo)["checked-baggage-allowance"]}
    reflect = reflect_for(bodies)

    def reflect_seen(messages: ChatMessages) -> str:
        prompts.append(messages[-1]["content"])
        return reflect(messages)

    return ScriptedChatModel([*[Step("score", score_reply)] * scores,
                              Step("reflect", reflect_seen), Step("merge", merge_of(bodies))])


def test_a_thumbs_down_trains_with_a_failed_label_and_no_score_call(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    asyncio.run(ingest(seeded_repo, [write(tmp_path / "gold.jsonl", [*STAMPED, THUMB_DOWN]),
                                     write(tmp_path / "pets.jsonl", PETS)]))
    prompts: list[str] = []
    chat = feedback_script(seeded_repo, prompts, scores=1)  # pets only: gold has feedback
    runtime = LLMRuntime.fixed(chat)
    report = asyncio.run(run(seeded_repo, llm=runtime))
    chat.assert_done()
    assert {s: u.calls for s, u in runtime.meter.by_stage().items()} == {
        "score": 1, "reflect": 1, "merge": 1}
    assert report.errors == [] and len(report.labelled) == 2 and len(report.proposals) == 1
    gold = next(s for s in segments(seeded_repo) if s.feedback is not None)
    assert gold.metrics is None and gold.trained and report.trained == [gold.fingerprint]
    assert gold.memory_eligible and not gold.sft_eligible  # failed, and trained all the same
    assert gold.feedback is not None and not gold.feedback.passed
    [outcome] = gold.feedback.outcomes
    assert outcome.outcome_label == "negative_feedback"
    assert outcome.evidence[-1] == ("feedback thumb_down at 2026-05-01T10:00:30+00:00: "
                                    "wrong, ask [REDACTED:email]")
    # the reflect call sees the label and why
    assert "negative_feedback" in prompts[0] and "wrong, ask [REDACTED:email]" in prompts[0]
    assert "jane@example.com" not in prompts[0]


def test_seed_event_logged_as_is_and_an_implicit_response(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """A bare /feedback event row (no _type), on the response before it, thumbs up."""
    event = {"feedback_type": "thumb_up", "feedback_text": "thanks", "session_id": "x",
             "accepted": True}
    asyncio.run(ingest(seeded_repo, [write(tmp_path / "gold.jsonl", [*GOLD, event])]))
    report = asyncio.run(run(seeded_repo, llm=None))  # labelling by feedback needs no LLM
    [segment] = segments(seeded_repo)
    assert report.labelled == [segment.fingerprint] and segment.feedback is not None
    [outcome] = segment.feedback.outcomes
    assert (outcome.outcome_label, outcome.response_id) == ("positive_feedback", "message-1")
    assert outcome.evidence == ["no user turn after the response", "feedback thumb_up: thanks"]
    assert report.notes == ["no LLM: nothing was segmented, scored or trained "
                            "(1 segment(s) labelled by their feedback)"]


def test_feedback_added_later_relabels_the_trained_segment(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "gold.jsonl", STAMPED)
    asyncio.run(ingest(seeded_repo, [path]))
    first = feedback_script(seeded_repo, [], scores=1)
    asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(first)))
    first.assert_done()
    [old] = segments(seeded_repo)
    assert old.trained and old.metrics is not None and old.feedback is None
    write(path, [*STAMPED, THUMB_DOWN])  # the user's thumbs down arrives later
    report = asyncio.run(ingest(seeded_repo, [path]))
    [file] = report.files
    assert file.outcome == "changed" and file.segmentation is not None
    assert file.segmentation.superseded == [old.fingerprint]
    assert file.segmentation.llm_prompts == 0  # same messages: not segmented again
    [active] = [s for s in segments(seeded_repo) if s.status == "active"]
    assert (active.start, active.end, active.topic) == (old.start, old.end, old.topic)
    assert not active.labelled and not active.trained
    superseded = next(s for s in segments(seeded_repo) if s.status == "superseded")
    assert superseded.invalidation is not None  # what the old label taught is flagged
    assert superseded.invalidation.open_gradient_ids == old.gradient_ids
    prompts: list[str] = []
    second = feedback_script(seeded_repo, prompts, scores=0)  # no score call this time
    again = asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(second)))
    second.assert_done()
    assert again.trained == [active.fingerprint] and "negative_feedback" in prompts[0]
    unchanged = asyncio.run(ingest(seeded_repo, [path]))  # the same file again: nothing
    assert unchanged.files[0].outcome == "unchanged" and unchanged.commit is None


def test_the_rollout_carries_the_signals(seeded_repo: ExperienceRepository,
                                         tmp_path: Path) -> None:
    from expgit.sessions.rollouts import segment_rollout

    asyncio.run(ingest(seeded_repo, [write(tmp_path / "gold.jsonl", [*STAMPED, THUMB_DOWN])]))
    asyncio.run(run(seeded_repo, llm=None))
    [manifest] = SessionStore(seeded_repo).manifests()
    [segment] = manifest.segments
    messages = SessionStore(seeded_repo).segment_messages(segment.fingerprint)
    rollout = segment_rollout(manifest, segment, messages, 0.7)
    assert rollout.case.task_signature == "session:feedback"
    assert rollout.evaluation is not None and not rollout.evaluation.passed
    assert rollout.evaluation.metadata["source"] == "session-feedback"
    [result] = rollout.evaluation.criterion_results
    assert result.evidence[-1].startswith("feedback thumb_down")
    assert json.loads(json.dumps(rollout.metadata["feedback_events"]))[0]["kind"] == \
        "thumb_down"
