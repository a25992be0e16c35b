"""Templates a repository overrides on ``main`` (``.expgit/templates/<name>``): used by
renders, pinned to a commit with ``templates_at``, and seen by the analyzer's prompt and
trajectory document alike."""

from __future__ import annotations

import asyncio
import json

from expgit.core.domain import Case, Message, Rollout, Rubric, RubricCriterion
from expgit.git.repo import RefUpdate
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.format.templates import environment, render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import TrajectoryStore

JUDGE = ("{% block system %}house rules for {{ who }}{% endblock %}"
         "{% block user %}judge it{% endblock %}")


def commit_on_main(repo: ExperienceRepository, files: dict[str, str]) -> str:
    git = repo.git
    main = repo.main_commit()
    tree = git.edit_tree(git.read_commit(main).tree,
                         {path: git.write_blob(text.encode()) for path, text in files.items()})
    commit = git.write_commit(tree, [main], "templates of our own")
    git.update_refs([RefUpdate(repo.main_ref, commit, main)], "templates")
    return commit


def test_an_override_on_main_replaces_the_packaged_template(
        bare_repo: ExperienceRepository) -> None:
    before = bare_repo.main_commit()
    after = commit_on_main(bare_repo, {".expgit/templates/prompts/judge.md.j2": JUDGE})
    assert render_prompt("judge", bare_repo, who="me") == ("house rules for me", "judge it")
    assert render_prompt("judge", bare_repo, templates_at=after, who="us") == (
        "house rules for us", "judge it")
    # pinned to the commit before the override: the packaged file
    env = environment(bare_repo, templates_at=before)
    assert env.loader is not None
    source = env.loader.get_source(env, "prompts/judge.md.j2")[0]
    assert "house rules" not in source and "{% block system %}" in source


def test_the_analyzer_renders_prompt_and_document_from_mains_overrides(
        seeded_repo: ExperienceRepository) -> None:
    commit_on_main(seeded_repo, {
        ".expgit/templates/prompts/analyze.md.j2":
            "{% block system %}analyse {{ case.name }}{% endblock %}"
            "{% block user %}the run{% endblock %}",
        ".expgit/templates/trajectory.md.j2": "ours: {{ analysis.title }}\n",
    })
    reply = {"title": "Refused politely", "outcome": "success", "summary": "It refused.",
             "key_steps": ["read"], "mistakes": [], "lessons": ["refuse"],
             "retrieval_anchor": "refuse cancel"}
    model = ScriptedChatModel([Step("analyze", json.dumps(reply))])
    analyzer = TrajectoryRolloutAnalyzer(seeded_repo, StructuredLLM(model, UsageMeter()))
    case = Case(name="cancel-9", task_signature="airline.cancel", input={"q": "cancel"},
                rubric=Rubric(name="r", criteria=[RubricCriterion(name="ok")]))
    rollout = Rollout(case=case, policy_snapshot_id="snap", messages=[
        Message.text("user", "cancel it"), Message.text("assistant", "I cannot.")])
    result = asyncio.run(analyzer.analyze(rollout, PipelineContext()))
    model.assert_done()
    system, user = (m["content"] for m in model.calls[0][1][:2])
    assert system.startswith("analyse cancel-9") and user.startswith("the run")
    assert result.trajectory is not None
    assert result.trajectory.content == "ours: Refused politely\n"
    assert TrajectoryStore(seeded_repo).read(result.trajectory.uri) == \
        "ours: Refused politely\n"
