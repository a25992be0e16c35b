"""A skill's own evals (``<skill>/evals/evals.json``, the Agent Skills format): ``eval
--skill`` with and without the skill (benchmark.json in skill-creator's shape, the lift),
the gate on a proposal that makes the skill worse on them, ``train --cases skill:NAME``,
and malformed evals refused (exit 5, naming the file and the case) before any call.
Through the real CLI against the strict scripted server (tests/script_server.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from json_shapes import assert_shape
from scripted_pipeline import edit_reply, reflect_with, skill_reply

from expgit.errors import EXIT_GATE
from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

SKILL = "refund-rules"
OTHER = "fix-flaky-tests"
RULE = "Refund to the original payment method within 14 days."
SKILL_MD = f"""---
name: {SKILL}
description: "Use when: a customer asks how a cancelled booking is refunded"
---
# Refunds

{RULE}
"""
OTHER_MD = f"""---
name: {OTHER}
description: "Use when: a test passes and fails on reruns without a code change"
---
Rerun the test alone, then with the suite.
"""
EVALS = {"skill_name": SKILL, "evals": [
    {"id": 1, "prompt": "My flight was cancelled. How is my refund paid?",
     "expected_output": "The refund goes to the original payment method.",
     "files": ["evals/files/booking.txt"],
     "assertions": ['mentions "original payment method"', "matches /14 days/"]},
    {"id": "late", "prompt": "A cancelled booking: how long does the refund take?",
     "expected_output": "Within 14 days.",
     "assertions": ['contains "14 days"', 'does not contain "voucher"',
                    {"type": "regex", "pattern": "refund", "ignore_case": True}]},
]}
BOOKING = "booking ZFA04Y, paid by card\n"


def seed(tmp: Path, evals: Any = EVALS) -> Path:
    folder = tmp / "seed"
    (folder / "skills" / SKILL / "evals" / "files").mkdir(parents=True)
    (folder / "skills" / OTHER).mkdir(parents=True)
    (folder / "expgit.toml").write_text(
        'experiences_root = "skills"\nlayout = "skills"\ntoken_budget = 2000\n')
    (folder / "skills" / SKILL / "SKILL.md").write_text(SKILL_MD)
    (folder / "skills" / OTHER / "SKILL.md").write_text(OTHER_MD)
    (folder / "skills" / SKILL / "evals" / "evals.json").write_text(
        evals if isinstance(evals, str) else json.dumps(evals, indent=2))
    (folder / "skills" / SKILL / "evals" / "files" / "booking.txt").write_text(BOOKING)
    return folder


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    init_repository(tmp_path / "repo", seed=seed(tmp_path))
    return tmp_path / "repo"


def agent(messages: list[dict[str, str]]) -> str:
    """Right only when the skill's rule is in its context (the system prompt)."""
    if RULE in messages[0]["content"]:
        return "It goes back to the original payment method, within 14 days of the refund."
    return "You will get a voucher for the refund."


def llm(url: str) -> tuple[str, ...]:
    return ("--llm", "openai", "--base-url", url)


