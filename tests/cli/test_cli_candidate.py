"""The measured effect of a proposal: candidate eval in ``train``, the regression gate
(train and ``apply --gate``), ``eval --at`` / ``--compare`` and ``--trials``; through the
real CLI against the strict scripted server (tests/script_server.py)."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file, hand_made_proposal
from conftest import fsck, git
from json_shapes import assert_shape
from scripted_pipeline import BAGGAGE_CASE, GOLD_RULE, PETS_CASE, estimate_for, lesson_bodies
from test_cli_train import training_steps

from expgit.errors import EXIT_GATE
from expgit.llm.scripted import ScriptError, Step
from expgit.store.repository import ExperienceRepository

GOLD = GOLD_RULE.strip("- \n")


def harmful(messages: list[dict[str, str]]) -> str:
    """The agent, which the proposal's new baggage rule confuses (a harmful lesson)."""
    if GOLD in messages[0]["content"]:
        return "Sorry, I do not know."
    return agent(messages)


def down(messages: list[dict[str, str]]) -> str:
    raise ScriptError("the model is down")  # answered as HTTP 400: the rollout fails


def steps_with(repo: ExperienceRepository, rollout: Any, extra: list[Any]) -> list[Step]:
    """The training steps with ``rollout`` as the agent, then ``extra`` eval rollouts."""
    steps = [Step(s.stage, rollout) if s.stage == "rollout" else s
             for s in training_steps(repo)]
    return [*steps, *(Step("rollout", reply) for reply in extra)]


def proposal_branches(path: Path) -> list[str]:
    return git(path, "for-each-ref", "--format=%(refname:lstrip=4)",
               "refs/heads/expgit/proposals/").split()


def train(run_cli: Any, path: Path, tmp_path: Path, url: str, *extra: str | Path) -> Any:
    return run_cli("-C", path, "train", "--cases",
                   cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE), "--llm", "openai",
                   "--base-url", url, "--report", tmp_path / "run.json", *extra)


