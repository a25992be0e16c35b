"""``expgit train`` / ``eval`` on tool-environment cases through the real CLI and the
openai adapter against the local script server: a scripted agent that calls the
baggage tool only when an experience tells it to fails the state check at baseline, and
passes it after one training epoch in apply mode; bad input exits 5 with nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from scripted_pipeline import analyze, combined
from tool_support import call, last_role, turn, write_cases

from expgit.llm.port import ToolMessages, ToolTurn
from expgit.llm.scripted import Step

MARKER = "Call update_reservation_baggages yourself"
LESSON = (f"# Baggage changes are tool calls\n\nWhen the user asks to set checked bags: "
          f"{MARKER}, with the total and paid bags the user gives.\n")
BAGS = re.compile(r"bags of (\w+) to (\d+) total, (\d+) paid, with (\w+)")


def agent(messages: ToolMessages) -> ToolTurn:
    """Calls the baggage tool only when an experience says so; else only talks."""
    if last_role(messages) == "tool":
        return turn(text="Your bags are updated.")
    match = BAGS.search(str(messages[-1]["content"]))
    if MARKER not in str(messages[0]["content"]) or match is None:
        return turn(text="Please ask a human agent to change your bags.")
    rid, total, paid, payment = match.groups()
    return turn(call("update_reservation_baggages", reservation_id=rid,
                     total_baggages=int(total), nonfree_baggages=int(paid),
                     payment_id=payment))


def estimate(messages: list[dict[str, str]]) -> str:
    assert "final state differs" in messages[-1]["content"]  # the failed state check
    return json.dumps({"edits": [{
        "name": "baggage-tool-calls", "action": "create", "rationale": "bags were not set",
        "summary": "Set checked bags with the baggage tool.", "tags": ["baggage"],
        "body": LESSON, "confidence": 0.8}]})


def merge(messages: list[dict[str, str]]) -> str:
    return json.dumps({"items": [{
        "name": "baggage-tool-calls", "action": "upsert", "gradient_ids": [],
        "rationale": "bags were not set", "summary": "Set checked bags with the baggage "
        "tool.", "tags": ["baggage"], "body": LESSON, "confidence": 0.8}]})


def bag_case(name: str, rid: str, total: int, paid: int, payment: str) -> dict[str, Any]:
    return {"name": name, "task_signature": "update-baggage", "input": {"user_turns": [
        f"Please set the checked bags of {rid} to {total} total, {paid} paid, with "
        f"{payment}."]}, "rubric": {"criteria": [{"name": "bags-set", "check": {
            "type": "db_state", "expected": {f"reservations.{rid}.total_baggages": total}}}]}}


def test_one_epoch_teaches_the_tool_call(run_cli: Any, serve: Any, seeded_repo: Any,
                                         tmp_path: Path) -> None:
    train = write_cases(tmp_path / "cases", [bag_case("bags-mia", "NO6JO3", 3, 0,
                                                      "credit_card_4421")], name="t.yaml")
    held_out = write_cases(tmp_path / "cases", [bag_case("bags-sofia", "OBUT9V", 4, 0,
                                                         "credit_card_1033")], name="e.yaml")
    server = serve([Step("rollout", agent), Step("rollout", agent),
                    Step("reflect", combined(analyze, estimate)), Step("merge", merge),
                    # the proposal's candidate eval: a tool call; the final eval of main
                    # (the applied proposal's tree) is that measurement, no call
                    *(Step("rollout", agent) for _ in range(2))])
    result = run_cli("-C", tmp_path / "repo", "train", "--cases", train, "--eval-cases",
                     held_out, "--mode", "apply", "--llm", "openai", "--base-url",
                     server.url, "--json")
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    baseline, epoch, candidate, final = json.loads(result.out)["phases"]
    assert (baseline["passed"], epoch["passed"], candidate["passed"], final["passed"]) == (
        0, 0, 1, 1)  # measured before it was applied, then on main
    assert final["reused"] == "candidate_eval"
    analyze_prompt = next(c[1][-1]["content"] for c in server.chat.calls
                          if c[0] == "reflect")
    assert "final state differs: reservations.NO6JO3.total_baggages = 1" in analyze_prompt
    final_calls = [c for c in server.chat.calls if c[0] == "rollout"][-2:]  # the candidate's
    assert final_calls[0][2]["tools"] and MARKER in final_calls[0][1][0]["content"]
    tool_results = [m for m in final_calls[1][1] if m["role"] == "tool"]
    assert len(tool_results) == 1 and '"total_baggages": 4' in tool_results[0]["content"]
    assert "baggage-tool-calls.md" in git(tmp_path / "repo", "ls-tree", "--name-only",
                                          "main", "experiences/")


@pytest.mark.parametrize("edit, message", [
    ({"environment": "hotel"}, "unknown environment 'hotel'"),
    ({"database": "nope.json"}, "no such database fixture"),
    ({"rid": "NOPE"}, "refers to a record that is not in the database fixture"),
])
@pytest.mark.slow
def test_bad_environment_input_exits_5_before_any_call(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path,
        edit: dict[str, str], message: str) -> None:
    server = serve([])
    cases = write_cases(tmp_path / "cases", [bag_case("x", edit.get("rid", "NO6JO3"), 3, 0,
                                                      "credit_card_4421")],
                        environment=edit.get("environment", "airline"),
                        database=edit.get("database", "db.json"))
    refs = git(tmp_path / "repo", "for-each-ref")
    for command in ("train", "eval"):
        result = run_cli("-C", tmp_path / "repo", command, "--cases", cases, "--llm",
                         "openai", "--base-url", server.url)
        assert result.code == 5 and message in result.err, result.err
        assert len(result.err.strip().splitlines()) <= 2  # the error and its hint
    assert server.requests == 0
    assert git(tmp_path / "repo", "for-each-ref") == refs
