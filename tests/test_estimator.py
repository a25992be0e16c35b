"""ExperienceGradientEstimator: edits -> gradient commits, invalid edits dropped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import fsck, git

from expgit.gradients import find_gradient, list_gradients
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.repository import ExperienceRepository
from expgit.snapshot import ExperienceEntry, Snapshot
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.context import PipelineContext
from expgit.train.domain import (
    Case,
    Message,
    Rollout,
    RolloutAnalysis,
    Rubric,
    RubricEvaluation,
    Trajectory,
)
from expgit.train.trajectory_store import TrajectoryStore

TRAJECTORY = """---
name: 0123456789abcdef
outcome: failure
---
# Cancelled an ineligible economy booking

## Lessons

- Check the 24-hour rule and insurance before cancelling.
"""

NEW_FILE = """---
name: confirm-refund-amount
status: active
summary: State the refund amount and method before any cancellation.
tags: [refunds]
metadata: {}
---
# Confirm the refund amount

When: a cancellation is eligible.

Procedure:
1. State the amount and the method, then ask for an explicit yes.
"""


class FixedRanker:
    """Shows exactly the named experiences (a stand-in for the lexical ranker)."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.queries: list[str] = []

    async def rank(self, query: str, snapshot: Snapshot, k: int) -> list[ExperienceEntry]:
        self.queries.append(query)
        return [snapshot.entries[n] for n in self.names][:k]


def analysis_for(repo: ExperienceRepository) -> RolloutAnalysis:
    uri, _ = TrajectoryStore(repo).store("0123456789abcdef", TRAJECTORY, "trajectory")
    case = Case(name="c", task_signature="airline.cancel", input={}, rubric=Rubric(name="r"))
    rollout = Rollout(case=case, messages=[Message.text("user", "cancel")],
                      policy_snapshot_id="s")
    return RolloutAnalysis(
        rollout=rollout, evaluation=RubricEvaluation(passed=False, score=0.0),
        trajectory=Trajectory(name="0123456789abcdef", uri=uri, content=TRAJECTORY,
                              outcome="failure", retrieval_anchor="cancel eligibility"))


def estimator(repo: ExperienceRepository, edits: list[dict[str, Any]], ranker: Any
              ) -> tuple[ExperienceGradientEstimator, ScriptedChatModel]:
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": edits}))])
    return ExperienceGradientEstimator(repo, StructuredLLM(model, UsageMeter()), ranker), model


def edit(name: str, action: str, content: str | None, confidence: float = 0.7
         ) -> dict[str, Any]:
    return {"name": name, "action": action, "content": content,
            "rationale": f"{action} {name} because the trajectory failed",
            "confidence": confidence}


