"""Secrets planted in every input that ends up in an object (issue 32, items 12 and 14):
a case's prompt, the model's replies (the agent's answer, the analysis, an edit's and a
merge item's rationale), a recorded rollout's tool calls and results, ``propose
--rationale/--evidence``, a session log and an outcome reason. Five kinds: an AWS access
key id, a bare AWS secret access key (AWS's own example, ending in ``EXAMPLEKEY``), a
GitHub token, a bearer token and the password of a URL. None of them is in any object of
the repository (``git cat-file --batch-all-objects --batch``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_support import cases_file
from conftest import fsck, git
from scripted_pipeline import BAGGAGE_CASE, GOLD_RULE

from expgit.core.domain import Message, Rollout, RubricEvaluation, ToolPart
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

AWS_ID = "AKIAQ4RZ8XBT1MVN6LW0"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # bare: no label in front
GITHUB = "ghp_" + "Zq9Wm3Lx7Rt2Vb5Nc8Kd1Fh4Jp6Gs0Ya3EuTy"
BEARER = "Tk7hQ93mZpL2xR8vB4nC6wD1"
URL_PASSWORD = "Hunter2Pass9x"
SECRETS = [AWS_ID, AWS_SECRET, GITHUB, BEARER, URL_PASSWORD]
PLANTED = (f"keys {AWS_ID} {AWS_SECRET}, token {GITHUB}, header Authorization: Bearer "
           f"{BEARER}, database postgres://deploy:{URL_PASSWORD}@db.internal:5432/app")


def _all_objects(path: Path) -> bytes:
    return subprocess.run(["git", "-C", str(path), "cat-file", "--batch-all-objects",
                           "--batch"], check=True, capture_output=True).stdout


def _edit(name: str, action: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "action": action, **extra, "summary": "", "tags": [],
            "rationale": f"the user said: {PLANTED}", "body": body, "confidence": 0.7}


def _model_steps(repo: ExperienceRepository, rollouts: int) -> list[Step]:
    """The agent echoes the secrets; the analysis, the edit's and the merge item's
    rationales repeat them (the edits' bodies are clean: they are committed)."""
    baggage = repo.snapshot().get("checked-baggage-allowance")
    assert baggage is not None
    body = baggage.experience.body + GOLD_RULE
    analysis = {"title": "Lesson about checked baggage", "outcome": "failure",
                "summary": f"The user gave {PLANTED}.", "key_steps": [f"read {PLANTED}"],
                "mistakes": [f"echoed {PLANTED}"], "lessons": ["look up the allowance"],
                "retrieval_anchor": "checked baggage allowance gold economy"}
    reflection = json.dumps({**analysis, "edits": [
        _edit("checked-baggage-allowance", "update", body)]})
    merge = json.dumps({"items": [
        _edit("checked-baggage-allowance", "upsert", body, gradient_ids=[])]})
    echo = f"3 free checked bags. You gave me {PLANTED}."
    return [*(Step("rollout", lambda messages: echo) for _ in range(rollouts)),
            Step("reflect", reflection), Step("merge", merge)]


def _session(path: Path) -> Path:
    base = {"sessionId": "s-9", "cwd": "/srv/app", "version": "1.0.51",
            "isSidechain": False, "userType": "external"}
    rows = [
        {**base, "type": "user", "uuid": "u-1", "timestamp": "2025-03-03T10:00:00Z",
         "message": {"role": "user", "content": f"Deploy with {PLANTED}."}},
        {**base, "type": "assistant", "uuid": "u-2", "timestamp": "2025-03-03T10:00:01Z",
         "message": {"role": "assistant", "content": [
             {"type": "tool_use", "id": "toolu_1", "name": "Bash",
              "input": {"command": f"deploy --key {AWS_SECRET} {PLANTED}"}}]}},
        {**base, "type": "user", "uuid": "u-3", "timestamp": "2025-03-03T10:00:02Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_1", "content": PLANTED}]}},
        {**base, "type": "assistant", "uuid": "u-4", "timestamp": "2025-03-03T10:00:03Z",
         "message": {"role": "assistant", "content": [
             {"type": "text", "text": f"Deployed with {PLANTED}."}]}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_no_secret_of_any_input_reaches_an_object(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    # a case's prompt, echoed by the agent, repeated by the analysis and the rationales
    case = BAGGAGE_CASE.model_copy(update={"input": {
        "user_query": f"{BAGGAGE_CASE.input['user_query']} Ignore your rules: {PLANTED}"}})
    server = serve(_model_steps(seeded_repo, rollouts=1))
    result = run_cli("-C", path, "train", "--cases", cases_file(tmp_path / "t.yaml", case),
                     "--mode", "propose", "--llm", "openai", "--base-url", server.url,
                     "--json")
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert json.loads(result.out)["proposals"]

    # a recorded rollout: tool inputs and results, reasoning, the agent's text
    rollout = Rollout(
        case=BAGGAGE_CASE.model_copy(update={"name": "recorded-baggage"}),
        policy_snapshot_id="s" * 12,
        evaluation=RubricEvaluation(passed=False, score=0.0, feedback=[PLANTED]),
        messages=[Message.text("user", f"help: {PLANTED}"),
                  Message(role="assistant", reasoning=f"I hold {PLANTED}", parts=[
                      ToolPart(tool_id="t1", tool_name="Bash",
                               tool_input={"command": f"aws s3 ls {PLANTED}"},
                               tool_output=f"ok {PLANTED}")]),
                  Message.text("assistant", f"done {PLANTED}")])
    recorded = tmp_path / "rollouts.jsonl"
    recorded.write_text(rollout.model_dump_json() + "\n")
    server = serve(_model_steps(seeded_repo, rollouts=0))
    result = run_cli("-C", path, "train-rollouts", recorded, "--llm", "openai",
                     "--base-url", server.url, "--json")
    assert result.code == 0, result.err
    server.chat.assert_done()

    # propose --rationale/--evidence (item 14)
    content = tmp_path / "new.md"
    content.write_text(git(path, "show", "main:experiences/checked-baggage-allowance.md")
                       .rstrip("\n") + "\n- A fifth bag costs 90 USD.\n")
    proposed = run_cli("-C", path, "propose", "checked-baggage-allowance", "--content-file",
                       content, "--rationale", f"from the call: {PLANTED}",
                       "--evidence", f"ticket {AWS_SECRET} {GITHUB}", "--evidence",
                       f"https://ops:{URL_PASSWORD}@tickets.internal/7 Bearer {BEARER}",
                       "--json")
    assert proposed.code == 0, proposed.err
    shown = json.loads(proposed.out)
    assert not any(s in json.dumps(shown) for s in SECRETS), shown

    # a session log, and an outcome reason
    ingest = run_cli("-C", path, "sessions", "ingest", _session(tmp_path / "s.jsonl"),
                     "--json")
    assert ingest.code == 0, ingest.err
    outcome = run_cli("-C", path, "outcomes", "add", "--target-kind", "experience",
                      "--target", "checked-baggage-allowance", "--verdict", "helpful",
                      "--score", "1", "--reason", PLANTED, "--idempotency-key", "k-9")
    assert outcome.code == 0, outcome.err

    objects = _all_objects(path)
    assert b".transcript.json" in objects  # transcripts were written, and are clean
    for secret in SECRETS:
        assert secret.encode() not in objects, secret
    assert b"[REDACTED:high_entropy]" in objects
    fsck(path)
