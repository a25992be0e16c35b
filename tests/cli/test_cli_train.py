"""``expgit train``, ``eval`` and ``train-rollouts`` in-process, against a local
OpenAI-compatible HTTP server (127.0.0.1) that serves a strict script by stage
(tests/script_server.py, the ``serve`` fixture of conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file, unanswered_rollouts
from conftest import EXAMPLE, fsck, git
from json_shapes import assert_shape
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_CASE,
    edit_reply,
    lesson_bodies,
    merge_of,
    reflect_for,
    reflect_with,
)

from expgit.core.domain import Message, Rollout, RubricEvaluation
from expgit.llm.scripted import Step
from expgit.runs.run_files import load_rollouts
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.reports.run_report import RunReport, render_text


def training_steps(repo: ExperienceRepository) -> list[Step]:
    """One batch of BAGGAGE_CASE and PETS_CASE: 2 rollouts, 2 reflections (an update and a
    create) and 1 merge of both."""
    bodies = lesson_bodies(repo)
    reflect, merge = reflect_for(bodies), merge_of(bodies)
    return [Step("rollout", agent), Step("rollout", agent), Step("reflect", reflect),
            Step("reflect", reflect), Step("merge", merge)]


LINE = {
    "baseline_eval": r"\[baseline_eval\] epoch=-1 cases=(\d+) accuracy=(\d+\.\d\d)% "
                     r"passed=(\d+)/(\d+) avg_reward=(\d\.\d{6})",
    "train_epoch": r"\[train_epoch\] epoch=0 cases=(\d+) accuracy=(\d+\.\d\d)% "
                   r"passed=(\d+)/(\d+) avg_reward=(\d\.\d{6}) commits=(\d+) errors=(\d+)",
    "final_eval": r"\[final_eval\] epoch=1 cases=(\d+) accuracy=(\d+\.\d\d)% "
                  r"passed=(\d+)/(\d+) avg_reward=(\d\.\d{6})",
}


def test_train_propose_mode(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                            tmp_path: Path) -> None:
    path = tmp_path / "repo"
    main = seeded_repo.main_commit()
    # + baseline and candidate eval; the final eval of the unchanged main is the baseline's
    server = serve([*training_steps(seeded_repo), Step("rollout", agent),
                    Step("rollout", agent)])
    train = cases_file(tmp_path / "train.yaml", BAGGAGE_CASE, PETS_CASE)
    held_out = cases_file(tmp_path / "eval.yaml", PETS_CASE)
    pr_body, report = tmp_path / "pr.md", tmp_path / "report.json"
    result = run_cli("-C", path, "train", "--cases", train, "--eval-cases", held_out,
                     "--mode", "propose", "--llm", "openai", "--base-url", server.url,
                     "--pr-body", pr_body, "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    lines = result.out.splitlines()
    assert re.fullmatch(LINE["baseline_eval"], lines[0]).groups() == (  # type: ignore[union-attr]
        "1", "0.00", "0", "1", "0.000000")
    assert re.fullmatch(LINE["train_epoch"], lines[1]).groups() == (  # type: ignore[union-attr]
        "2", "50.00", "1", "2", "0.500000", "1", "0")
    assert lines[2] == ("[candidate_eval] epoch=0 cases=1 accuracy=100.00% passed=1/1 "
                        "avg_reward=1.000000")  # the proposal's snapshot knows about pets
    assert re.fullmatch(LINE["final_eval"] + " reused=baseline_eval",  # no call made
                        lines[3]).groups() == (  # type: ignore[union-attr]
        "1", "0.00", "0", "1", "0.000000")
    assert lines[4:8] == ["", "baseline accuracy: 0.00% (0/1)", "final accuracy: 0.00% (0/1)",
                          "accuracy delta: +0.00pp"]
    assert lines[8].startswith(f"compared: the final eval against the baseline eval, both of "
                               f"main at {main[:12]}, which this run did not change (propose "
                               "mode)")
    usage = lines[lines.index("LLM usage:") + 1:]
    assert usage[0].split()[0] == "stage" and usage[-1].split()[0] == "total"
    assert {row.split()[0]: int(row.split()[1]) for row in usage[1:]} == {
        "rollout": 4, "reflect": 2, "merge": 1, "total": 7}
    # plain lines; the epoch counts the calls of the candidate eval it ran (1 rollout)
    assert "expgit: train_epoch epoch=0: 2/2 rollouts, 6 LLM calls" in result.err
    assert "expgit: candidate_eval epoch=0: 1/1 rollouts, 1 LLM calls" in result.err
    # main untouched; trajectories, gradients, a proposal and its PR body
    assert git(path, "rev-parse", "main").strip() == main
    branches = git(path, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    proposals = [b for b in branches if b.startswith("expgit/proposals/")]
    assert len(proposals) == 1 and "expgit/trajectories" in branches
    assert len([b for b in branches if b.startswith("expgit/gradients/")]) == 2
    assert f"proposal: {proposals[0].rsplit('/', 1)[1]}" in result.out
    body = pr_body.read_text()
    assert body.startswith("expgit: update 2 experiences: checked-baggage-allowance, pets")
    assert git(path, "log", "-1", "--format=%B", proposals[0]).startswith(body.split("\n")[0])
    data = json.loads(report.read_text())
    assert [p["phase"] for p in data["phases"]] == ["baseline_eval", "train_epoch",
                                                    "candidate_eval", "final_eval"]
    assert data["mode"] == "propose" and data["main_before"] == data["main_after"] == main
    assert data["proposals"] == [proposals[0].rsplit("/", 1)[1]]
    assert data["usage"]["total"]["calls"] == data["estimate"]["calls"] == 7
    assert (data["phases"][3]["reused"], data["phases"][3]["rollouts"]) == (
        "baseline_eval", data["phases"][0]["rollouts"])
    assert {r["case"] for r in data["phases"][1]["rollouts"]} == {BAGGAGE_CASE.name,
                                                                  PETS_CASE.name}
    fsck(path)


def train_apply(run_cli: Any, path: Path, tmp_path: Path, url: str) -> Any:
    return run_cli("-C", path, "train", "--cases",
                   cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE),
                   "--eval-cases", cases_file(tmp_path / "e.yaml", PETS_CASE),
                   "--mode", "apply", "--llm", "openai", "--base-url", url, "--json")


def test_train_apply_mode_moves_main_and_final_eval_sees_it(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    main = seeded_repo.main_commit()
    # baseline and candidate eval; main then has the candidate's tree: no final rollout
    server = serve([*training_steps(seeded_repo), Step("rollout", agent),
                    Step("rollout", agent)])
    result = train_apply(run_cli, path, tmp_path, server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()
    data = json.loads(result.out)
    assert_shape("train", data)
    baseline, epoch, candidate, final = data["phases"]
    assert candidate["phase"] == "candidate_eval" and candidate["passed"] == 1
    assert (baseline["passed"], final["passed"]) == (0, 1)  # final eval saw the lesson
    assert (final["reused"], candidate["reused"], baseline["reused"]) == (
        "candidate_eval", None, None)
    assert final["rollouts"] == candidate["rollouts"] and final["summary"]["passed"] == 1
    assert final["batches"][0]["policy_commit"] == data["main_after"]
    assert data["usage"]["by_stage"]["rollout"]["calls"] == 4  # 2 training, 2 eval
    assert data["estimate"]["calls"] == data["usage"]["total"]["calls"] == 7  # + 3 training
    text = render_text(RunReport.model_validate(data)).splitlines()
    assert text[3].startswith("[final_eval] epoch=1 cases=1 ") and text[3].endswith(
        " reused=candidate_eval")
    assert epoch["commits"] == 1 and data["applied_commits"] == [data["main_after"]]
    assert git(path, "rev-parse", "main").strip() == data["main_after"] != main
    assert "pets-in-cabin" in git(path, "ls-tree", "--name-only", "main", "experiences/")


@pytest.mark.slow
def test_train_apply_mode_runs_the_final_eval_when_main_moved(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """Someone commits to main while the proposal is measured: the apply rebuilds the
    proposal on the new main, a tree no eval measured, so the final eval runs."""
    path = tmp_path / "repo"

    def main_moves(messages: list[dict[str, str]]) -> str:
        (path / "NOTES.txt").write_text("a teammate's note\n")
        git(path, "add", "NOTES.txt")
        git(path, "commit", "-q", "--no-verify", "-m", "A teammate's note")
        return agent(messages)

    server = serve([*training_steps(seeded_repo), Step("rollout", agent),
                    Step("rollout", main_moves), Step("rollout", agent)])
    result = train_apply(run_cli, path, tmp_path, server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()  # the final eval's rollout was made
    data = json.loads(result.out)
    *_, candidate, final = data["phases"]
    assert final["phase"] == "final_eval" and final["reused"] is None
    measured = candidate["batches"][0]["policy_commit"]
    assert git(path, "rev-parse", f"{measured}^{{tree}}") != git(
        path, "rev-parse", f"{data['main_after']}^{{tree}}")  # rebuilt: a tree not measured
    assert final["batches"][0]["policy_commit"] == data["main_after"]
    assert "NOTES.txt" in git(path, "ls-tree", "--name-only", data["main_after"])
    assert data["usage"]["by_stage"]["rollout"]["calls"] == 5


def test_eval_prints_accuracy_and_only_rolls_out(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    refs = git(path, "for-each-ref")
    server = serve([Step("rollout", agent), Step("rollout", agent)])
    result = run_cli("-C", path, "eval", "--cases",
                     cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE),
                     "--llm", "openai", "--base-url", server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert result.out.splitlines()[0] == ("[eval] epoch=0 cases=2 accuracy=50.00% "
                                          "passed=1/2 avg_reward=0.500000")
    assert "proposal" not in result.out
    assert git(path, "for-each-ref") == refs


@pytest.mark.parametrize("content, message", [
    ("cases: [{name: a}]\n", "case 0 ('a'): rubric: Field required"),
    ("- [unbalanced\n", "not valid YAML"),
])
@pytest.mark.slow
def test_bad_cases_file_exits_5_before_any_call(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path,
        content: str, message: str) -> None:
    server = serve([])
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    for command in ("train", "eval"):
        result = run_cli("-C", tmp_path / "repo", command, "--cases", bad, "--llm", "openai",
                         "--base-url", server.url)
        assert result.code == 5 and message in result.err, result.err
    missing = run_cli("-C", tmp_path / "repo", "train", "--cases", tmp_path / "nope.yaml",
                      "--llm", "openai", "--base-url", server.url)
    assert missing.code == 5 and "no such cases file" in missing.err
    assert server.requests == 0


def alias_bomb(levels: int) -> str:
    """A "billion laughs" cases file: each anchor is nine aliases of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    anchors = "\n".join(f"  {line}" for line in lines)
    return (f"- name: bomb\n  input:\n    user_query: hi\n"
            f"{anchors.replace('  l', '    l')}\n    all: *l{levels - 1}\n"
            f"  rubric: {{criteria: [{{name: c, check: {{type: contains, value: x}}}}]}}\n")