@pytest.mark.slow
def test_candidate_eval_measures_the_proposal_and_the_pr_body_carries_it(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path, main = tmp_path / "repo", seeded_repo.main_commit()
    # baseline 2, training 2, candidate 2 rollouts; the final eval of the unchanged main
    # is the baseline's (it made 2 more rollouts before)
    server = serve(steps_with(seeded_repo, agent, [agent] * 4))
    held_out = cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE)
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases", held_out,
                   "--pr-body", tmp_path / "pr.md")
    assert result.code == 0, result.err
    server.chat.assert_done()
    data = json.loads((tmp_path / "run.json").read_text())
    assert_shape("train", data)
    [pid] = proposal_branches(path)  # the draft's branch is gone
    assert data["proposals"] == [pid] and git(path, "rev-parse", "main").strip() == main
    [candidate] = data["candidates"]
    assert candidate["proposal"] == pid
    assert (candidate["baseline"]["passed"], candidate["candidate"]["passed"]) == (1, 2)
    assert candidate["baseline"]["accuracy"] == 0.5 and candidate["delta"] == 0.5
    # paired differences (0, 1): mean 0.5, sd 0.7071, half-width 1.96 * 0.5
    low, high = candidate["delta_ci"]
    assert math.isclose(low, 0.5 - 1.959963984540054 * 0.5) and high == 1.0
    assert candidate["flipped"] == [{"case": "pet-in-cabin", "from": "fail", "to": "pass",
                                     "criteria": ["answers"]}]
    assert candidate["gate"] == {"checked": False, "passed": None,
                                 "reason": "no gate set: --gate, [train] gate"}
    assert [p["phase"] for p in data["phases"]] == ["baseline_eval", "train_epoch",
                                                    "candidate_eval", "final_eval"]
    assert f"candidate {pid}: baseline 1/2 (50.00%) -> candidate 2/2 (100.00%)" in result.out
    # the PR description: the figures, measured on the proposal's own tree
    message = git(path, "log", "-1", "--format=%B", f"expgit/proposals/{pid}")
    tree = git(path, "rev-parse", f"expgit/proposals/{pid}^{{tree}}").strip()
    assert f"Measured on tree `{tree}`" in message and "## Measured effect" in message
    assert "| candidate | 2/2 | 100.00% |" in message and "`pet-in-cabin`: fail -> pass" in message
    assert "Accuracy delta: +50.00pp" in message and "Gate: not checked" in message
    assert (tmp_path / "pr.md").read_text().split("\n", 2)[2] in message
    trailers = git(path, "interpret-trailers", "--parse", input=message).splitlines()
    gradients = [line.split(": ")[1] for line in trailers
                 if line.startswith("Expgit-Gradient: ")]
    # the pets edit came from a failed rollout: it predicted that case (and task) would
    # turn to pass, and the candidate eval saw it do so; the baggage one predicted nothing
    [pets] = [g for g in gradients if "pets-in-cabin" in git(path, "log", "-1",
                                                              "--format=%s", g)]
    ours = [t for t in trailers if t.startswith("Expgit-Predict")]
    assert len(gradients) == 2 and ours == [
        "Expgit-Predicts: pet-in-cabin", "Expgit-Predicts-Task: pets",
        f"Expgit-Prediction: {pets} hit"]
    assert f"| `{pets[:12]}` | `pets-in-cabin` | pet-in-cabin; any case of task pets | " \
        "pet-in-cabin fail->pass | **hit** (pet-in-cabin went fail -> pass) |" in message
    [check] = candidate["predictions"]
    assert (check["gradient"], check["verdict"], check["model"]) == (pets[:12], "hit",
                                                                      "gpt-4o-mini")
    assert candidate["unpredicted_flips"] == []
    # the models (issue 25): the agent's and the trainer's, the endpoint's host and port
    host = server.url.split("//")[1].split("/")[0]
    models = [t for t in trailers
              if t.startswith(("Expgit-Agent-Model", "Expgit-Trainer-Model", "Expgit-Endpoint"))]
    assert models == ["Expgit-Agent-Model: gpt-4o-mini", "Expgit-Trainer-Model: gpt-4o-mini",
                      f"Expgit-Endpoint: {host}"]
    assert "Measured with the agent model `gpt-4o-mini`." in message
    assert f"Models: agent `gpt-4o-mini`, trainer `gpt-4o-mini` at `{host}`." in message
    assert data["candidates"][0]["agent_model"] == "gpt-4o-mini"
    assert data["provenance"] == {"agent_model": "gpt-4o-mini", "trainer_model": "gpt-4o-mini",
                                  "endpoint": host, "model_sha256": None}
    for gradient in gradients:
        assert git(path, "log", "-1", "--format=%(trailers:key=Expgit-Agent-Model,"
                   "key=Expgit-Endpoint,valueonly)", gradient).split() == ["gpt-4o-mini", host]
    assert git(path, "rev-parse", f"expgit/proposals/{pid}^").strip() == main
    review = json.loads(run_cli("-C", path, "review", pid, "--json").out)
    assert review["gradient_commits"] == gradients and "Measured effect" in review["description"]
    fsck(path)


