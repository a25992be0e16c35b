"""Several trainers, one shared repository: two ``expgit train-rollouts --remote origin``
processes in two clones of one bare repository, 20 rollouts each, at the same time,
each against its own local scripted model (tests/script_server.py). Afterwards the
server holds every trajectory, gradient and proposal of both, ``git fsck`` is clean,
and the server's reflogs show that no update was forced."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_only_fast_forwards, fsck, git, repo_state, run_expgit, shared_server
from scripted_pipeline import GOLD_RULE, combined, edit_reply

from expgit.core.checks import ContainsCheck
from expgit.core.domain import Case, Message, Rollout, Rubric, RubricCriterion, RubricEvaluation
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

ROLLOUTS = 20
BAGGAGE = "checked-baggage-allowance"
TAG = re.compile(r"ticket (\d+-\d+)")


def recorded(trainer: int, path: Path, count: int = ROLLOUTS) -> Path:
    """``count`` failed baggage rollouts, each with a ticket of its own (so every
    trajectory of both trainers differs)."""
    lines = []
    for i in range(count):
        tag = f"{trainer}-{i}"
        case = Case(name=f"baggage-{tag}", task_signature="checked-baggage",
                    input={"user_query": f"ticket {tag}: gold member baggage?"},
                    rubric=Rubric(name="baggage", criteria=[RubricCriterion(
                        name="three-free", check=ContainsCheck(value="3 free"))]))
        lines.append(Rollout(
            case=case, policy_snapshot_id="recorded",
            messages=[Message.text("user", f"ticket {tag}: gold member baggage?"),
                      Message.text("assistant", "Sorry, I do not know.")],
            evaluation=RubricEvaluation(passed=False, score=0.0)).model_dump_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def script(repo: ExperienceRepository, count: int = ROLLOUTS) -> list[Step]:
    """One reflection per rollout (an update of the baggage rules naming
    its ticket), and a merge per chunk of 16 gradients."""
    baggage = repo.snapshot().get(BAGGAGE)
    assert baggage is not None
    body = baggage.experience.body

    def tag(messages: list[dict[str, str]]) -> str:
        found = TAG.search(messages[-1]["content"])
        assert found, "the prompt names no ticket"
        return found.group(1)

    def analyze(messages: list[dict[str, str]]) -> str:
        anchor = f"ticket {tag(messages)} checked baggage"
        return json.dumps({"title": f"Lesson about {anchor}", "outcome": "failure",
                           "summary": f"The agent got {anchor} wrong.",
                           "key_steps": ["read the question"], "mistakes": ["guessed"],
                           "lessons": [f"look up {anchor}"], "retrieval_anchor": anchor})

    def estimate(messages: list[dict[str, str]]) -> str:
        rule = f"- For ticket {tag(messages)}: a gold member in economy has 3 free bags.\n"
        return json.dumps({"edits": [edit_reply(BAGGAGE, "update", body + rule)]})

    merge = json.dumps({"items": [edit_reply(BAGGAGE, "upsert", body + GOLD_RULE,
                                             gradient_ids=[])]})
    chunks = -(-count // repo.settings.train.gradients_per_chunk)
    return ([Step("reflect", combined(analyze, estimate)) for _ in range(count)]
            + [Step("merge", merge) for _ in range(chunks)])


def names(path: Path, prefix: str) -> dict[str, str]:
    text = git(path, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split() for line in text.splitlines())


@pytest.mark.slow
def test_two_trainers_push_to_one_bare_repository_at_the_same_time(
        serve: Any, tmp_path: Path) -> None:
    server, clones = shared_server(tmp_path, 2)
    repos = [ExperienceRepository.open(path) for path in clones]
    models = [serve(script(repo)) for repo in repos]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "expgit", "-C", str(path), "train-rollouts",
         str(recorded(n, tmp_path / f"rollouts-{n}.jsonl")), "--remote", "origin",
         "--llm", "openai", "--base-url", model.url, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n, (path, model) in enumerate(zip(clones, models, strict=True), 1)]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    for model in models:
        model.chat.assert_done()
    reports = [json.loads(out)["remote"] for out, _ in outputs]

    trajectories = {name for name in git(server, "ls-tree", "-r", "--name-only",
                                         "expgit/trajectories:trajectories").split()
                    if name.endswith(".md")}  # each with its transcript beside it
    assert len(trajectories) == 2 * ROLLOUTS
    on_server = {**names(server, "refs/heads/expgit/"), **names(server, "refs/expgit/")}
    for path, report in zip(clones, reports, strict=True):
        mine = {name for name in git(path, "ls-tree", "-r", "--name-only",
                                     "expgit/trajectories:trajectories").split()
                if name.endswith(".md")}
        assert len(mine) >= ROLLOUTS and mine <= trajectories
        gradients = names(path, "refs/heads/expgit/gradients/")
        proposals = names(path, "refs/heads/expgit/proposals/")
        assert len(gradients) == ROLLOUTS and len(proposals) == 1
        assert {**gradients, **proposals}.items() <= on_server.items()
        assert report["pushed"]["gradients"] == ROLLOUTS
        assert report["pushed"]["proposals"] == 1 and report["errors"] == []
    # both built the trajectories branch on their own: the later push replayed its own
    assert sum(r["replayed"] for r in reports) >= 1
    assert git(server, "rev-parse", "main") == git(clones[0], "rev-parse", "main")
    fsck(server)
    assert assert_only_fast_forwards(server) >= 3


@pytest.mark.slow
def test_an_unknown_remote_is_refused_before_any_call_or_write(
        serve: Any, tmp_path: Path) -> None:
    _, (path,) = shared_server(tmp_path, 1)
    model = serve([])
    before = repo_state(path)
    result = run_expgit("-C", path, "train-rollouts", recorded(1, tmp_path / "r.jsonl"),
                        "--remote", "upstream", "--llm", "openai", "--base-url", model.url)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "expgit: error: unknown remote 'upstream': this repository has no such remote "
        "(see `git remote -v` for its remotes)"]
    assert model.requests == 0 and repo_state(path) == before


@pytest.mark.slow
def test_apply_mode_applies_to_the_remote_main_and_pushes_the_closed_refs(
        serve: Any, tmp_path: Path) -> None:
    server, (path,) = shared_server(tmp_path, 1)
    repo = ExperienceRepository.open(path)
    model = serve(script(repo, 3))
    before = git(server, "rev-parse", "main").strip()
    result = run_expgit("-C", path, "train-rollouts", recorded(1, tmp_path / "r.jsonl", 3),
                        "--remote", "origin", "--mode", "apply", "--llm", "openai",
                        "--base-url", model.url, "--json")
    assert result.returncode == 0, result.stderr
    model.chat.assert_done()
    report = json.loads(result.stdout)
    (applied,) = report["applied_commits"]
    (pid,) = report["proposals"]
    assert git(server, "rev-parse", "main").strip() == applied != before
    assert git(path, "rev-parse", "main").strip() == applied  # the clone followed
    assert git(server, "rev-parse", f"refs/expgit/applied/proposals/{pid}").strip()
    assert len(names(server, "refs/expgit/applied/gradients/")) == 3
    assert names(server, "refs/heads/expgit/gradients/") == {}
    assert report["remote"]["pushed"] == {"gradients": 3, "proposals": 1,
                                          "trajectories": 1, "outcomes": 0, "sessions": 0}
    fsck(server)
    assert_only_fast_forwards(server)


@pytest.mark.slow
def test_a_push_that_does_not_land_exits_1_and_keeps_everything_here(
        serve: Any, tmp_path: Path) -> None:
    server, (path,) = shared_server(tmp_path, 1)
    model = serve(script(ExperienceRepository.open(path), 1))
    server.rename(tmp_path / "away.git")
    result = run_expgit("-C", path, "train-rollouts", recorded(1, tmp_path / "r.jsonl", 1),
                        "--remote", "origin", "--llm", "openai", "--base-url", model.url)
    assert result.returncode == 1
    assert "expgit: error: push to 'origin' failed: expgit/trajectories:" in result.stderr
    assert "not pushed to origin: gradients and proposals:" in result.stdout
    assert len(names(path, "refs/heads/expgit/gradients/")) == 1
    assert len(names(path, "refs/heads/expgit/proposals/")) == 1
