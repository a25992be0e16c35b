"""OneCallRolloutReflector: one ``reflect`` call per rollout, with the strict scripted LLM on
a seeded repository; the trajectory and the gradients are the ones the two-call path makes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest
from conftest import EXAMPLE, fsck, git
from test_analyzer import FAILED, REPLY, make_rollout

from expgit.core.domain import Rollout, RolloutAnalysis, SemanticGradient
from expgit.errors import InvalidInputError
from expgit.init import init_repository
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.settings import parse_settings
from expgit.store.repository import ExperienceRepository
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.rollout_reflector import OneCallRolloutReflector, input_text
from expgit.train.components.trajectory_analyzer import (
    TrajectoryRolloutAnalyzer,
    read_front_matter,
)
from expgit.train.context import PipelineContext

RULE = "- Check the 24-hour rule and the insurance before cancelling.\n"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"


def edit(name: str, action: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "action": action, "rationale": f"the run shows {name}",
            "summary": "", "tags": [], "body": body, "confidence": 0.8, **extra}


def reflection(*edits: dict[str, Any], **analysis: Any) -> str:
    return json.dumps({**REPLY, **analysis, "edits": list(edits)})


def components(repo: ExperienceRepository, steps: list[Step], *,
               prompt_tokens: int | None = None
               ) -> tuple[OneCallRolloutReflector, ScriptedChatModel, UsageMeter]:
    model, meter = ScriptedChatModel(steps), UsageMeter()
    llm = StructuredLLM(model, meter)
    analyzer = TrajectoryRolloutAnalyzer(repo, llm, prompt_tokens=prompt_tokens)
    estimator = ExperienceGradientEstimator(repo, llm, prompt_tokens=prompt_tokens)
    return OneCallRolloutReflector(analyzer, estimator, llm), model, meter


def reflect(reflector: OneCallRolloutReflector, rollout: Rollout, snapshot: Snapshot
            ) -> tuple[RolloutAnalysis, list[SemanticGradient]]:
    return asyncio.run(reflector.reflect(rollout, snapshot, PipelineContext()))


def cancellation_update(repo: ExperienceRepository) -> dict[str, Any]:
    entry = repo.snapshot().get("cancellation-eligibility-rules")
    assert entry is not None
    return edit("cancellation-eligibility-rules", "update", entry.experience.body + RULE)


def test_one_call_stores_the_trajectory_and_commits_the_gradients(
        seeded_repo: ExperienceRepository) -> None:
    repo = seeded_repo
    tree = repo.git.work_tree
    assert tree is not None
    main = git(tree, "rev-parse", "main")
    seen: list[str] = []

    def reply(messages: list[dict[str, str]]) -> str:
        seen.append(messages[-1]["content"])
        return reflection(cancellation_update(repo), edit("pets-in-cabin", "create",
                                                          "# Pets\n\nWhen: a pet travels, ask.\n"))

    reflector, model, meter = components(repo, [Step("reflect", reply)])
    analysis, gradients = reflect(reflector, make_rollout(evaluation=FAILED), repo.snapshot())
    model.assert_done()
    assert meter.by_stage()["reflect"].calls == 1 and set(meter.by_stage()) == {"reflect"}
    # the prompt showed the transcript, the evaluation and the experience in view once
    prompt = seen[0]
    assert prompt.count("get_reservation_details") >= 1 and "FAILED" in prompt
    assert "# Cancellation eligibility rules" in prompt
    # the stored document is the analyzer's: front matter and outcome from the evaluation
    assert analysis.trajectory is not None
    front = read_front_matter(analysis.trajectory.content, analysis.trajectory.uri)
    assert front["title"] == REPLY["title"] and front["outcome"] == "failure"
    assert front["evaluation"]["passed"] is False and front["kind"] == "trajectory"
    assert "Check cancellation eligibility" in analysis.trajectory.content
    # the gradients are commits on their own branches, with the trajectory as evidence
    assert [g.target_experience_name for g in gradients] == [
        "cancellation-eligibility-rules", "pets-in-cabin"]
    for gradient in gradients:
        assert gradient.evidence_trajectory_uris == [analysis.trajectory.uri]
        assert gradient.after is not None
    assert RULE.strip() in (gradients[0].after.content if gradients[0].after else "")
    assert analysis.metadata.rejected_edits == []
    assert git(tree, "rev-parse", "main") == main  # main never moves
    fsck(tree)


def test_the_two_paths_store_the_same_trajectory_and_gradients(tmp_path: Any) -> None:
    """The same analysis and edit, answered in one call or two, make the same stored
    document (but for the time it was analysed) and the same gradient content."""
    made: dict[int, tuple[str, list[str]]] = {}
    for calls in (1, 2):
        init_repository(tmp_path / f"r{calls}", seed=EXAMPLE, layout="flat")
        repo = ExperienceRepository.open(tmp_path / f"r{calls}")
        update = cancellation_update(repo)
        steps = ([Step("reflect", reflection(update))] if calls == 1 else
                 [Step("analyze", json.dumps(REPLY)),
                  Step("estimate", json.dumps({"edits": [update]}))])
        reflector, model, _ = components(repo, steps)
        rollout = make_rollout(evaluation=FAILED)
        if calls == 1:
            analysis, gradients = reflect(reflector, rollout, repo.snapshot())
        else:
            analysis = asyncio.run(reflector.analyzer.analyze(rollout, PipelineContext()))
            gradients = asyncio.run(reflector.estimator.estimate(
                analysis, repo.snapshot(), PipelineContext()))
        model.assert_done()
        assert analysis.trajectory is not None
        document = "\n".join(line for line in analysis.trajectory.content.splitlines()
                             if not line.startswith("analyzed_at:"))
        made[calls] = (document, [g.after.content for g in gradients if g.after])
    assert made[1] == made[2]


def test_a_stored_trajectory_costs_only_the_estimate_call(
        seeded_repo: ExperienceRepository) -> None:
    repo = seeded_repo
    rollout = make_rollout(evaluation=FAILED)
    first, model, _ = components(repo, [Step("reflect", reflection())])
    reflect(first, rollout, repo.snapshot())
    model.assert_done()
    again, model, meter = components(repo, [Step("estimate", json.dumps({"edits": []}))])
    analysis, gradients = reflect(again, rollout, repo.snapshot())
    model.assert_done()
    assert analysis.metadata.reused is True and gradients == []
    assert set(meter.by_stage()) == {"estimate"}


def test_a_secret_in_an_edit_is_refused_and_one_in_the_analysis_redacted(
        seeded_repo: ExperienceRepository) -> None:
    """A model that obeys an injection: the key in the trajectory is redacted before it is
    stored, the edit that carries it is refused with its reason, never committed."""
    repo = seeded_repo
    leaky = edit("aws-keys", "create", f"# Keys\n\nWhen: always. Use {AWS_KEY}.\n")
    wrong = edit("no-such-file", "update", "# X\n\nWhen: never, do nothing.\n")
    reflector, model, _ = components(repo, [Step("reflect", reflection(
        leaky, wrong, summary=f"The agent leaked {AWS_KEY}."))])
    analysis, gradients = reflect(reflector, make_rollout(evaluation=FAILED), repo.snapshot())
    model.assert_done()
    assert gradients == []
    rejected = analysis.metadata.rejected_edits or []
    assert len(rejected) == 2 and "aws-keys" in rejected[0]
    assert "does not exist" in rejected[1]
    assert analysis.trajectory is not None and AWS_KEY not in analysis.trajectory.content
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"],
                             cwd=repo.git.work_tree, capture_output=True, check=True).stdout
    assert AWS_KEY.encode() not in objects


def test_over_the_prompt_budget_experiences_go_first(
        seeded_repo: ExperienceRepository) -> None:
    repo = seeded_repo
    prompts: list[str] = []

    def reply(messages: list[dict[str, str]]) -> str:
        prompts.append(messages[-1]["content"])
        return reflection()

    reflector, model, _ = components(repo, [Step("reflect", reply)], prompt_tokens=2600)
    reflect(reflector, make_rollout(evaluation=FAILED), repo.snapshot())
    model.assert_done()
    shown = prompts[0].count("\n### ") - prompts[0].count("\n### user") \
        - prompts[0].count("\n### assistant")
    assert 0 < shown < 5  # some experiences left out, the transcript kept whole
    assert "get_reservation_details" in prompts[0]


def test_an_empty_transcript_makes_no_call(seeded_repo: ExperienceRepository) -> None:
    reflector, model, meter = components(seeded_repo, [])
    analysis, gradients = reflect(reflector, make_rollout(messages=[]), seeded_repo.snapshot())
    model.assert_done()
    assert gradients == [] and analysis.trajectory is None and meter.by_stage() == {}
    assert "empty transcript" in (analysis.metadata.skipped or "")


def test_the_case_input_is_shown_once() -> None:
    rollout = make_rollout()
    assert input_text(rollout) == ""  # the first user message holds it
    other = rollout.model_copy(update={"case": rollout.case.model_copy(
        update={"input": {"user_query": "x", "account": "gold"}})})
    assert json.loads(input_text(other)) == {"account": "gold", "user_query": "x"}


@pytest.mark.parametrize("value", ["3", "0", '"one"'])
def test_calls_per_rollout_is_one_or_two(value: str) -> None:
    assert parse_settings("[train]\ncalls_per_rollout = 2\n").train.calls_per_rollout == 2
    with pytest.raises(InvalidInputError, match="calls_per_rollout"):
        parse_settings(f"[train]\ncalls_per_rollout = {value}\n")