def test_eval_skill_shows_the_lift_and_writes_skill_creators_benchmark(
        run_cli: Any, serve: Any, repo_path: Path, tmp_path: Path) -> None:
    runs = 2
    server = serve([Step("rollout", agent)] * (2 * runs * 2))  # 2 cases, K runs, 2 configs
    out = tmp_path / "bench"
    main_before = git(repo_path, "rev-parse", "main").strip()
    refs_before = git(repo_path, "for-each-ref")
    result = run_cli("-C", repo_path, "eval", "--skill", SKILL, "--runs", str(runs),
                     "--out", out, *llm(server.url))
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert (f"skill {SKILL}: with_skill 4/4 (100.00%) vs without_skill 0/4 (0.00%), "
            "lift +100.00pp [+100.00, +100.00]") in result.out
    assert "calls: 8 (8 rollouts: 2 cases x 2 runs x 2; 0 judge)" in result.out
    # the eval's files reach the agent with the prompt; without the skill it is not shown
    prompts = [call[1] for call in server.chat.calls]
    assert sum(BOOKING.strip() in p[-1]["content"] for p in prompts) == 2 * runs
    assert sum(RULE in p[0]["content"] for p in prompts) == 2 * runs
    # nothing written to the repository
    assert git(repo_path, "rev-parse", "main").strip() == main_before
    assert git(repo_path, "for-each-ref") == refs_before

    data = json.loads((out / "benchmark.json").read_text())
    assert set(data) >= {"metadata", "runs", "run_summary", "notes"}
    assert set(data["metadata"]) >= {"skill_name", "skill_path", "executor_model",
                                     "analyzer_model", "timestamp", "evals_run",
                                     "runs_per_configuration"}
    assert data["metadata"]["skill_name"] == SKILL
    assert data["metadata"]["evals_run"] == [1, "late"]
    assert data["metadata"]["runs_per_configuration"] == runs
    assert len(data["runs"]) == 8
    for run in data["runs"]:
        assert set(run) >= {"eval_id", "eval_name", "configuration", "run_number",
                            "result", "expectations", "notes"}
        assert set(run["result"]) == {"pass_rate", "passed", "failed", "total",
                                      "time_seconds", "tokens", "tool_calls", "errors"}
        for expectation in run["expectations"]:
            assert set(expectation) == {"text", "passed", "evidence"}
    assert {r["configuration"] for r in data["runs"]} == {"with_skill", "without_skill"}
    assert sorted(r["run_number"] for r in data["runs"] if r["eval_id"] == 1
                  and r["configuration"] == "with_skill") == [1, 2]
    summary = data["run_summary"]
    assert list(summary) == ["with_skill", "without_skill", "delta"]
    for config in ("with_skill", "without_skill"):
        for metric in ("pass_rate", "time_seconds", "tokens"):
            assert set(summary[config][metric]) == {"mean", "stddev", "min", "max"}
    assert summary["with_skill"]["pass_rate"]["mean"] == 1.0
    # without the skill: "voucher" fails all but the `refund` regex of case "late"
    # (1 of 3 there, 0 of 2 in case 1): mean of (0, 0, 1/3, 1/3)
    assert summary["without_skill"]["pass_rate"]["mean"] == pytest.approx(1 / 6, abs=1e-4)
    assert summary["delta"]["pass_rate"] == "+0.83"
    assert set(summary["delta"]) == {"pass_rate", "time_seconds", "tokens"}
    assert data["lift"]["delta"] == 1.0

    server = serve([Step("rollout", agent)] * 4)
    as_json = run_cli("-C", repo_path, "eval", "--skill", SKILL, "--runs", "1", "--out",
                      out, "--json", *llm(server.url))
    assert as_json.code == 0, as_json.err
    assert_shape("eval", json.loads(as_json.out))
    lift = json.loads(as_json.out)["skill_lift"]
    assert (lift["baseline_config"], lift["candidate_config"]) == ("without_skill",
                                                                  "with_skill")
    assert lift["delta"] == 1.0 and lift["evals_file"] == f"skills/{SKILL}/evals/evals.json"


