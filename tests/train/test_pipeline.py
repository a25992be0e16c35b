"""BatchPolicyTrainer and OfflinePolicyOptimizationPipeline: with fakes, then with the real
components and a strict scripted LLM on a seeded repository."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import fsck, git
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_CASE,
    Handles,
    agent,
    lesson_bodies,
    merge_of,
    reflect_for,
    script,
)

from expgit.core.domain import (
    Case,
    ExperienceSetRef,
    Message,
    PolicyApplyResult,
    PolicyPlanItem,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    RolloutTrainingResult,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
    SemanticGradient,
)
from expgit.errors import ExpgitError, InvalidInputError
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.runs.wiring import build_pipeline
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import ListCaseLoader
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.components.policy_trainer import BatchPolicyTrainer
from expgit.train.components.policy_updater import GitPolicyUpdater
from expgit.train.components.rollout_reflector import OneCallRolloutReflector
from expgit.train.components.snapshotter import ContentHashPolicySnapshotter
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import ExecutionContext, PipelineContext
from expgit.train.engine import PolicyTrainingEngine
from expgit.train.pipeline import OfflinePolicyOptimizationPipeline


def case(name: str, **metadata: Any) -> Case:
    return Case(name=name, task_signature="t", input={"user_query": f"help with {name}"},
                rubric=Rubric(name=name, criteria=[RubricCriterion(name="ok")]),
                metadata=metadata)


# ------------------------------------------------------------------------------ fakes
class FakeAnalyzer:
    def __init__(self) -> None:
        self.active = self.peak = 0
        self.seen: list[str] = []

    async def analyze(self, rollout: Rollout, context: PipelineContext) -> RolloutAnalysis:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.seen.append(rollout.case.name)
        await asyncio.sleep(0.01)
        self.active -= 1
        if rollout.case.metadata.get("analysis_fails"):
            raise ExpgitError("the analyst choked")
        return RolloutAnalysis(rollout=rollout, evaluation=RubricEvaluation(
            passed=bool(rollout.case.metadata.get("passes")), score=0.5))


class FakeEstimator:
    async def estimate(self, analysis: RolloutAnalysis, experience_set: Snapshot,
                       context: PipelineContext) -> list[SemanticGradient]:
        name = analysis.rollout.case.name
        if analysis.rollout.case.metadata.get("estimate_fails"):
            raise RuntimeError("boom")
        return [SemanticGradient(target_experience_name=name, rationale="r",
                                 gradient_id=f"g-{name}-{experience_set.id[:6]}")]


class FakeEngine:
    repo: ExperienceRepository | None = None

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[list[str]] = []

    async def plan_and_apply(self, gradients: Sequence[SemanticGradient],
                             context: PipelineContext
                             ) -> tuple[PolicyUpdatePlan, PolicyApplyResult]:
        self.calls.append([g.gradient_id or "" for g in gradients])
        if self.fail:
            raise ExpgitError("main moved under us")
        plan = PolicyUpdatePlan(items=[PolicyPlanItem(
            kind="upsert_experience", target_experience_name="x",
            gradient_ids=[g.gradient_id or "" for g in gradients])])
        return plan, PolicyApplyResult(
            updated_policy_set=ExperienceSetRef(commit="c", snapshot_id="s"),
            proposal_id=f"p{len(self.calls)}", errors=["guard said no"] if context.epoch
            else [])


class FakeExecutor:
    """Evaluates by the case's metadata; records the snapshot ids it was given."""

    def __init__(self, evaluate: bool = True) -> None:
        self.evaluate = evaluate
        self.snapshots: list[str] = []

    async def execute(self, cases: Sequence[Case], policy_set: Snapshot,
                      context: ExecutionContext) -> list[Rollout]:
        assert context.policy_snapshot_id == policy_set.id
        self.snapshots.append(context.policy_snapshot_id)
        return [Rollout(case=c, policy_snapshot_id=context.policy_snapshot_id,
                        error="tool crashed" if c.metadata.get("crash") else None,
                        evaluation=RubricEvaluation(
                            passed=bool(c.metadata.get("passes")),
                            score=1.0 if c.metadata.get("passes") else 0.25)
                        if self.evaluate else None)
                for c in cases]


class FakeTrainer:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: Snapshot,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        self.calls.append(([r.case.name for r in rollouts], policy_set.id))
        return RolloutTrainingResult(apply_result=PolicyApplyResult(
            updated_policy_set=ExperienceSetRef(commit=policy_set.commit,
                                                snapshot_id=policy_set.id),
            proposal_id=f"prop{len(self.calls)}"))


CTX = PipelineContext()


