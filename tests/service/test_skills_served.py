"""A repository in the skills layout is read by ``context``, ``mcp``, ``env serve`` and
the in-process agents with the same retrieval and budgets as a flat one: each
experience's summary is its SKILL.md description, its body the SKILL.md body. The
example repository is seeded twice, flat and as skills (tests/skills_support.py), and
each reader must answer both alike."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from conftest import EXAMPLE, Driver, git
from scripted_pipeline import PETS_CASE
from skills_support import skills_seed
from test_env_service_example import knows_pets, serve_env
from test_mcp_server import BAGS, session_run

from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.remote.rollout_executor import RemoteRolloutExecutor
from expgit.retrieval.usage import read_usage
from expgit.store.repository import ExperienceRepository
from expgit.train.context import ExecutionContext

__all__ = ["serve_env"]  # the fixture, used below

PETS = "pets-in-cabin"
PETS_DESCRIPTION = ("Answers whether a pet may fly in the cabin. Use when a user asks to "
                    "bring a cat or a dog on board.")
PETS_SKILL = f"""---
name: {PETS}
description: {PETS_DESCRIPTION}
metadata:
  expgit-status: active
---
# Pets in the cabin

A cat or a small dog may travel in the cabin in a carrier under the seat.
"""
QUERIES = ["Can I cancel my basic economy ticket?",
           "how many checked bags are free for a gold member"]


@pytest.fixture
def both(tmp_path: Path) -> tuple[Path, Path]:
    """The example repository, flat and in the skills layout (the same experiences)."""
    init_repository(tmp_path / "flat", seed=EXAMPLE)
    init_repository(tmp_path / "repo", seed=skills_seed(EXAMPLE, tmp_path))
    return tmp_path / "flat", tmp_path / "repo"


def without_ids(data: dict[str, Any]) -> dict[str, Any]:
    """A context result without what names the commit and the blobs."""
    return {**{k: v for k, v in data.items() if k not in ("commit", "snapshot_id")},
            "experiences": [{k: v for k, v in e.items() if k != "blob"}
                            for e in data["experiences"]]}


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("budget", ["300", "700", "4000"])
@pytest.mark.slow
def test_context_selects_skills_as_flat_experiences(
        run_cli: Any, both: tuple[Path, Path], query: str, budget: str) -> None:
    flat, skills = both
    answers = []
    for path in (flat, skills):
        result = run_cli("-C", path, "context", query, "--token-budget", budget, "--json")
        assert result.code == 0, result.err
        answers.append(json.loads(result.out))
    assert answers[1]["experiences"], answers[1]
    assert without_ids(answers[0]) == without_ids(answers[1])  # ranks, reasons, tokens
    text = run_cli("-C", skills, "context", query, "--token-budget", budget).out
    assert text == run_cli("-C", flat, "context", query, "--token-budget", budget).out
    assert "expgit-status" not in text and "description:" not in text  # no front matter


@pytest.mark.slow
def test_mcp_serves_skills(both: tuple[Path, Path]) -> None:
    flat, skills = both
    served, reference = asyncio.run(session_run(skills)), asyncio.run(session_run(flat))
    assert without_ids(served["search"]) == without_ids(reference["search"])
    skill = git(skills, "show", f"main:skills/{BAGS}/SKILL.md")
    assert served["get"]["content"] == skill  # the SKILL.md as it is
    assert served["resource_text"] == skill

    def listed(index: dict[str, Any]) -> list[dict[str, Any]]:  # the file's own tokens aside
        return [{k: v for k, v in e.items() if k not in ("last_commit", "tokens")}
                for e in index["experiences"]]

    assert listed(served["index"]) == listed(reference["index"])
    assert served["report"]["created"] is True


def test_env_serve_rolls_out_with_the_skills_of_the_named_snapshot(
        serve_env: Any, run_cli: Any, both: tuple[Path, Path], tmp_path: Path) -> None:
    _, path = both
    repo = ExperienceRepository.open(path)
    before = repo.snapshot()
    d = Driver(run_cli, path, tmp_path / "scratch")
    d.apply(d.merge(d.propose(PETS, PETS_SKILL)))
    after = ExperienceRepository.open(path).snapshot()
    served = serve_env({"train": [PETS_CASE]}, [Step("rollout", knows_pets),
                                                Step("rollout", knows_pets)])
    executor = RemoteRolloutExecutor(served.url, repo_uri=str(path), poll_initial=0.01)
    old, new = (asyncio.run(executor.execute([PETS_CASE], snapshot,
                                             ExecutionContext(f"snap:{snapshot.id}")))[0]
                for snapshot in (before, after))
    served.chat.assert_done()
    assert (old.error, new.error) == (None, None)
    assert new.evaluation is not None and new.evaluation.passed
    assert old.evaluation is not None and not old.evaluation.passed
    used = [e.name for e in read_usage(new.metadata)]
    assert PETS in used and PETS not in [e.name for e in read_usage(old.metadata)]
    # the agent's system prompt holds the skill's description and body, not its front matter
    system = served.chat.calls[1][1][0]["content"]
    assert f"Summary: {PETS_DESCRIPTION}" in system
    assert "in a carrier under the seat" in system and "expgit-status" not in system


def test_the_in_process_agent_reads_skills(
        run_cli: Any, serve: Any, both: tuple[Path, Path], tmp_path: Path) -> None:
    """``expgit eval`` with the in-process agent: a pets skill on main makes the pets case
    pass, and nothing is written."""
    _, path = both
    d = Driver(run_cli, path, tmp_path / "scratch")
    d.apply(d.merge(d.propose(PETS, PETS_SKILL)))
    refs = git(path, "for-each-ref")
    server = serve([Step("rollout", agent)])
    result = run_cli("-C", path, "eval", "--cases", cases_file(tmp_path / "e.yaml", PETS_CASE),
                     "--llm", "openai", "--base-url", server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()
    assert result.out.splitlines()[0] == ("[eval] epoch=0 cases=1 accuracy=100.00% "
                                          "passed=1/1 avg_reward=1.000000")
    system = server.chat.calls[0][1][0]["content"]
    assert f'<experience name="{PETS}">' in system and "expgit-status" not in system
    assert git(path, "for-each-ref") == refs
