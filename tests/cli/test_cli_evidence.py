"""``expgit evidence ID`` and the transcript beside each trajectory, through the real CLI
against the strict scripted server: after ``train`` on a tool case, the stored transcript
holds the agent's ``get_user_details`` call and the ``payment_methods`` it returned; the
chain of a proposal, a gradient and a trajectory (by prefix and by URI), in text and
JSON; the edit's prediction and its check; a trajectory stored without a transcript (the
old code path); and the bad ids (exit 5, one line)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import fsck, git
from json_shapes import assert_shape
from scripted_pipeline import analyze, combined
from test_cli_train_tools import MARKER, estimate, merge
from tool_support import call, last_role, turn, write_cases

from expgit.core.domain import Case, Message, Rollout, Rubric
from expgit.errors import EXIT_INVALID
from expgit.llm.port import ToolMessages, ToolTurn
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore, rollout_id

ASK = re.compile(r"I am (\w+)\. Please set the checked bags of (\w+) to (\d+) total, "
                 r"(\d+) paid, with (\w+)")


def agent(messages: ToolMessages) -> ToolTurn:
    """Looks the user up and gives up, unless an experience says to call the tool."""
    if last_role(messages) == "tool":
        done = "update_reservation_baggages" in json.dumps(messages[-2])
        return turn(text="Your bags are updated." if done else "I cannot change bags.")
    match = ASK.search(str(messages[-1]["content"]))
    assert match is not None
    user, rid, total, paid, payment = match.groups()
    if MARKER in str(messages[0]["content"]):
        return turn(call("update_reservation_baggages", reservation_id=rid,
                         total_baggages=int(total), nonfree_baggages=int(paid),
                         payment_id=payment))
    return turn(call("get_user_details", user_id=user))


def bag_case(name: str, user: str, rid: str, total: int, payment: str) -> dict[str, Any]:
    return {"name": name, "task_signature": "update-baggage", "input": {"user_turns": [
        f"I am {user}. Please set the checked bags of {rid} to {total} total, 0 paid, "
        f"with {payment}."]}, "rubric": {"criteria": [{"name": "bags-set", "check": {
            "type": "db_state", "expected": {f"reservations.{rid}.total_baggages": total}}}]}}


def trained(run_cli: Any, serve: Any, tmp_path: Path) -> tuple[Path, str]:
    """Train in propose mode on one tool case, measured on a held-out one of the same
    task; (repository, proposal id)."""
    cases = tmp_path / "cases"
    train = write_cases(cases, [bag_case("bags-mia", "mia_li_3668", "NO6JO3", 3,
                                         "credit_card_4421")], name="t.yaml")
    held_out = write_cases(cases, [bag_case("bags-sofia", "sofia_kim_7287", "OBUT9V", 4,
                                            "credit_card_1033")], name="e.yaml")
    # baseline and training rollouts (two turns each), reflect, merge, then the
    # candidate eval (the final eval of the unchanged main is the baseline's)
    server = serve([*(Step("rollout", agent) for _ in range(4)),
                    Step("reflect", combined(analyze, estimate)), Step("merge", merge),
                    *(Step("rollout", agent) for _ in range(2))])
    path = tmp_path / "repo"
    result = run_cli("-C", path, "train", "--cases", train, "--eval-cases", held_out,
                     "--llm", "openai", "--base-url", server.url, "--json")
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    [pid] = json.loads(result.out)["proposals"]
    return path, pid


def test_the_evidence_of_a_proposal_reaches_the_tool_calls_of_the_run(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path, pid = trained(run_cli, serve, tmp_path)
    shown = run_cli("-C", path, "evidence", pid, "--json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert_shape("evidence", data)
    assert (data["kind"], data["id"], data["state"]) == ("proposal", pid, "open")
    [edit] = data["edits"]
    assert (edit["target"], edit["operation"], edit["rationale"]) == (
        "baggage-tool-calls", "create", "bags were not set")
    # derived from the failed rollout it came from, checked by the candidate eval
    assert edit["predicts"] == {"cases": ["bags-mia"], "tasks": ["update-baggage"]}
    assert edit["verdict"] == "hit" and edit["model"] == "gpt-4o-mini"
    assert (edit["confidence"], edit["shown_confidence"]) == (0.8, 0.8)  # a hit: no cut
    [trajectory] = edit["trajectories"]
    assert trajectory["case"] == "bags-mia" and trajectory["note"] is None
    [criterion] = trajectory["evaluation"]["criterion_results"]
    assert (criterion["criterion_name"], criterion["passed"]) == ("bags-set", False)
    transcript = trajectory["transcript"]
    assert transcript["tool_calls"] == 1 and transcript["case"] == "bags-mia"
    [tool] = [p for m in transcript["messages"] for p in m["parts"] if p["type"] == "tool"]
    assert tool["name"] == "get_user_details" and '"mia_li_3668"' in tool["input"]
    assert '"payment_methods"' in tool["output"] and "credit_card_4421" in tool["output"]

    # the same in text: the edit, the trajectory, the criterion, the tool call
    text = run_cli("-C", path, "evidence", pid)
    assert text.code == 0, text.err
    assert f"proposal {pid} (open): " in text.out
    assert f"== edit {edit['id']} (open): create baggage-tool-calls" in text.out
    assert "predicts fail -> pass: bags-mia, any case of task update-baggage; checked: " \
        "hit" in text.out
    assert "[FAIL] bags-set" in text.out
    assert "[assistant] tool call get_user_details" in text.out
    assert "payment_methods" in text.out and "transcript: " in text.out

    # the stored objects: the transcript blob beside the document, on the side branch
    tid = trajectory["id"]
    stored = git(path, "show", f"expgit/trajectories:trajectories/{tid[:2]}/{tid}.transcript.json")
    assert json.loads(stored) == transcript
    # redacted as the prompts are: the tool result's e-mail address is not kept
    assert "[REDACTED:email]" in tool["output"] and "mia.li@example.com" not in stored
    assert "trajectories" not in git(path, "ls-tree", "--name-only", "main")
    # the PR body tells the reviewer how to open it
    message = git(path, "log", "-1", "--format=%B", f"expgit/proposals/{pid}")
    assert f"- `expgit evidence {edit['id']}`: create `baggage-tool-calls`; predicts " \
        "fail -> pass: bags-mia, any case of task update-baggage" in message
    assert "| **hit** (bags-sofia went fail -> pass) |" in message
    fsck(path)


def test_a_gradient_and_a_trajectory_by_prefix_and_by_uri(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path, pid = trained(run_cli, serve, tmp_path)
    [edit] = json.loads(run_cli("-C", path, "evidence", pid, "--json").out)["edits"]
    by_gradient = json.loads(run_cli("-C", path, "evidence", edit["id"][:8], "--json").out)
    assert by_gradient["kind"] == "gradient" and by_gradient["edits"] == [edit]
    [trajectory] = edit["trajectories"]
    by_id = json.loads(run_cli("-C", path, "evidence", trajectory["id"][:10], "--json").out)
    assert by_id["kind"] == "trajectory" and by_id["trajectory"] == trajectory
    assert by_id["edits"] == []
    by_uri = json.loads(run_cli("-C", path, "evidence", trajectory["uri"], "--json").out)
    assert by_uri["trajectory"] == trajectory


def test_a_trajectory_stored_without_a_transcript_says_so_and_shows_its_analysis(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    rollout = Rollout(case=Case(name="old-case", task_signature="old.task",
                                rubric=Rubric(name="r")),
                      messages=[Message.text("user", "hello")], policy_snapshot_id="s")
    tid = rollout_id(rollout)
    document = ("---\nname: " + tid + "\nkind: trajectory\ntitle: An old run\n"
                "outcome: failure\nretrieval_anchor: old\ncase: old-case\n"
                "task_signature: old.task\nevaluation:\n  passed: false\n  score: 0.0\n"
                "  criterion_results:\n  - criterion_name: answers\n    passed: false\n"
                "    score: 0.0\n    feedback: [said nothing]\n---\n\n# An old run\n\n"
                "The agent said nothing useful.\n")
    # the store as the code before transcripts called it: the document alone
    TrajectoryStore(seeded_repo).store(tid, document, "trajectory: An old run")
    shown = run_cli("-C", tmp_path / "repo", "evidence", tid[:6])
    assert shown.code == 0, shown.err
    assert f"trajectory {tid}: An old run" in shown.out
    assert "note: no transcript: this trajectory was stored before expgit kept " \
           "transcripts" in shown.out
    assert "[FAIL] answers (0.00): said nothing" in shown.out
    assert "The agent said nothing useful." in shown.out
    data = json.loads(run_cli("-C", tmp_path / "repo", "evidence", tid, "--json").out)
    assert data["trajectory"]["transcript"] is None and "no transcript" in \
        data["trajectory"]["note"]


def _sharing_prefix(prefix: str) -> Rollout:
    """A rollout whose content id starts with ``prefix`` (4 hex digits: ~65k tries)."""
    for n in range(2_000_000):
        rollout = Rollout(case=Case(name=f"c{n}", task_signature="t", rubric=Rubric(name="r")),
                          messages=[Message.text("user", "hi")], policy_snapshot_id="s")
        if rollout_id(rollout).startswith(prefix):
            return rollout
    raise AssertionError("no rollout found")


@pytest.mark.slow
def test_unknown_and_ambiguous_ids_exit_5_in_one_line(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    content = tmp_path / "lesson.md"
    content.write_text("---\nname: pets-in-cabin\nsummary: Pets follow the rules.\n---\n\n"
                       "# Pets\n\nAnswer from the rules.\n")
    gradient = json.loads(run_cli("-C", path, "propose", "pets-in-cabin", "--content-file",
                                  content, "--rationale", "pets", "--json").out)["id"]
    unknown = run_cli("-C", path, "evidence", "0000")
    assert unknown.code == EXIT_INVALID
    assert unknown.err.splitlines() == [
        "expgit: error: no gradient, proposal or trajectory '0000' (list them with `expgit "
        "gradients --state all`, `expgit proposals --state all`)"]
    bad = run_cli("-C", path, "evidence", "xyz")
    assert bad.code == EXIT_INVALID and len(bad.err.splitlines()) == 1
    assert "'xyz' is not a gradient, proposal or trajectory id" in bad.err
    # a trajectory whose id starts as the gradient's does: the prefix names both
    rollout = _sharing_prefix(gradient[:4])
    tid = rollout_id(rollout)
    TrajectoryStore(seeded_repo).store(tid, "---\ntitle: t\n---\n", "trajectory: t")
    refs = git(path, "for-each-ref")
    ambiguous = run_cli("-C", path, "evidence", gradient[:4])
    assert ambiguous.code == EXIT_INVALID
    assert ambiguous.err.splitlines()[0] == (
        f"expgit: error: id '{gradient[:4]}' is ambiguous: gradient {gradient}, trajectory {tid}; "
        "give more digits")
    assert len(ambiguous.err.splitlines()) == 1
    whole = json.loads(run_cli("-C", path, "evidence", gradient, "--json").out)
    assert (whole["kind"], whole["id"]) == ("gradient", gradient)
    assert whole["edits"][0]["trajectories"] == []  # proposed by hand: no evidence
    assert git(path, "for-each-ref") == refs  # reading changed nothing
