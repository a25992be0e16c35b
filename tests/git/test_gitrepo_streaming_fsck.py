"""A streaming run on the process-free git paths (objects written in process, refs moved
through the long-lived ``update-ref``, group commits of trajectories and ref
transactions) leaves a repository ``git fsck --strict`` finds clean, with every gradient
applied and every trajectory on its branch."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import fsck, git

from expgit.core.domain import Case, Message, Rollout, Rubric, RubricCriterion, RubricEvaluation
from expgit.llm.port import ChatMessages, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import list_proposals
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.components.policy_updater import GitPolicyUpdater
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import PipelineContext
from expgit.train.engine import PolicyTrainingEngine
from expgit.train.records.trajectory_store import TrajectoryStore

ROLLOUTS = 12
_GRADIENT = re.compile(r"^### Gradient (\S+): \w+ `([a-z0-9-]+)`", re.M)
_RUN = re.compile(r"Question number (\d+)")


def lesson(name: str) -> dict[str, object]:
    return {"summary": f"What {name} taught.", "tags": ["stream"],
            "body": f"# {name}\n\nWhen: a case like {name} comes up.\n\nProcedure:\n"
                    "1. Check the rule first.\n", "rationale": "learned from this run",
            "confidence": 0.7}


def analyze(messages: ChatMessages) -> str:
    run = _RUN.search(messages[-1]["content"])
    anchor = f"run {run.group(1) if run else '?'}"
    return json.dumps({"title": f"Lesson from {anchor}", "outcome": "partial",
                       "summary": "A rule was missed.", "key_steps": ["answer"],
                       "mistakes": ["skipped a check"], "lessons": ["check first"],
                       "retrieval_anchor": anchor})


def estimate(messages: ChatMessages) -> str:  # one new lesson per trajectory shown
    digest = hashlib.sha1(messages[-1]["content"].encode()).hexdigest()[:10]
    name = f"stream-lesson-{digest}"
    return json.dumps({"edits": [{"name": name, "action": "create", **lesson(name)}]})


def merge(messages: ChatMessages) -> str:
    items: dict[str, list[str]] = {}
    for gid, target in _GRADIENT.findall(messages[-1]["content"]):
        items.setdefault(target, []).append(gid)
    return json.dumps({"items": [{"name": t, "action": "upsert", "gradient_ids": ids,
                                  **lesson(t)} for t, ids in items.items()]})


def rollout(i: int) -> Rollout:
    case = Case(name=f"stream-{i}", task_signature="stream", input={"q": f"q{i}"},
                rubric=Rubric(name="r", criteria=[RubricCriterion(name="ok")]))
    return Rollout(case=case, policy_snapshot_id="recorded", messages=[
        Message.text("user", f"Question number {i}: can I change my flight?"),
        Message.text("assistant", f"Answer {i}: no.")],
        evaluation=RubricEvaluation(passed=False, score=0.5))


@pytest.mark.parametrize("kind", ["bare", "work tree"])
def test_a_streaming_run_leaves_a_clean_repository(kind: str, bare_repo: ExperienceRepository,
                                                   seeded_repo: ExperienceRepository) -> None:
    repo = bare_repo if kind == "bare" else seeded_repo
    model = ScriptedChatModel([Step("analyze", analyze) for _ in range(ROLLOUTS)]
                              + [Step("estimate", estimate) for _ in range(ROLLOUTS)]
                              + [Step("merge", merge) for _ in range(ROLLOUTS)])
    llm = StructuredLLM(model, UsageMeter())
    engine = PolicyTrainingEngine(repo, PatchMergePolicyOptimizer(repo, llm),
                                  GitPolicyUpdater(repo))
    trainer = StreamingPolicyTrainer(TrajectoryRolloutAnalyzer(repo, llm),
                                     ExperienceGradientEstimator(repo, llm), engine,
                                     max_gradients_per_update=4, max_wait_seconds=0.5,
                                     timer_check_interval_seconds=0.05)
    context = PipelineContext(mode="apply")

    async def run() -> list[object]:
        results = await asyncio.gather(*(trainer.submit_rollout(rollout(i), context)
                                         for i in range(ROLLOUTS)))
        await trainer.close()
        return list(results)

    results = asyncio.run(run())
    assert all(not r.errors for r in results)  # type: ignore[attr-defined]
    merges = sum(1 for stage, _, _ in model.calls if stage == "merge")
    assert merges == trainer.batches_applied
    gradients = {g.metadata.commit for r in results for g in r.gradients}  # type: ignore[attr-defined]
    assert len(gradients) == ROLLOUTS
    cited = {sha for p in list_proposals(repo, ("applied",)) for sha in p.gradient_commits}
    assert gradients <= cited  # no lost update
    targets = {g.target_experience_name for r in results for g in r.gradients}  # type: ignore[attr-defined]
    assert len(targets) == ROLLOUTS and targets <= set(repo.snapshot().names())
    assert len(TrajectoryStore(repo).ids()) == ROLLOUTS
    path = Path(repo.git.work_tree or repo.git.git_dir)
    assert int(git(path, "rev-list", "--count", "refs/heads/expgit/trajectories")) == ROLLOUTS
    fsck(path)