@pytest.mark.slow
def test_a_harmful_proposal_is_gated_in_apply_mode(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path, main = tmp_path / "repo", seeded_repo.main_commit()
    # eval: baggage only; baseline and candidate: main stays, so the final eval is the
    # baseline's measurement (no rollout)
    server = serve(steps_with(seeded_repo, harmful, [harmful] * 2))
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", BAGGAGE_CASE), "--mode", "apply", "--gate")
    assert result.code == EXIT_GATE, result.err
    server.chat.assert_done()
    [pid] = proposal_branches(path)
    assert f"gate: proposal {pid} lowered the eval: delta -100.00pp" in result.err
    assert git(path, "rev-parse", "main").strip() == main  # not applied ...
    listed = json.loads(run_cli("-C", path, "proposals", "--json").out)["proposals"]
    assert [p["id"] for p in listed] == [pid]  # ... and still open for review
    data = json.loads((tmp_path / "run.json").read_text())
    [candidate] = data["candidates"]
    assert candidate["gate"]["checked"] and candidate["gate"]["passed"] is False
    assert "1 cases went pass -> fail" in candidate["gate"]["reason"]
    assert candidate["flipped"] == [{"case": BAGGAGE_CASE.name, "from": "pass", "to": "fail",
                                     "criteria": ["three-free"]}]
    assert data["applied_commits"] == [] and data["main_after"] == main
    final = data["phases"][-1]
    assert (final["phase"], final["reused"]) == ("final_eval", "baseline_eval")
    assert final["rollouts"] == data["phases"][0]["rollouts"]


@pytest.mark.slow
def test_a_harmful_proposal_is_marked_in_propose_mode(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve(steps_with(seeded_repo, harmful, [harmful] * 3))
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", BAGGAGE_CASE), "--gate",
                   "--pr-body", tmp_path / "pr.md")
    assert result.code == EXIT_GATE, result.err
    [pid] = proposal_branches(path)
    assert "gate: FAILED" in result.out
    assert "Gate: **FAILED**" in (tmp_path / "pr.md").read_text()
    assert "Gate: **FAILED**" in git(path, "log", "-1", "--format=%B",
                                     f"expgit/proposals/{pid}")


@pytest.mark.slow
def test_candidate_eval_failing_half_way_never_passes_the_gate(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path, main = tmp_path / "repo", seeded_repo.main_commit()
    # baseline 2, training 2, candidate: one answered, one not; final 2
    server = serve(steps_with(seeded_repo, agent, [agent, agent, agent, down, agent, agent]))
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE),
                   "--mode", "apply", "--gate")
    assert result.code == EXIT_GATE, result.err
    [pid] = proposal_branches(path)
    assert f"gate: proposal {pid}: could not be decided: 1 eval" in result.err
    assert git(path, "rev-parse", "main").strip() == main
    [candidate] = json.loads((tmp_path / "run.json").read_text())["candidates"]
    assert candidate["gate"]["checked"] and candidate["gate"]["passed"] is None
    assert candidate["gate"]["reason"] == "could not be decided: 1 eval rollouts failed"