def test_valid_edits_become_gradient_commits_with_the_trajectory_as_evidence(
        seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    snapshot = seeded_repo.snapshot()
    current = snapshot.entries["cancellation-eligibility-rules"].text
    updated = current + "- Check the 24-hour rule before anything else.\n"
    analysis = analysis_for(seeded_repo)
    ranker = FixedRanker("cancellation-eligibility-rules", "compensation-certificates")
    est, model = estimator(seeded_repo, [
        edit("cancellation-eligibility-rules", "update", updated, 0.8),
        edit("confirm-refund-amount", "create", f"```markdown\n{NEW_FILE}```", 0.6),
        edit("compensation-certificates", "delete", None, 0.3),
    ], ranker)
    gradients = asyncio.run(est.estimate(analysis, snapshot, PipelineContext()))

    model.assert_done()
    assert len(model.calls) == 1 and model.calls[0][0] == "estimate"
    assert analysis.metadata["rejected_edits"] == []
    assert [g.target_experience_name for g in gradients] == [
        "cancellation-eligibility-rules", "confirm-refund-amount", "compensation-certificates"]
    uri = analysis.trajectory.uri  # type: ignore[union-attr]
    for g in gradients:
        assert g.gradient_id and g.evidence_trajectory_uris == [uri]
        core = find_gradient(seeded_repo, g.gradient_id)
        assert core.evidence == [uri] and core.parent == main
        assert core.confidence == g.confidence and core.base_version == g.base_version
        assert core.base_blob == g.base_blob
    update, create, delete = gradients
    assert update.before is not None and update.before.content == current
    assert update.after is not None and update.after.content == updated
    assert update.base_blob == snapshot.entries["cancellation-eligibility-rules"].blob
    assert update.base_version == snapshot.entries["cancellation-eligibility-rules"].version
    assert update.confidence == 0.8
    assert create.before is None and create.base_version == 0 and create.base_blob is None
    assert create.after is not None and create.after.content == NEW_FILE  # fence removed
    assert delete.after is None and delete.before is not None

    path = seeded_repo.git.work_tree
    assert path is not None
    trailers = git(path, "show", "-s", "--format=%(trailers:key=Expgit-Evidence,valueonly)",
                   f"refs/heads/expgit/gradients/{update.gradient_id}")
    assert trailers.strip() == uri
    assert seeded_repo.main_commit() == main
    fsck(path)

    user = model.calls[0][1][1]["content"]
    system = model.calls[0][1][0]["content"]
    assert TRAJECTORY.strip() in user and current in user
    assert "800 tokens" in system and "name: <name>" in system
    assert "cancel eligibility" in ranker.queries[0]


def test_invalid_edits_are_dropped_with_reasons(seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    snapshot = seeded_repo.snapshot()
    current = snapshot.entries["cancellation-eligibility-rules"].text
    mismatch = NEW_FILE.replace("name: confirm-refund-amount", "name: other-name")
    est, _ = estimator(seeded_repo, [
        edit("Bad Name", "create", NEW_FILE),
        edit("confirm-refund-amount", "create", mismatch),
        edit("confirm-refund-amount", "create", NEW_FILE + "x" * 4000),
        edit("cancellation-eligibility-rules", "update", current),
        edit("never-existed", "delete", None),
        edit("cancellation-eligibility-rules", "create", NEW_FILE),
        edit("refund-method-rules", "update", current),
        edit("confirm-refund-amount", "create", "no front matter\n"),
        edit("confirm-refund-amount", "create", None),
        edit("confirm-refund-amount", "create", NEW_FILE),  # the one valid edit
        edit("confirm-refund-amount", "create", NEW_FILE.replace("yes", "YES")),
    ], FixedRanker("cancellation-eligibility-rules"))
    analysis = analysis_for(seeded_repo)
    gradients = asyncio.run(est.estimate(analysis, snapshot, PipelineContext()))

    assert [g.target_experience_name for g in gradients] == ["confirm-refund-amount"]
    assert list_gradients(seeded_repo)[0].id == gradients[0].gradient_id
    reasons = analysis.metadata["rejected_edits"]
    assert len(reasons) == 10
    expected = ["invalid experience name", "differs from the file name", "over the budget",
                "identical to main", "delete of an experience that does not exist",
                "already exists", "not shown", "missing front matter",
                "create without content", "a second edit of the same experience"]
    for reason, fragment in zip(reasons, expected, strict=True):
        assert fragment in reason, (reason, fragment)
    assert len(list_gradients(seeded_repo)) == 1
    assert seeded_repo.main_commit() == main


def test_no_trajectory_means_no_call(seeded_repo: ExperienceRepository) -> None:
    analysis = analysis_for(seeded_repo)
    analysis.trajectory = None
    model = ScriptedChatModel([])
    est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()),
                                      FixedRanker())
    assert asyncio.run(est.estimate(analysis, seeded_repo.snapshot(), PipelineContext())) == []
    assert model.calls == []


def test_the_default_lexical_ranker_shows_relevant_files(
        seeded_repo: ExperienceRepository) -> None:
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
    est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()))
    gradients = asyncio.run(est.estimate(analysis_for(seeded_repo), seeded_repo.snapshot(),
                                         PipelineContext()))
    assert gradients == []
    user = model.calls[0][1][1]["content"]
    assert "### cancellation-eligibility-rules" in user
    assert user.count("\n### ") == seeded_repo.settings.train.relevant_experiences
