"""``expgit train-rollouts --evaluator feedback``: recorded sessions labelled by their
feedback signals (a chat service's ``/feedback`` events as they are stored), then
trained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Driver
from scripted_pipeline import BAGGAGE_CASE, edit_reply, reflect_with

from expgit.core.domain import Message, Rollout, RubricEvaluation
from expgit.llm.scripted import Step


def _session(tmp_path: Path) -> Path:
    rollout = Rollout(
        case=BAGGAGE_CASE, policy_snapshot_id="recorded",
        messages=[Message.text("user", "gold member baggage?"),
                  Message.text("assistant", "Two bags, I think.")],
        evaluation=RubricEvaluation(passed=True, score=1.0),  # what the harness believed
        metadata={"message_stamps": [{"index": 0, "at": "2026-05-01T10:00:00Z"},
                                     {"index": 1, "at": "2026-05-01T10:00:05Z",
                                      "response_id": "r1"}],
                  # the field names of the chat service's /feedback events
                  "feedback_events": [{"response_id": "r1", "session_id": "s-1",
                                       "feedback_type": "thumb_down",
                                       "feedback_text": "not helpful",
                                       "feedback_delay_sec": 12.5,
                                       "timestamp": "2026-05-01T10:00:17Z"}]})
    path = tmp_path / "sessions.jsonl"
    path.write_text(rollout.model_dump_json() + "\n")
    return path


def test_feedback_labels_the_rollouts_before_training(driver: Driver, serve: Any,
                                                      tmp_path: Path) -> None:
    prompts: list[str] = []

    refusal = reflect_with(edit_reply("no-such-lesson", "delete", ""))

    def reflect(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[-1]["content"])
        return refusal(messages)

    server = serve([Step("reflect", reflect)])
    report = json.loads(driver.ok(
        "train-rollouts", _session(tmp_path), "--evaluator", "feedback", "--llm", "openai",
        "--base-url", server.url, "--json").out)
    phase = report["phases"][0]
    assert (phase["cases"], phase["passed"]) == (1, 0)  # the thumb down, not the harness
    assert "negative_feedback" in prompts[0] and "not helpful" in prompts[0]
    server.chat.assert_done()


def test_the_recorded_evaluation_stands_by_default(driver: Driver, serve: Any,
                                                   tmp_path: Path) -> None:
    server = serve([Step("reflect", reflect_with())])
    report = json.loads(driver.ok("train-rollouts", _session(tmp_path), "--llm", "openai",
                                  "--base-url", server.url, "--json").out)
    assert report["phases"][0]["passed"] == 1


def test_malformed_feedback_is_refused_before_any_call(driver: Driver, serve: Any,
                                                      tmp_path: Path) -> None:
    path = _session(tmp_path)
    data = json.loads(path.read_text())
    data["metadata"]["feedback_events"][0]["feedback_type"] = "shrug"
    path.write_text(json.dumps(data) + "\n")
    server = serve([])
    result = driver.fails(5, "train-rollouts", path, "--evaluator", "feedback", "--llm",
                          "openai", "--base-url", server.url)
    assert "feedback_events" in result.err and len(result.err.strip().splitlines()) <= 2
    assert server.chat.calls == []