def test_an_assertion_in_words_goes_to_the_judge_and_is_counted(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    evals = {"skill_name": SKILL, "evals": [
        {"id": 1, "prompt": "How is a cancelled booking refunded?",
         "expected_output": "To the original payment method.",
         "assertions": ["The answer names the original payment method"]}]}
    init_repository(tmp_path / "repo", seed=seed(tmp_path, evals))
    verdict = json.dumps({"passed": True, "score": 1.0, "reason": "named"})
    server = serve([Step("rollout", agent)] * 2 + [Step("judge", verdict)] * 2)
    result = run_cli("-C", tmp_path / "repo", "eval", "--skill", SKILL, "--runs", "1",
                     "--out", tmp_path / "b", *llm(server.url))
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert "calls: 4 (2 rollouts: 1 cases x 1 runs x 2; 2 judge)" in result.out
    judged = [c[1] for c in server.chat.calls if c[0] == "judge"]
    assert all("The answer names the original payment method" in str(m) for m in judged)


@pytest.mark.parametrize(("evals", "message"), [
    ("{not json", "evals.json: not valid JSON"),
    ({"evals": []}, "evals.json: skill_name: Field required"),
    ({"skill_name": SKILL, "evals": [{"id": 7, "prompt": "p"}]},
     "evals.json: case 0 (id 7): expected_output: Field required"),
    ({"skill_name": SKILL, "evals": [
        {"id": 1, "prompt": "p", "expected_output": "x"},
        {"id": 2, "prompt": "p", "expected_output": "x",
         "assertions": [{"type": "sounds_right", "value": "x"}]}]},
     "evals.json: case 1 (id 2): assertions[1]: an assertion of an unknown form "
     "'sounds_right'"),
    ({"skill_name": SKILL, "evals": [
        {"id": 3, "prompt": "p", "expected_output": "x", "assertions": ["matches /(/"]}]},
     "evals.json: case 0 (id 3): assertions[1]: assertion 'matches /(/'"),
    ({"skill_name": SKILL, "evals": [
        {"id": 4, "prompt": "p", "expected_output": "x",
         "files": ["../fix-flaky-tests/SKILL.md"]}]},
     "evals.json: case 0 (id 4): files: '../fix-flaky-tests/SKILL.md' reaches outside "
     "the skill folder skills/refund-rules/"),
    ({"skill_name": SKILL, "evals": [
        {"id": 5, "prompt": "p", "expected_output": "x", "files": ["/etc/passwd"]}]},
     "evals.json: case 0 (id 5): files: '/etc/passwd' reaches outside"),
])
@pytest.mark.slow
def test_malformed_evals_stop_with_exit_5_naming_file_and_case(
        run_cli: Any, serve: Any, tmp_path: Path, evals: Any, message: str) -> None:
    init_repository(tmp_path / "repo", seed=seed(tmp_path, evals))
    path = tmp_path / "repo"
    server = serve([])
    refs = git(path, "for-each-ref")
    for args in (("eval", "--skill", SKILL, "--out", tmp_path / "b"),
                 ("train", "--cases", f"skill:{SKILL}")):
        result = run_cli("-C", path, *args, *llm(server.url))
        assert result.code == 5, (args, result.err)
        assert f"skills/{SKILL}/evals/{message}" in result.err, result.err
    assert server.requests == 0
    assert not (tmp_path / "b").exists()
    assert git(path, "for-each-ref") == refs


def test_eval_skill_bad_usage(run_cli: Any, serve: Any, repo_path: Path,
                              tmp_path: Path) -> None:
    server = serve([])
    unknown = run_cli("-C", repo_path, "eval", "--skill", "nope", *llm(server.url))
    assert unknown.code == 5 and "no skill 'nope'" in unknown.err
    no_evals = run_cli("-C", repo_path, "eval", "--skill", OTHER, *llm(server.url))
    assert no_evals.code == 5 and f"skill {OTHER!r} has no evals/evals.json" in no_evals.err
    runs_alone = run_cli("-C", repo_path, "eval", "--cases", tmp_path / "c.yaml",
                         "--runs", "2", *llm(server.url))
    assert runs_alone.code == 2 and "--runs needs --skill NAME" in runs_alone.err
    both = run_cli("-C", repo_path, "eval", "--skill", SKILL, "--compare", "main", "main",
                   *llm(server.url))
    assert both.code == 2 and "drop --compare" in both.err
    assert server.requests == 0


def harmful_edit(path: Path, run_cli: Any, tmp_path: Path) -> str:
    """A proposal that drops the skill's rule (a harmful edit of the skill)."""
    content = tmp_path / "SKILL.md"
    content.write_text(SKILL_MD.replace(RULE, "Offer a voucher first."))
    assert run_cli("-C", path, "propose", SKILL, "--content-file", content,
                   "--rationale", "vouchers").code == 0
    merged = run_cli("-C", path, "merge", "--all")
    assert merged.code == 0, merged.err
    return str(merged.out.strip())


def held_out_cases(path: Path) -> Path:
    """One held-out case that every answer passes: the gate's verdict comes from the
    skill's own evals."""
    path.write_text(json.dumps({"cases": [{
        "name": "flaky", "input": "a flaky test?",
        "rubric": {"criteria": [{"name": "any", "check": {"type": "not_contains",
                                                          "value": "zzz"}}]}}]}))
    return path


def neutral(messages: list[dict[str, str]]) -> str:
    return "Sorry, I do not know."


def test_apply_gate_refuses_a_skill_edit_that_does_worse_on_its_own_evals(
        run_cli: Any, serve: Any, repo_path: Path, tmp_path: Path) -> None:
    pid = harmful_edit(repo_path, run_cli, tmp_path)
    held_out = held_out_cases(tmp_path / "e.yaml")
    main = git(repo_path, "rev-parse", "main").strip()
    # held-out: main and the proposal (both pass); skill evals: old then new, 2 cases each
    server = serve([Step("rollout", neutral)] * 2 + [Step("rollout", agent)] * 4)
    result = run_cli("-C", repo_path, "apply", pid, "--gate", "--eval-cases", held_out,
                     *llm(server.url))
    assert result.code == EXIT_GATE, result.err
    server.chat.assert_done()
    assert f"skill {SKILL} does worse on its own evals (skills/{SKILL}/evals/evals.json): " \
           "-100.00pp against old_skill" in result.err
    assert git(repo_path, "rev-parse", "main").strip() == main


def training_steps(body: str) -> list[Step]:
    """One training batch on the skill's two evals: rollouts (the agent without the rule
    fails), two reflections editing the skill, a merge."""
    reflect = reflect_with(skill_reply(edit_reply(SKILL, "update", body)))
    merge = json.dumps({"items": [skill_reply(edit_reply(SKILL, "upsert", body,
                                                         gradient_ids=[]))]})
    return [*[Step("rollout", neutral)] * 2, *[Step("reflect", reflect)] * 2,
            Step("merge", merge)]



def test_train_on_a_skills_evals_and_the_gate_refuses_the_harmful_edit(
        run_cli: Any, serve: Any, repo_path: Path, tmp_path: Path) -> None:
    """``train --cases skill:NAME`` trains on the skill's evals; the proposal (which
    drops the skill's rule) is measured old against new on those evals in its candidate
    eval, the PR body and the HTML report show the lift, and --gate refuses it."""
    repo = ExperienceRepository.open(repo_path)
    body = "# Refunds\n\nOffer a voucher first.\n"
    held_out = held_out_cases(tmp_path / "e.yaml")
    steps = [*training_steps(body),
             # baseline, candidate (held-out); skill evals old (2), new (2); the final
             # eval of the unchanged main is the baseline's
             Step("rollout", neutral), Step("rollout", neutral),
             *[Step("rollout", agent)] * 4]
    server = serve(steps)
    main = repo.main_commit()
    result = run_cli("-C", repo_path, "train", "--cases", f"skill:{SKILL}", "--eval-cases",
                     held_out, "--gate", "--pr-body", tmp_path / "pr.md",
                     "--report", tmp_path / "run.json", "--report-html",
                     tmp_path / "run.html", *llm(server.url))
    assert result.code == EXIT_GATE, result.err
    server.chat.assert_done()
    data = json.loads((tmp_path / "run.json").read_text())
    [candidate] = data["candidates"]
    [lift] = candidate["skill_lifts"]
    assert (lift["skill"], lift["baseline_config"], lift["candidate_config"]) == (
        SKILL, "old_skill", "with_skill")
    assert (lift["baseline"]["passed"], lift["candidate"]["passed"], lift["delta"]) == (
        2, 0, -1.0)
    assert candidate["gate"]["passed"] is False
    assert f"skill {SKILL} does worse on its own evals" in candidate["gate"]["reason"]
    pr = (tmp_path / "pr.md").read_text()
    assert "Changed skills on their own evals" in pr
    assert f"| `{SKILL}` | `skills/{SKILL}/evals/evals.json` | old_skill | 2/2 | " \
           "with_skill | 0/2 | -100.00pp |" in pr
    html = (tmp_path / "run.html").read_text()
    assert f'<tr data-skill="{SKILL}">' in html and "-100.00pp" in html
    assert repo.main_commit() == main


def test_eval_compare_gate_refuses_a_skill_edit_that_does_worse_on_its_evals(
        run_cli: Any, serve: Any, repo_path: Path, tmp_path: Path) -> None:
    """The pull request gate (``eval --compare A B --gate --comment``): B changes the
    skill, its evals run on A and B, and the comment shows the lift."""
    pid = harmful_edit(repo_path, run_cli, tmp_path)
    held_out = held_out_cases(tmp_path / "e.yaml")
    server = serve([Step("rollout", neutral)] * 2 + [Step("rollout", agent)] * 4)
    result = run_cli("-C", repo_path, "eval", "--cases", held_out, "--compare", "main", pid,
                     "--gate", "--comment", tmp_path / "gate.md", "--json",
                     *llm(server.url))
    assert result.code == EXIT_GATE, result.err
    server.chat.assert_done()
    assert_shape("eval", json.loads(result.out))
    [lift] = json.loads(result.out)["candidates"][0]["skill_lifts"]
    assert (lift["baseline_config"], lift["delta"]) == ("old_skill", -1.0)
    comment = (tmp_path / "gate.md").read_text()
    assert f"| `{SKILL}` | `skills/{SKILL}/evals/evals.json` | old_skill | 2/2 |" in comment
    assert "does worse on its own evals" in comment


def test_eval_skill_report_and_html(run_cli: Any, serve: Any, repo_path: Path,
                                    tmp_path: Path) -> None:
    server = serve([Step("rollout", agent)] * 4)
    result = run_cli("-C", repo_path, "eval", "--skill", SKILL, "--runs", "1", "--out",
                     tmp_path / "b", "--report", tmp_path / "run.json", "--report-html",
                     tmp_path / "run.html", *llm(server.url))
    assert result.code == 0, result.err
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["skill_lift"]["delta"] == 1.0
    assert data["benchmark"] == str(tmp_path / "b" / "benchmark.json")
    html = (tmp_path / "run.html").read_text()
    assert "<h2>Skill lift</h2>" in html and f'<tr data-skill="{SKILL}">' in html
