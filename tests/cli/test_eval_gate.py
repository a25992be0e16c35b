"""``expgit eval --compare A B --gate --comment FILE``, the pull request gate's command
(examples/ci/expgit-ci.sh runs it; tests/test_ci_examples.py runs the whole job): its bad
inputs, refused before any model call; and the warning when the agent model differs
from the one the proposal was made and measured with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from conftest import git
from json_shapes import assert_shape
from scripted_pipeline import PETS_CASE
from test_cli_candidate import proposal_branches, steps_with, train

from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository


def test_gate_and_comment_need_compare(run_cli: Any, serve: Any,
                                       seeded_repo: ExperienceRepository,
                                       tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve([])
    cases = cases_file(tmp_path / "c.yaml", PETS_CASE)
    llm = ("--llm", "openai", "--base-url", server.url)
    for flag, flags in (("--gate", ["--gate"]),
                        ("--comment", ["--comment", str(tmp_path / "gate.md")]),
                        ("--gate", ["--at", "main", "--gate"])):
        result = run_cli("-C", path, "eval", "--cases", cases, *flags, *llm)
        assert result.code == 2, result.err
        assert result.err == (f"expgit: error: {flag} needs --compare A B "
                              "(B is measured against A)\n")
    unknown = run_cli("-C", path, "eval", "--cases", cases, "--compare", "main", "nope",
                      "--gate", "--comment", tmp_path / "gate.md", *llm)
    assert unknown.code == 5 and "unknown revision 'nope'" in unknown.err
    assert server.requests == 0 and not (tmp_path / "gate.md").exists()


@pytest.mark.slow
def test_eval_warns_when_the_agent_model_differs_from_the_proposals(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """A proposal trained and measured with gpt-4o-mini, measured again with another
    model, also after a reviewer's commit on top of it: one warning line on stderr and
    in the JSON; with the same model, none."""
    path = tmp_path / "repo"
    server = serve(steps_with(seeded_repo, agent, []))
    assert train(run_cli, path, tmp_path, server.url).code == 0
    [pid] = proposal_branches(path)
    held_out = cases_file(tmp_path / "e.yaml", PETS_CASE)
    git(path, "checkout", "-q", "--detach", f"expgit/proposals/{pid}")
    git(path, "commit", "-q", "--allow-empty", "-m", "a reviewer's edit")
    edit = git(path, "rev-parse", "HEAD").strip()
    git(path, "checkout", "-q", "main")

    server = serve([Step("rollout", agent)] * 4)
    llm = ("--llm", "openai", "--base-url", server.url)
    other = run_cli("-C", path, "eval", "--cases", held_out, "--compare", "main", edit,
                    *llm, "--model", "other-model-1", "--json")
    assert other.code == 0, other.err
    warning = (f"{pid} was made and measured with the agent model gpt-4o-mini, this eval "
               "runs other-model-1: lessons learned on one model transfer poorly to another")
    assert f"expgit: warning: {warning}\n" in other.err
    data = json.loads(other.out)
    assert_shape("eval", data)
    assert data["warnings"] == [warning]
    assert data["candidates"][0]["agent_model"] == data["provenance"]["agent_model"] \
        == "other-model-1"
    same = run_cli("-C", path, "eval", "--cases", held_out, "--compare", "main", pid,
                   *llm, "--json")
    assert same.code == 0, same.err
    server.chat.assert_done()
    assert "warning" not in same.err and json.loads(same.out)["warnings"] == []

    server = serve([Step("rollout", agent)] * 2)  # apply --gate: main, then the proposal
    applied = run_cli("-C", path, "apply", pid, "--gate", "--eval-cases", held_out,
                      "--llm", "openai", "--base-url", server.url, "--model",
                      "other-model-1", "--json")
    assert applied.code == 0, applied.err
    server.chat.assert_done()
    assert json.loads(applied.out)["warnings"] == [warning]
    # applied, it is no proposal any more: main is measured without the warning
    server = serve([Step("rollout", agent)])
    on_main = run_cli("-C", path, "eval", "--cases", held_out, "--at", "main", "--llm",
                      "openai", "--base-url", server.url, "--model", "other-model-1")
    assert on_main.code == 0, on_main.err
    assert "warning" not in on_main.err