# ------------------------------------------------------------------- batch trainer
def test_batch_trainer_bounds_concurrency_and_records_failures(
        seeded_repo: ExperienceRepository) -> None:
    analyzer, engine = FakeAnalyzer(), FakeEngine()
    trainer = BatchPolicyTrainer(analyzer, FakeEstimator(), engine, concurrency=3)
    rollouts = [Rollout(case=case(f"c{i}", analysis_fails=i == 2, estimate_fails=i == 5),
                        policy_snapshot_id="s") for i in range(10)]
    result = asyncio.run(trainer.train_rollouts(rollouts, seeded_repo.snapshot(), CTX))
    assert analyzer.peak == 3
    assert len(result.analyses) == 9 and len(result.gradients) == 8
    assert result.errors == ["case c2: analysis failed: the analyst choked",
                             "case c5: estimation failed: RuntimeError: boom"]
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 8  # one update for all
    assert result.apply_result and result.apply_result.proposal_id == "p1"


def test_batch_trainer_update_failures_and_given_analyses(
        seeded_repo: ExperienceRepository) -> None:
    analyzer = FakeAnalyzer()
    rollouts = [Rollout(case=case(f"c{i}"), policy_snapshot_id="s") for i in range(3)]
    given = [RolloutAnalysis(rollout=rollouts[1],
                             evaluation=RubricEvaluation(passed=True, score=1))]
    failing = BatchPolicyTrainer(analyzer, FakeEstimator(), FakeEngine(fail=True))
    result = asyncio.run(failing.train_rollouts(rollouts, seeded_repo.snapshot(), CTX,
                                                analyses=given))
    assert analyzer.seen == ["c0", "c2"]  # the given analysis is not redone
    assert result.analyses[1] is given[0]
    assert result.errors == ["update failed: main moved under us"]
    assert result.plan is None and len(result.gradients) == 3
    # an apply that reports errors (here: epoch 1) surfaces them
    reported = asyncio.run(BatchPolicyTrainer(FakeAnalyzer(), FakeEstimator(), FakeEngine())
                           .train_rollouts(rollouts[:1], seeded_repo.snapshot(),
                                           PipelineContext(epoch=1)))
    assert reported.errors == ["update: guard said no"]


def test_batch_trainer_without_gradients_makes_no_update(
        seeded_repo: ExperienceRepository) -> None:
    engine = FakeEngine()
    trainer = BatchPolicyTrainer(FakeAnalyzer(), FakeEstimator(), engine)
    bad = [Rollout(case=case("c", analysis_fails=True), policy_snapshot_id="s")]
    result = asyncio.run(trainer.train_rollouts(bad, seeded_repo.snapshot(), CTX))
    assert engine.calls == [] and result.apply_result is None and len(result.errors) == 1


