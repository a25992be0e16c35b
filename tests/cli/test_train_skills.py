"""``expgit train`` on a repository in the skills layout (``layout = "skills"``): the
prompts describe the Agent Skills format, the model writes ``description``, and the
proposal's SKILL.md files pass the spec's reference validator; an edit of a skill keeps
the other files of its folder, a new lesson is a new skill folder. Driven through the
real CLI against the strict scripted server (tests/script_server.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file, unanswered_rollouts
from conftest import EXAMPLE, fsck, git
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_BODY,
    PETS_CASE,
    edit_reply,
    lesson_bodies,
    merge_of,
    reflect_for,
    reflect_with,
    skill_reply,
)
from skills_support import (
    BAGGAGE_REFERENCE,
    BAGGAGE_REFERENCE_BYTES,
    agentskills_validate,
    skills_seed,
)

from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.store.format.experience import parse_experience
from expgit.store.repository import ExperienceRepository

PETS_DESCRIPTION = ("Answers whether a pet may travel in the cabin. Use when a user asks "
                    "to bring a cat or a dog on board.")
Reply = Callable[[list[dict[str, str]]], str]


@pytest.fixture
def skills_repo(tmp_path: Path) -> ExperienceRepository:
    init_repository(tmp_path / "repo", seed=skills_seed(EXAMPLE, tmp_path))
    return ExperienceRepository.open(tmp_path / "repo")


def as_skills(edit: dict[str, Any]) -> dict[str, Any]:
    """An edit (or merge item) of the flat reply format in the skills one: its summary
    is named ``description``; the new pets skill gets a description with its trigger."""
    return skill_reply(edit, PETS_DESCRIPTION if edit["name"] == "pets-in-cabin" else None)


def skills_reply(reply: Reply | str, key: str, prompts: list[str]) -> Reply:
    """``reply`` with its edits (``key``: "edits" or "items") in the skills format; each
    prompt it answers (system and user) is kept in ``prompts``."""
    def answer(messages: list[dict[str, str]]) -> str:
        prompts.append("\n".join(m["content"] for m in messages))
        data = json.loads(reply if isinstance(reply, str) else reply(messages))
        return json.dumps({**data, key: [as_skills(e) for e in data[key]]})
    return answer


@pytest.mark.slow
def test_train_writes_skills_that_pass_the_reference_validator(
        run_cli: Any, serve: Any, skills_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    main = skills_repo.main_commit()
    bodies = lesson_bodies(skills_repo)
    reflects: list[str] = []
    merges: list[str] = []
    reflect = skills_reply(reflect_for(bodies), "edits", reflects)
    server = serve([Step("rollout", agent), Step("rollout", agent), Step("reflect", reflect),
                    Step("reflect", reflect),
                    Step("merge", skills_reply(merge_of(bodies), "items", merges))])
    report = tmp_path / "report.json"
    result = run_cli("-C", path, "train", "--cases",
                     cases_file(tmp_path / "train.yaml", BAGGAGE_CASE, PETS_CASE),
                     "--mode", "propose", "--llm", "openai", "--base-url", server.url,
                     "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []  # the strict script: every reply valid at once
    server.chat.assert_done()
    assert json.loads(report.read_text())["phases"][0]["rejected_edits"] == []

    # the prompts describe the skill format and name the field "description"
    for prompt in [*reflects, *merges]:
        assert "Agent Skills format" in prompt
        assert '"description"' in prompt and "Use when" in prompt and "Verify:" in prompt
        assert "skills/<name>/SKILL.md" in prompt
        assert '"summary", "tags"' not in prompt
    assert "description: " in reflects[0]  # the shown skills' descriptions

    [proposal] = git(path, "for-each-ref", "--format=%(refname:short)",
                     "refs/heads/expgit/proposals/").split()
    assert git(path, "rev-parse", "main").strip() == main  # propose mode
    changed = git(path, "diff", "--name-status", main, proposal).splitlines()
    assert changed == ["M\tskills/checked-baggage-allowance/SKILL.md",
                       "A\tskills/pets-in-cabin/SKILL.md"]
    # an edit of an existing skill: its SKILL.md body, the folder's other files kept
    assert git(path, "rev-parse", f"{proposal}:{BAGGAGE_REFERENCE}") == \
        git(path, "rev-parse", f"{main}:{BAGGAGE_REFERENCE}")
    assert git(path, "show", f"{proposal}:{BAGGAGE_REFERENCE}").encode() == \
        BAGGAGE_REFERENCE_BYTES
    old = git(path, "show", f"{main}:skills/checked-baggage-allowance/SKILL.md")
    new = git(path, "show", f"{proposal}:skills/checked-baggage-allowance/SKILL.md")
    assert new.split("\n---\n")[0] == old.split("\n---\n")[0]  # front matter kept
    assert new.endswith(bodies["checked-baggage-allowance"])
    # a new lesson is a new skill folder with the spec's front matter
    created = git(path, "show", f"{proposal}:skills/pets-in-cabin/SKILL.md")
    assert created == ("---\nname: pets-in-cabin\n"
                       f"description: {PETS_DESCRIPTION}\n"
                       "metadata:\n  expgit-status: active\n  expgit-tags: pets\n---\n"
                       + PETS_BODY)
    skill = parse_experience(created, "skills/pets-in-cabin/SKILL.md")
    assert (skill.front_matter.summary, skill.status) == (PETS_DESCRIPTION, "active")
    assert "pets-in-cabin" in agentskills_validate(path, proposal, tmp_path / "checked")
    assert "all experiences valid" in run_cli("-C", path, "validate", proposal).out
    fsck(path)


def train_rollouts(run_cli: Any, path: Path, tmp_path: Path, url: str
                   ) -> tuple[Any, dict[str, Any]]:
    file = unanswered_rollouts(tmp_path / "rollouts.jsonl", BAGGAGE_CASE)
    report = tmp_path / "report.json"
    result = run_cli("-C", path, "train-rollouts", file, "--llm", "openai", "--base-url",
                     url, "--report", report)
    return result, json.loads(report.read_text())


def skill_edit(name: str, description: str, action: str = "create") -> dict[str, Any]:
    return skill_reply(edit_reply(name, action, PETS_BODY), description)


@pytest.mark.parametrize(("edit", "kind", "reason"), [
    # an account of the run, not what the skill does and when to use it
    (skill_edit("pets-in-cabin", "The agent told the user that cats cannot fly."),
     "degenerate", "the description: it is an account of one run"),
    # junk: a loop
    (skill_edit("pets-in-cabin", "pets pets pets pets pets pets pets pets pets pets."),
     "degenerate", "the description: it loops"),
    # XML tags in a description: refused by Anthropic's validators
    (skill_edit("pets-in-cabin", "Answers pet questions. Use when <user> asks about pets."),
     "degenerate", "description contains an XML tag"),
    # names the Agent Skills rules refuse
    (skill_edit("claude-pets", "Answers pet questions. Use when a user asks about pets."),
     "skill_name", "contains the reserved word 'claude'"),
    (skill_edit("-".join(["petsinthecabin"] * 5), "Answers pet questions. Use when a user asks."),
     "skill_name", "the Agent Skills spec allows 1 to 64"),
])
@pytest.mark.slow
def test_a_bad_skill_edit_is_dropped_and_counted(
        run_cli: Any, serve: Any, skills_repo: ExperienceRepository, tmp_path: Path,
        edit: dict[str, Any], kind: str, reason: str) -> None:
    path = tmp_path / "repo"
    refs = git(path, "for-each-ref")
    server = serve([Step("reflect", reflect_with(edit))])
    result, report = train_rollouts(run_cli, path, tmp_path, server.url)
    server.chat.assert_done()
    [rejected] = report["phases"][0]["rejected_edits"]
    assert reason in rejected, rejected
    assert report["redactions"].get(kind) == 1
    assert "proposal: none" in result.out
    # nothing committed: no gradient, no proposal (only the trajectory is stored)
    assert "expgit/gradients/" not in git(path, "for-each-ref") != refs
    assert "expgit/proposals/" not in git(path, "for-each-ref")


def test_a_reply_with_summary_instead_of_description_is_invalid(
        run_cli: Any, serve: Any, skills_repo: ExperienceRepository, tmp_path: Path) -> None:
    """The reply's schema says ``description`` in the skills layout: a reply in the flat
    format is refused (one repair round, then the call fails), not committed."""
    path = tmp_path / "repo"
    flat = reflect_with(edit_reply("pets-in-cabin", "create", PETS_BODY))
    server = serve([Step("reflect", flat), Step("reflect", flat)])
    result, report = train_rollouts(run_cli, path, tmp_path, server.url)
    server.chat.assert_done()
    assert result.code == 7
    assert "expgit/gradients/" not in git(path, "for-each-ref")
    assert report["failures"][0]["stage"] == "reflect"