def test_alias_bomb_in_a_cases_file_exits_5_naming_it(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    server = serve([])
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(7))  # 1 KB standing for 9**7 (4.8 million) strings
    assert bomb.stat().st_size < 1024
    for command in ("eval", "train"):
        result = run_cli("-C", tmp_path / "repo", command, "--cases", bomb, "--llm",
                         "openai", "--base-url", server.url)
        assert result.code == 5, result.err
        assert str(bomb) in result.err and "alias" in result.err, result.err
    assert server.requests == 0
    honest = tmp_path / "honest.yaml"  # an anchor reused a few times is fine
    honest.write_text(alias_bomb(2))
    result = run_cli("-C", tmp_path / "repo", "eval", "--cases", honest, "--llm", "openai",
                     "--base-url", server.url)
    assert "alias" not in result.err


@pytest.mark.slow
def test_a_named_pipe_as_cases_file_is_refused_at_once(seeded_repo: ExperienceRepository,
                                                       tmp_path: Path) -> None:
    pipe = tmp_path / "cases.yaml"
    os.mkfifo(pipe)  # no writer: reading it would wait for ever
    done = subprocess.run([sys.executable, "-m", "expgit", "-C", str(tmp_path / "repo"),
                           "eval", "--cases", str(pipe), "--llm", "openai", "--base-url",
                           "http://127.0.0.1:9/v1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 5, done.stderr
    assert f"{pipe}: a named pipe, not a regular file" in done.stderr


def test_train_rollouts_from_jsonl(run_cli: Any, serve: Any,
                                   seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    main = seeded_repo.main_commit()
    steps = training_steps(seeded_repo)[2:]  # recorded rollouts: no rollout calls
    server = serve(steps)
    rollouts = [Rollout(case=c, policy_snapshot_id="recorded", messages=[],
                        evaluation=RubricEvaluation(passed=False, score=0.0))
                for c in (BAGGAGE_CASE, PETS_CASE)]
    for rollout, question in zip(rollouts, ("gold member baggage?", "Can I bring my cat?"),
                                 strict=True):
        rollout.messages = [Message.text("user", question),
                            Message.text("assistant", "Sorry, I do not know.")]
    file = tmp_path / "rollouts.jsonl"
    file.write_text("".join(r.model_dump_json() + "\n" for r in rollouts))
    result = run_cli("-C", path, "train-rollouts", file, "--llm", "openai", "--base-url",
                     server.url, "--pr-body", tmp_path / "pr.md")
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert re.fullmatch(r"\[train_rollouts\] epoch=0 cases=2 accuracy=0\.00% passed=0/2 "
                        r"avg_reward=0\.000000 commits=1 errors=0", result.out.splitlines()[0])
    assert git(path, "rev-parse", "main").strip() == main
    assert (tmp_path / "pr.md").read_text().startswith("expgit: update 2 experiences")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rollouts[0].model_dump_json() + "\n" + json.dumps(
        {"policy_snapshot_id": "x", "messages": []}) + "\n")
    refused = run_cli("-C", path, "train-rollouts", bad, "--llm", "openai", "--base-url",
                      server.url)
    assert refused.code == 5 and "line 2: case: Field required" in refused.err


def test_eval_fails_when_every_rollout_fails(run_cli: Any, serve: Any,
                                             seeded_repo: ExperienceRepository,
                                             tmp_path: Path) -> None:
    server = serve([])  # every call is refused (HTTP 400)
    report = tmp_path / "report.json"
    result = run_cli("-C", tmp_path / "repo", "eval", "--cases",
                     cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE), "--llm",
                     "openai", "--base-url", server.url, "--report", report)
    assert result.code == 1
    assert result.out.startswith("[eval] epoch=0 cases=2 accuracy=0.00% passed=0/2")
    assert "eval epoch=0: all 2 rollouts failed; first: case" in result.err
    assert "HTTP 400" in result.err
    assert json.loads(report.read_text())["problems"]
    assert server.requests == 2


def test_rejected_edits_are_reported_with_their_reason(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """An edit the estimator refuses (a delete of a file that does not exist) makes no
    gradient; the run says why instead of a bare 'proposal: none'."""
    path = tmp_path / "repo"
    server = serve([Step("reflect", reflect_with(edit_reply("no-such-lesson", "delete", "")))])
    file = unanswered_rollouts(tmp_path / "rollouts.jsonl", BAGGAGE_CASE)
    report = tmp_path / "report.json"
    result = run_cli("-C", path, "train-rollouts", file, "--llm", "openai", "--base-url",
                     server.url, "--report", report)
    assert result.code == 0, result.err
    server.chat.assert_done()
    lines = result.out.splitlines()
    at = lines.index("rejected edits: 1")
    assert lines[at + 1].startswith(f"  case {BAGGAGE_CASE.name}: ")
    assert "no-such-lesson" in lines[at + 1]
    assert "proposal: none (no gradient was planned)" in lines
    rejected = json.loads(report.read_text())["phases"][0]["rejected_edits"]
    assert rejected == [lines[at + 1].strip()]


def test_the_example_recorded_rollouts_are_train_cases_with_a_failed_reply() -> None:
    """example_repo/rollouts/recorded.jsonl, which the README trains from, stays valid and
    in step with the training cases it was recorded on."""
    rollouts = load_rollouts(EXAMPLE / "rollouts" / "recorded.jsonl")
    cases = {c.name: c for c in load_cases(EXAMPLE / "cases" / "train.yaml")}
    assert len(rollouts) == 2
    for rollout in rollouts:
        assert rollout.case == cases[rollout.case.name]
        assert [m.role for m in rollout.messages] == ["user", "assistant"]
        assert rollout.evaluation is not None and rollout.evaluation.passed is False