# ------------------------------------------------------------------- pipeline, fakes
def test_pipeline_train_with_fakes(seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    executor, trainer = FakeExecutor(), FakeTrainer()
    pipeline = OfflinePolicyOptimizationPipeline(seeded_repo, ContentHashPolicySnapshotter(),
                                                 executor, trainer)
    train = [case(f"t{i}", passes=i % 2 == 0, crash=i == 4) for i in range(5)]
    held_out = [case(f"e{i}", passes=i == 0) for i in range(4)]
    result = asyncio.run(pipeline.train(ListCaseLoader(train, 2),
                                        PipelineContext(max_epochs=2),
                                        ListCaseLoader(held_out, 3)))
    tree = seeded_repo.snapshot().id
    assert set(executor.snapshots) == {tree}  # propose mode: every batch saw main
    assert [names for names, _ in trainer.calls] == [["t0", "t1"], ["t2", "t3"], ["t4"]] * 2
    phases = result.phases
    assert [(p.phase, p.epoch) for p in phases] == [
        ("baseline_eval", -1), ("train_epoch", 0), ("train_epoch", 1), ("final_eval", 2)]
    baseline, epoch0 = phases[0], phases[1]
    assert (baseline.cases, baseline.passed, baseline.accuracy) == (4, 1, 0.25)
    assert baseline.average_reward == pytest.approx((1 + 0.25 * 3) / 4)
    assert (epoch0.cases, epoch0.passed, epoch0.commits) == (5, 3, 3)
    assert epoch0.proposals == ["prop1", "prop2", "prop3"]
    assert epoch0.errors == ["case t4: rollout failed: tool crashed"]
    assert [b.policy_commit for b in epoch0.batches] == [main] * 3
    assert result.main_before == result.main_after == main
    assert "propose mode" in result.notes[0]
    assert seeded_repo.main_commit() == main


def test_eval_requires_evaluations(seeded_repo: ExperienceRepository) -> None:
    pipeline = OfflinePolicyOptimizationPipeline(
        seeded_repo, ContentHashPolicySnapshotter(), FakeExecutor(evaluate=False),
        FakeTrainer())
    with pytest.raises(ExpgitError, match="'e0' has no evaluation"):
        asyncio.run(pipeline.eval(ListCaseLoader([case("e0")], 1), CTX))
    good = OfflinePolicyOptimizationPipeline(
        seeded_repo, ContentHashPolicySnapshotter(), FakeExecutor(), FakeTrainer())
    result = asyncio.run(good.eval(ListCaseLoader([case("a", passes=True), case("b")], 1),
                                   CTX))
    assert (result.metrics.cases, result.metrics.passed, len(result.rollouts)) == (2, 1, 2)
    assert len(result.metrics.batches) == 2


def test_train_from_rollouts_with_fakes(seeded_repo: ExperienceRepository) -> None:
    trainer = FakeTrainer()
    pipeline = OfflinePolicyOptimizationPipeline(
        seeded_repo, ContentHashPolicySnapshotter(), FakeExecutor(), trainer)
    rollouts = [Rollout(case=case("r"), policy_snapshot_id="elsewhere")]
    result = asyncio.run(pipeline.train_from_rollouts(rollouts, CTX))
    assert trainer.calls == [(["r"], seeded_repo.snapshot().id)]
    assert result.apply_result and result.apply_result.proposal_id == "prop1"
    nameless = [Rollout(case=case(" "), policy_snapshot_id="x")]
    with pytest.raises(InvalidInputError, match="must include its case"):
        asyncio.run(pipeline.train_from_rollouts(nameless, CTX))


# ------------------------------------------------------- real components, scripted LLM
def test_real_components_propose_mode(seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    main = seeded_repo.main_commit()
    chat = script(seeded_repo, eval_cases=2)
    meter = UsageMeter()
    pipeline = build_pipeline(seeded_repo, Handles(StructuredLLM(chat, meter)),
                              concurrency=2)
    result = asyncio.run(pipeline.train(
        ListCaseLoader([BAGGAGE_CASE, PETS_CASE], 8), PipelineContext(mode="propose"),
        ListCaseLoader([BAGGAGE_CASE, PETS_CASE], 8)))
    chat.assert_done()  # strict: no call beyond the script
    # 2 baseline + 2 training rollouts: the final eval of the unchanged main is the
    # baseline's measurement (it made 2 more rollouts before)
    assert {s: u.calls for s, u in meter.by_stage().items()} == {
        "rollout": 4, "reflect": 2, "merge": 1}
    assert result.final is not None and result.baseline is not None
    assert result.final.metrics.reused == "baseline_eval"
    assert result.final.rollouts == result.baseline.rollouts
    assert result.final.metrics.batches[0].policy_commit == main
    epoch = result.epochs[0]
    assert epoch.errors == [] and epoch.gradients == 2 and epoch.commits == 1
    assert (epoch.cases, epoch.passed) == (2, 1)
    assert result.baseline and result.baseline.metrics.passed == 1
    # main untouched; trajectories, gradients and one proposal on their own branches
    assert seeded_repo.main_commit() == main and result.main_after == main
    branches = git(path, "for-each-ref", "--format=%(refname)", "refs/heads/").split()
    assert "refs/heads/expgit/trajectories" in branches
    assert len([b for b in branches if b.startswith("refs/heads/expgit/gradients/")]) == 2
    proposals = [b for b in branches if b.startswith("refs/heads/expgit/proposals/")]
    assert proposals == [f"refs/heads/expgit/proposals/{epoch.proposals[0]}"]
    changed = git(path, "diff", "--name-only", main, proposals[0]).split()
    assert sorted(changed) == ["experiences/checked-baggage-allowance.md",
                               "experiences/pets-in-cabin.md"]
    stored = git(path, "ls-tree", "-r", "--name-only", "expgit/trajectories").split()
    documents = [name for name in stored if name.endswith(".md")]
    # each trajectory with its transcript beside it
    assert len(documents) == 2 and sorted(stored) == sorted(
        [*documents, *(name.removesuffix(".md") + ".transcript.json" for name in documents)])
    assert "3 free checked bags" in git(path, "show",
                                        f"{proposals[0]}:experiences/checked-baggage-"
                                        "allowance.md")
    fsck(path)


def test_real_eval_makes_only_rollout_calls(seeded_repo: ExperienceRepository) -> None:
    chat = ScriptedChatModel([Step("rollout", agent), Step("rollout", agent)])
    meter = UsageMeter()
    pipeline = build_pipeline(seeded_repo, Handles(StructuredLLM(chat, meter)))
    refs = git(seeded_repo.git.git_dir, "for-each-ref")
    result = asyncio.run(pipeline.eval(ListCaseLoader([BAGGAGE_CASE, PETS_CASE], 8), CTX))
    chat.assert_done()
    assert {s: u.calls for s, u in meter.by_stage().items()} == {"rollout": 2}
    assert (result.metrics.cases, result.metrics.passed) == (2, 1)
    assert git(seeded_repo.git.git_dir, "for-each-ref") == refs  # nothing written


def test_real_components_apply_mode_moves_main_between_batches(
        seeded_repo: ExperienceRepository) -> None:
    bodies = lesson_bodies(seeded_repo)

    def merge(messages: list[dict[str, str]]) -> str:
        name = ("pets-in-cabin" if "experiences/pets-in-cabin.md" in messages[-1]["content"]
                else "checked-baggage-allowance")
        return merge_of({name: bodies[name]})

    reflect = reflect_for(bodies)
    chat = ScriptedChatModel([Step(stage, reply) for _ in range(2) for stage, reply in (
        ("rollout", agent), ("reflect", reflect), ("merge", merge))])
    main = seeded_repo.main_commit()
    pipeline = build_pipeline(seeded_repo, Handles(StructuredLLM(chat, UsageMeter())))
    result = asyncio.run(pipeline.train(ListCaseLoader([BAGGAGE_CASE, PETS_CASE], 1),
                                        PipelineContext(mode="apply")))
    chat.assert_done()
    epoch = result.epochs[0]
    assert epoch.errors == [] and epoch.commits == 2 and len(epoch.applied_commits) == 2
    first, second = epoch.batches
    assert first.policy_commit == main
    assert second.policy_commit == first.applied_commits[0]  # batch 2 saw batch 1's update
    assert first.policy_snapshot_id != second.policy_snapshot_id
    assert seeded_repo.main_commit() == second.applied_commits[0] == result.main_after
    assert set(seeded_repo.snapshot().names()) >= {"pets-in-cabin"}
    assert result.notes == []
    path = seeded_repo.git.work_tree
    assert path is not None
    fsck(path)


def test_streaming_trainer_with_real_components(seeded_repo: ExperienceRepository) -> None:
    """Two recorded rollouts submitted at once, against the current main (no policy set
    given): one batch, one proposal, each caller seeing only its own gradient."""
    chat = ScriptedChatModel([s for s in script(seeded_repo).steps if s.stage != "rollout"])
    llm = StructuredLLM(chat, UsageMeter())
    engine = PolicyTrainingEngine(seeded_repo, PatchMergePolicyOptimizer(seeded_repo, llm),
                                  GitPolicyUpdater(seeded_repo))
    analyzer = TrajectoryRolloutAnalyzer(seeded_repo, llm)
    estimator = ExperienceGradientEstimator(seeded_repo, llm)
    trainer = StreamingPolicyTrainer(analyzer, estimator, engine,
                                     max_gradients_per_update=2, max_wait_seconds=60,
                                     reflector=OneCallRolloutReflector(analyzer, estimator,
                                                                       llm))
    rollouts = [Rollout(case=c, policy_snapshot_id="recorded", messages=[
        Message.text("user", c.input["user_query"]), Message.text("assistant", agent([
            {"role": "user", "content": c.input["user_query"]}]))],
        evaluation=RubricEvaluation(passed=False, score=0.0))
        for c in (BAGGAGE_CASE, PETS_CASE)]
    main = seeded_repo.main_commit()

    async def run() -> list[RolloutTrainingResult]:
        results = await asyncio.wait_for(asyncio.gather(*(
            trainer.submit_rollout(r, PipelineContext()) for r in rollouts)), 30)
        await trainer.close()
        return list(results)

    first, second = asyncio.run(run())
    chat.assert_done()
    assert first.errors == second.errors == []
    assert first.apply_result and second.apply_result
    assert first.apply_result.proposal_id == second.apply_result.proposal_id is not None
    for result in (first, second):
        assert len(result.gradients) == 1 and result.plan is not None
        assert [i.gradient_ids for i in result.plan.items] == [[result.gradients[0].gradient_id]]
    assert {first.gradients[0].target_experience_name,
            second.gradients[0].target_experience_name} == {"checked-baggage-allowance",
                                                            "pets-in-cabin"}
    assert seeded_repo.main_commit() == main and trainer.batches_applied == 1
