"""The degeneracy and cosmetic guard in the real pipeline, with a strict scripted model
(issue 24 item 3): a junk edit among good ones is dropped and counted while the good one
becomes a gradient; a reply of nothing but junk leaves nothing behind and counts as a
failed call whose cause names ``degenerate``; a merely cosmetic edit is dropped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from conftest import fsck, git
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_CASE,
    Handles,
    agent,
    analyze,
    edit_reply,
    lesson_bodies,
    merge_of,
    reflect_with,
)

from expgit.core.domain import Message, Rollout, RubricEvaluation
from expgit.llm.port import Failure, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import list_gradients
from expgit.train.cases import ListCaseLoader
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.policy_trainer import BatchPolicyTrainer
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import PipelineContext
from expgit.train.guards.lesson import DEGENERATE_REPLY
from expgit.train.measurement.phase_metrics import PipelineResult
from expgit.train.pipeline import OfflinePolicyOptimizationPipeline

Reply = Callable[[list[dict[str, str]]], str]
LOOPING = "Mia Li, Mia Li, Mia Li, Mia Li, Mia Li, Mia Li, …"
JUNK_EDIT = {**edit_reply("pets-in-cabin", "create", f"# Pets\n\n{LOOPING}\n"),
             "rationale": "1.2.3.5.0", "confidence": 1.0}
JUNK_ANALYSIS = {"title": "1.2.3.5.0", "outcome": "failure", "summary": LOOPING,
                 "key_steps": ["3.10"], "mistakes": [], "lessons": ["24[ ]"],
                 "retrieval_anchor": "Mia Li Mia Li Mia Li Mia Li"}


def junk_reflect(messages: list[dict[str, str]]) -> str:
    return json.dumps({**JUNK_ANALYSIS, "edits": [JUNK_EDIT]})


def train(repo: ExperienceRepository, steps: list[Step], *cases: object
          ) -> tuple[PipelineResult, OfflinePolicyOptimizationPipeline, UsageMeter]:
    chat = ScriptedChatModel(steps)
    meter = UsageMeter()
    pipeline = build_pipeline(repo, Handles(StructuredLLM(chat, meter)), concurrency=1)
    result = asyncio.run(pipeline.train(ListCaseLoader(list(cases), 8),  # type: ignore[arg-type]
                                        PipelineContext(mode="propose")))
    chat.assert_done()
    return result, pipeline, meter


def branches(repo: ExperienceRepository) -> list[str]:
    return git(repo.git.git_dir, "for-each-ref", "--format=%(refname)").split()


def test_a_junk_edit_among_good_ones_is_dropped_and_counted(
        seeded_repo: ExperienceRepository) -> None:
    bodies = lesson_bodies(seeded_repo)
    good = edit_reply("checked-baggage-allowance", "update",
                      bodies["checked-baggage-allowance"])
    result, pipeline, meter = train(seeded_repo, [
        Step("rollout", agent), Step("reflect", reflect_with(good, JUNK_EDIT)),
        Step("merge", merge_of({"checked-baggage-allowance":
                                bodies["checked-baggage-allowance"]}))], BAGGAGE_CASE)
    [epoch] = result.epochs
    assert epoch.gradients == 1 and len(epoch.proposals) == 1
    assert [g.target for g in list_gradients(seeded_repo)] == ["checked-baggage-allowance"]
    [rejected] = epoch.rejected_edits
    assert "'pets-in-cabin': degenerate: the rationale: it has no real words" \
        in rejected
    assert pipeline.redactor.report() == {"degenerate": 1}
    assert meter.failures() == []  # the reply was not all junk: the call did its work
    fsck(seeded_repo.git.work_tree)  # type: ignore[arg-type]


def test_a_reply_of_only_junk_leaves_nothing_and_names_the_cause(
        seeded_repo: ExperienceRepository) -> None:
    before = git(seeded_repo.git.git_dir, "for-each-ref")
    result, pipeline, meter = train(seeded_repo, [
        Step("rollout", agent), Step("rollout", agent),
        Step("reflect", junk_reflect), Step("reflect", junk_reflect)],
        BAGGAGE_CASE, PETS_CASE)
    [epoch] = result.epochs
    assert epoch.gradients == 0 and epoch.proposals == [] and epoch.commits == 0
    assert git(seeded_repo.git.git_dir, "for-each-ref") == before  # no trajectory either
    assert meter.failures() == [Failure(stage="reflect", cause=DEGENERATE_REPLY, count=2)]
    assert "degenerate" in DEGENERATE_REPLY
    # the two analyses, and their three junk lines each
    assert pipeline.redactor.report() == {"degenerate": 2 + 2 * 2}
    assert all("trajectory not stored: degenerate: the title: it has no real words" in r
               or "dropped with the degenerate analysis" in r for r in epoch.rejected_edits)
    assert len(epoch.rejected_edits) == 4


def rollout_of(case: object) -> Rollout:
    return Rollout(case=case, policy_snapshot_id="s",  # type: ignore[arg-type]
                   messages=[Message.text("user", "I am a gold member flying economy."),
                             Message.text("assistant", "You get 2 free bags.")],
                   evaluation=RubricEvaluation(passed=False, score=0.0))


def two_call_trainer(repo: ExperienceRepository, steps: list[Step]
                     ) -> tuple[BatchPolicyTrainer, ScriptedChatModel, UsageMeter]:
    chat = ScriptedChatModel(steps)
    meter = UsageMeter()
    llm = StructuredLLM(chat, meter)
    trainer = BatchPolicyTrainer(TrajectoryRolloutAnalyzer(repo, llm),
                                 ExperienceGradientEstimator(repo, llm), engine=None)  # type: ignore[arg-type]
    return trainer, chat, meter


def test_two_calls_a_junk_analysis_is_not_stored_and_no_estimate_is_asked(
        seeded_repo: ExperienceRepository) -> None:
    trainer, chat, meter = two_call_trainer(
        seeded_repo, [Step("analyze", json.dumps(JUNK_ANALYSIS))])
    result = asyncio.run(trainer.train_rollouts([rollout_of(BAGGAGE_CASE)],
                                                seeded_repo.snapshot(), PipelineContext()))
    chat.assert_done()  # one call: the estimator had no trajectory to work from
    assert result.gradients == [] and result.errors == []
    [analysis] = result.analyses
    assert analysis.trajectory is None
    assert (analysis.metadata.skipped or "").startswith("trajectory not stored: degenerate:")
    # the reason the report points at is still there after the estimator had its turn
    assert analysis.metadata.rejected_edits == [analysis.metadata.skipped]
    assert "refs/heads/expgit/trajectories" not in branches(seeded_repo)
    assert [(f.stage, f.cause) for f in meter.failures()] == [("analyze", DEGENERATE_REPLY)]


def test_two_calls_a_junk_estimate_keeps_the_trajectory_and_commits_nothing(
        seeded_repo: ExperienceRepository) -> None:
    trainer, chat, meter = two_call_trainer(seeded_repo, [
        Step("analyze", analyze), Step("estimate", json.dumps({"edits": [JUNK_EDIT]}))])
    result = asyncio.run(trainer.train_rollouts([rollout_of(BAGGAGE_CASE)],
                                                seeded_repo.snapshot(), PipelineContext()))
    chat.assert_done()
    assert result.gradients == [] and list_gradients(seeded_repo) == []
    [analysis] = result.analyses
    assert analysis.trajectory is not None  # a good analysis is stored
    assert [(f.stage, f.cause) for f in meter.failures()] == [("estimate", DEGENERATE_REPLY)]


def test_a_junk_merge_makes_no_proposal(seeded_repo: ExperienceRepository) -> None:
    bodies = lesson_bodies(seeded_repo)
    good = edit_reply("checked-baggage-allowance", "update",
                      bodies["checked-baggage-allowance"])
    junk_item = {**JUNK_EDIT, "name": "checked-baggage-allowance", "action": "upsert",
                 "gradient_ids": [], "rationale": LOOPING}
    result, pipeline, meter = train(seeded_repo, [
        Step("rollout", agent), Step("reflect", reflect_with(good)),
        Step("merge", json.dumps({"items": [junk_item]}))], BAGGAGE_CASE)
    [epoch] = result.epochs
    assert epoch.gradients == 1 and epoch.proposals == []
    assert [f.stage for f in meter.failures()] == ["merge"]
    assert meter.failures()[0].cause == DEGENERATE_REPLY
    assert any("merge: upsert 'checked-baggage-allowance': degenerate: the rationale: "
               "it loops" in r for r in epoch.rejected_edits)
    assert pipeline.redactor.report() == {"degenerate": 1}


def test_a_cosmetic_edit_is_dropped_as_cosmetic(seeded_repo: ExperienceRepository) -> None:
    body = seeded_repo.snapshot().entries["checked-baggage-allowance"].experience.body
    # the noise: "yes" -> 'yes', blank lines dropped, another list marker
    noise = (body.replace('"yes"', "'yes'").replace("\n\n", "\n")
             .replace("\n- ", "\n* ").replace("\n1. ", "\n1) "))
    assert noise != body
    edit = edit_reply("checked-baggage-allowance", "update", noise)
    result, pipeline, meter = train(seeded_repo, [
        Step("rollout", agent), Step("reflect", reflect_with(edit))], BAGGAGE_CASE)
    [epoch] = result.epochs
    assert epoch.gradients == 0 and list_gradients(seeded_repo) == []
    [rejected] = epoch.rejected_edits
    assert "cosmetic: the change is only whitespace, quotes, list or YAML style" in rejected
    assert pipeline.redactor.report() == {"cosmetic": 1}
    assert meter.failures() == []  # noise is not a failed call