def test_train_trials_measure_pass_k(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    # baseline and candidate eval x 2 trials (the final eval is the baseline's)
    server = serve(steps_with(seeded_repo, agent, [agent] * 4))
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", PETS_CASE), "--trials", "2")
    assert result.code == 0, result.err
    server.chat.assert_done()
    [candidate] = json.loads((tmp_path / "run.json").read_text())["candidates"]
    assert candidate["baseline"]["pass_k"] == {"1": 0.0, "2": 0.0}
    assert candidate["candidate"]["pass_k"] == {"1": 1.0, "2": 1.0}
    assert (candidate["candidate"]["cases"], candidate["candidate"]["trials"]) == (1, 2)
    assert candidate["delta_ci"] == [-1.0, 1.0]  # one case: no paired interval
    message = git(path, "log", "-1", "--format=%B", f"expgit/proposals/{candidate['proposal']}")
    assert "| candidate | 2/2 | 100.00% | 34.2-100.0% | 1.000 | 1.000 | 1.000 |" in message
    assert "[baseline_eval] epoch=-1 cases=2 accuracy=0.00% passed=0/2 avg_reward=0.000000 " \
        "trials=2 pass^1=0.000 pass^2=0.000" in result.out


def test_remote_training_does_not_measure_and_refuses_the_gate(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    git(tmp_path, "init", "-q", "--bare", "shared.git")
    git(path, "remote", "add", "origin", str(tmp_path / "shared.git"))
    server = serve([])
    held_out = cases_file(tmp_path / "e.yaml", PETS_CASE)
    refused = train(run_cli, path, tmp_path, server.url, "--eval-cases", held_out,
                    "--remote", "origin", "--gate")
    assert refused.code == 2 and "--remote" in refused.err and server.requests == 0


def test_no_candidate_eval_skips_the_pass(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    # the baseline; the final eval of the unchanged main is its measurement, even with no
    # candidate stage
    server = serve(steps_with(seeded_repo, agent, [agent]))
    result = train(run_cli, tmp_path / "repo", tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", PETS_CASE), "--no-candidate-eval")
    assert result.code == 0, result.err
    server.chat.assert_done()
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["candidates"] == [] and data["phases"][-1]["reused"] == "baseline_eval"
    assert data["estimate"]["calls"] == data["usage"]["total"]["calls"]


def test_apply_gate_by_hand(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                            tmp_path: Path) -> None:
    path, main = tmp_path / "repo", seeded_repo.main_commit()
    pid = hand_made_proposal(run_cli, path, tmp_path)
    held_out = cases_file(tmp_path / "e.yaml", BAGGAGE_CASE)
    server = serve([Step("rollout", harmful)] * 4)
    gated = run_cli("-C", path, "apply", pid, "--gate", "--eval-cases", held_out,
                    "--llm", "openai", "--base-url", server.url)
    assert gated.code == EXIT_GATE and f"gate: proposal {pid} was not applied" in gated.err
    assert git(path, "rev-parse", "main").strip() == main
    lenient = run_cli("-C", path, "apply", pid, "--gate", "--eval-cases", held_out,
                      "--max-regressions", "1", "--min-delta", "-100", "--llm", "openai",
                      "--base-url", server.url, "--json")
    assert lenient.code == 0, lenient.err
    server.chat.assert_done()
    assert "expgit: gate passed" in lenient.err
    assert git(path, "rev-parse", "main").strip() == json.loads(lenient.out)["commit"] != main


@pytest.mark.slow
def test_eval_at_and_compare(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                             tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve(steps_with(seeded_repo, agent, [agent] * 2))  # train; then eval --at
    assert train(run_cli, path, tmp_path, server.url).code == 0
    [pid] = proposal_branches(path)
    held_out = cases_file(tmp_path / "e.yaml", PETS_CASE)
    at = run_cli("-C", path, "eval", "--cases", held_out, "--at", pid, "--llm", "openai",
                 "--base-url", server.url)
    assert at.code == 0, at.err
    assert at.out.startswith("[eval] epoch=0 cases=1 accuracy=100.00% passed=1/1")
    server = serve([Step("rollout", agent)] * 2)
    compared = run_cli("-C", path, "eval", "--cases", held_out, "--compare", "main", pid,
                       "--llm", "openai", "--base-url", server.url, "--json")
    assert compared.code == 0, compared.err
    server.chat.assert_done()
    data = json.loads(compared.out)
    assert_shape("eval", data)
    [candidate] = data["candidates"]
    assert candidate["proposal"] == pid and candidate["delta"] == 1.0
    assert [p["phase"] for p in data["phases"]] == ["eval", "candidate_eval"]
    assert candidate["flipped"][0]["to"] == "pass" and not candidate["gate"]["checked"]


def test_trials_report_pass_k(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                              tmp_path: Path) -> None:
    """Baggage passes 3 of 3 runs, pets 2 of 3 (a sampling model)."""
    lock, pets = threading.Lock(), [0]

    def sometimes(messages: list[dict[str, str]]) -> str:
        if "cat" not in messages[-1]["content"]:
            return agent(messages)
        with lock:
            pets[0] += 1
            return "Sorry." if pets[0] == 2 else "Yes: your cat may travel."

    server = serve([Step("rollout", sometimes)] * 6)
    result = run_cli("-C", tmp_path / "repo", "eval", "--cases",
                     cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE), "--trials",
                     "3", "--llm", "openai", "--base-url", server.url, "--report",
                     tmp_path / "r.json")
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert result.out.startswith("[eval] epoch=0 cases=6 accuracy=83.33% passed=5/6 "
                                 "avg_reward=0.833333 trials=3 pass^1=0.833 pass^3=0.500 "
                                 "ci=43.6-97.0%")
    data = json.loads((tmp_path / "r.json").read_text())
    assert_shape("eval", data)
    summary = data["phases"][0]["summary"]
    assert (summary["cases"], summary["trials"], summary["passed"]) == (2, 3, 5)
    # pass^1 = (3/3 + 2/3) / 2; pass^3 = (C(3,3)/C(3,3) + C(2,3)/C(3,3)) / 2 = 0.5
    assert math.isclose(summary["pass_k"]["1"], 5 / 6) and summary["pass_k"]["3"] == 0.5
    assert data["candidates"] == []


def test_trials_figures_by_hand() -> None:
    from expgit.core.domain import Rollout, RubricEvaluation
    from expgit.train.measurement.candidate import summarize, wilson

    def run(case: Any, passed: bool) -> Rollout:
        return Rollout(case=case, policy_snapshot_id="s",
                       evaluation=RubricEvaluation(passed=passed, score=float(passed)))

    rollouts = [run(BAGGAGE_CASE, True)] * 3 + [run(PETS_CASE, p) for p in (True, False, True)]
    summary = summarize(rollouts, 3)
    assert (summary.cases, summary.trials, summary.passed) == (2, 3, 5)
    assert math.isclose(summary.pass_k["1"], (1 + 2 / 3) / 2)
    assert summary.pass_k["3"] == 0.5
    p, n, z = 5 / 6, 6, 1.959963984540054
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert summary.ci == wilson(5, 6)
    assert math.isclose(summary.ci[0], centre - half) and math.isclose(summary.ci[1],
                                                                         centre + half)


def test_bad_inputs(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                    tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve([])
    cases = cases_file(tmp_path / "c.yaml", PETS_CASE)
    llm = ("--llm", "openai", "--base-url", server.url)
    no_eval = run_cli("-C", path, "train", "--cases", cases, "--gate", *llm)
    assert no_eval.code == 2 and "--gate needs held-out cases" in no_eval.err
    skipped = run_cli("-C", path, "train", "--cases", cases, "--eval-cases", cases,
                      "--gate", "--no-candidate-eval", *llm)
    assert skipped.code == 2
    zero = run_cli("-C", path, "eval", "--cases", cases, "--trials", "0", *llm)
    assert zero.code == 2 and "--trials" in zero.err
    unknown = run_cli("-C", path, "eval", "--cases", cases, "--at", "no-such-rev", *llm)
    assert unknown.code == 5 and "unknown revision 'no-such-rev'" in unknown.err
    both = run_cli("-C", path, "eval", "--cases", cases, "--at", "main", "--compare",
                   "main", "main", *llm)
    assert both.code == 2
    apply_gate = run_cli("-C", path, "apply", "0123456789ab", "--gate", *llm)
    assert apply_gate.code == 2 and "--gate needs held-out cases" in apply_gate.err
    assert server.requests == 0
    for bad in (no_eval, zero, unknown, apply_gate):
        assert len(bad.err.strip().splitlines()) <= 2  # one line and its hint


@pytest.mark.slow
def test_the_gate_from_expgit_toml(run_cli: Any, serve: Any, seeded_repo: ExperienceRepository,
                                   tmp_path: Path) -> None:
    """``[train] gate = true``: on where proposals are measured; --no-gate turns it off."""
    path = tmp_path / "repo"
    toml = path / "expgit.toml"
    toml.write_text(toml.read_text() + "\n[train]\ngate = true\ngate_max_regressions = 0\n")
    git(path, "commit", "-q", "-am", "gate every training run")
    repo = ExperienceRepository.open(path)
    held_out = cases_file(tmp_path / "e.yaml", BAGGAGE_CASE)
    server = serve(steps_with(repo, harmful, [harmful] * 3))
    gated = train(run_cli, path, tmp_path, server.url, "--eval-cases", held_out)
    assert gated.code == EXIT_GATE, gated.err
    # the same rollouts again: their trajectories are stored, so only the estimate calls
    estimate = estimate_for(lesson_bodies(repo))
    server = serve([Step("estimate", estimate) if s.stage == "reflect" else s
                    for s in steps_with(repo, harmful, [harmful] * 3)])
    off = train(run_cli, path, tmp_path, server.url, "--eval-cases", held_out, "--no-gate")
    assert off.code == 0, off.err
    [candidate] = json.loads((tmp_path / "run.json").read_text())["candidates"]
    assert candidate["gate"]["checked"] is False and candidate["delta"] == -1.0
