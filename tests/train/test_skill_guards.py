"""The lesson guards in the skills layout: the summary is a SKILL.md's ``description``
(junk, an account of one run, past 1,024 characters or with an XML tag: dropped and
counted as ``degenerate``), names follow the Agent Skills rules (``skill_name``), an
edit of a SKILL.md's form only is ``cosmetic``; the estimator and the merge both apply
them, and both write a new lesson as a skill folder."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE
from skills_support import skills_seed
from test_estimator import FixedRanker, analysis_for
from test_optimizer import gradient, plan

from expgit.init import init_repository
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.format.experience import parse_experience
from expgit.store.repository import ExperienceRepository
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.llm_fields import EditLimits
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.context import PipelineContext
from expgit.train.guards.lesson import LessonRefused, check_change, check_written

BAGGAGE = "checked-baggage-allowance"
PATH = f"skills/{BAGGAGE}/SKILL.md"
RATIONALE = "the run showed the rule was missing"
BODY = "# Pets\n\nWhen: a pet question.\n\nProcedure:\n1. Read the pet rules first.\n"
GOOD = "Answers pet questions. Use when a user asks to fly with a pet."
WIDE = EditLimits(summary_chars=1900, max_edits=4)  # a description past 1,024 fits


@pytest.fixture
def skills(tmp_path: Path) -> ExperienceRepository:
    init_repository(tmp_path / "skills-repo", seed=skills_seed(EXAMPLE, tmp_path))
    return ExperienceRepository.open(tmp_path / "skills-repo")


def refused(**fields: Any) -> LessonRefused:
    with pytest.raises(LessonRefused) as info:
        check_written(rationale=RATIONALE, body=BODY, skills=True, **fields)
    return info.value


def test_a_description_past_the_spec_is_junk() -> None:
    long = refused(summary="Answers pet questions. " * 48 + "Use when asked.")
    assert long.kind == "degenerate"
    assert "description is 1119 characters long" in long.message
    xml = refused(summary="Answers pet questions. Use when <pets> come up.")
    assert (xml.kind, "description contains an XML tag" in xml.message) == (
        "degenerate", True)
    story = refused(summary="The user asked about a cat and the agent said no.")
    assert "the description: it is an account of one run" in story.message
    short = refused(summary="Pets.")
    assert "the description 'Pets.' has too few words" in short.message
    check_written(rationale=RATIONALE, summary=GOOD, body=BODY, skills=True)
    check_written(rationale=RATIONALE, summary="", body=BODY, skills=True)  # keeps it
    # the flat layout: a summary has no spec bounds, and is named so
    check_written(rationale=RATIONALE, summary="Apply the <pets> rules to animals in the cabin.",
                  body=BODY)


def test_a_change_of_a_skills_form_only_is_cosmetic(skills: ExperienceRepository) -> None:
    current = skills.snapshot().entries[BAGGAGE].text
    restyled = current.replace("- Bags can", "* Bags can").replace(
        "charge 50 USD", "charge  50 USD")
    with pytest.raises(LessonRefused) as info:
        check_change(current, restyled, PATH)
    assert info.value.kind == "cosmetic"


def estimate(repo: ExperienceRepository, *edits: dict[str, Any]
             ) -> tuple[ExperienceGradientEstimator, Any, list[Any]]:
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": list(edits)}))])
    est = ExperienceGradientEstimator(repo, StructuredLLM(model, UsageMeter()),
                                      FixedRanker(BAGGAGE), limits=WIDE)
    analysis = analysis_for(repo)
    gradients = asyncio.run(est.estimate(analysis, repo.snapshot(), PipelineContext()))
    model.assert_done()
    return est, analysis, gradients


def edit(name: str, action: str, description: str, body: str) -> dict[str, Any]:
    return {"name": name, "action": action, "rationale": RATIONALE,
            "description": description, "tags": [] if action == "update" else ["pets"],
            "body": body, "confidence": 0.6}


def test_the_estimator_guards_skills_and_writes_new_ones_as_folders(
        skills: ExperienceRepository) -> None:
    current = skills.snapshot().entries[BAGGAGE]
    restyled = current.experience.body.replace("- Bags can", "* Bags can")
    est, analysis, gradients = estimate(
        skills,
        edit("pets-in-cabin", "create", GOOD, BODY),
        edit(BAGGAGE, "update", "", restyled),  # only the form of the body
        edit("pet-fees", "create", "Answers pet fees. " * 64 + "Use when asked.", BODY),
        edit("anthropic-pets", "create", GOOD, BODY))
    rejected = analysis.metadata.rejected_edits
    assert [r.split(":")[0] for r in rejected] == [
        f"update '{BAGGAGE}'", "create 'pet-fees'", "create 'anthropic-pets'"]
    assert "cosmetic" in rejected[0] and "description is 1167 characters long" in rejected[1]
    assert "reserved word 'anthropic'" in rejected[2]
    assert {k: est.redactor.counts[k] for k in ("cosmetic", "degenerate", "skill_name")} \
        == {"cosmetic": 1, "degenerate": 1, "skill_name": 1}
    [created] = gradients
    assert created.after is not None
    assert skills.git.ref(f"refs/heads/expgit/gradients/{created.gradient_id}") is not None
    skill = parse_experience(created.after.content, "skills/pets-in-cabin/SKILL.md")
    assert (skill.name, skill.front_matter.summary, skill.spec_fields) == (
        "pets-in-cabin", GOOD, {})
    assert created.after.content.startswith(
        f"---\nname: pets-in-cabin\ndescription: {GOOD}\nmetadata:\n")


def test_the_merge_guards_skills_and_writes_new_ones_as_folders(
        skills: ExperienceRepository) -> None:
    snapshot = skills.snapshot()
    current = snapshot.entries[BAGGAGE].text
    grads = [gradient(1, BAGGAGE, snapshot, current + "- Gold: 3 free bags.\n"),
             gradient(2, "pets-in-cabin", snapshot, None)]
    ids = [g.gradient_id or "" for g in grads]

    def item(name: str, description: str, body: str) -> dict[str, Any]:
        return {"name": name, "action": "upsert", "gradient_ids": ids, "rationale": RATIONALE,
                "description": description, "tags": [], "body": body, "confidence": 0.7}

    prompts: list[str] = []

    def merge(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[0]["content"])
        return json.dumps({"items": [
            item("pets-in-cabin", GOOD, BODY),
            item(BAGGAGE, "The agent told the user about gold bags.", ""),
            item("claude-pets", GOOD, BODY)]})

    model = ScriptedChatModel([Step("merge", merge)])
    opt = PatchMergePolicyOptimizer(skills, StructuredLLM(model, UsageMeter()),
                                    limits=WIDE)
    result = plan(opt, grads, snapshot)
    model.assert_done()
    assert "skills/<name>/SKILL.md" in prompts[0] and '"description"' in prompts[0]
    assert [i.target_experience_name for i in result.items] == ["pets-in-cabin"]
    rejected = result.metadata.rejected_items or []
    assert "the description: it is an account of one run" in rejected[0]
    assert "reserved word 'claude'" in rejected[1]
    assert (opt.redactor.counts["degenerate"], opt.redactor.counts["skill_name"]) == (1, 1)
    content = result.items[0].after_content or ""
    assert parse_experience(content, "skills/pets-in-cabin/SKILL.md").front_matter.summary \
        == GOOD


@pytest.mark.parametrize("layout", ["flat", "skills"])
def test_the_estimate_prompt_speaks_the_repositorys_layout(
        layout: str, seeded_repo: ExperienceRepository, skills: ExperienceRepository) -> None:
    repo = skills if layout == "skills" else seeded_repo
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
    est = ExperienceGradientEstimator(repo, StructuredLLM(model, UsageMeter()),
                                      FixedRanker(BAGGAGE))
    asyncio.run(est.estimate(analysis_for(repo), repo.snapshot(), PipelineContext()))
    system = model.calls[0][1][0]["content"]
    schema = json.dumps(model.calls[0][2])
    skill_words = ("Agent Skills format", '"description"', "Use when", "Verify:",
                   "/<name>/SKILL.md", '"claude" or "anthropic"', "64 characters")
    if layout == "skills":
        assert all(w in system for w in skill_words), system
        assert '"description"' in schema and '"summary"' not in schema
    else:  # the flat wording, as before
        assert not any(w in system for w in skill_words), system
        assert '"summary", "tags"' in system and "experiences/<name>.md" in system
        assert '"summary"' in schema and '"description"' not in schema
