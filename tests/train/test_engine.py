"""PolicyTrainingEngine with the patch-merge optimizer and the git/dry-run updaters."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from conftest import fsck, git, repo_state

from expgit.core.domain import PolicyPlanItem, PolicyUpdatePlan, SemanticGradient
from expgit.errors import ConflictError, LockHeldError
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, list_gradients, propose
from expgit.store.workflow.proposals import list_proposals
from expgit.train.components.gradient_estimator import to_semantic
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.components.policy_updater import GitPolicyUpdater
from expgit.train.context import PipelineContext
from expgit.train.engine import PolicyTrainingEngine
from expgit.train.interfaces import PolicyUpdater

URI = "expgit/trajectories:trajectories/0123456789abcdef.md"
NAME = "flight-change-rules"


def path_of(repo: ExperienceRepository) -> Path:
    assert repo.git.work_tree is not None
    return repo.git.work_tree


def gradients(repo: ExperienceRepository) -> tuple[list[SemanticGradient], str]:
    """Two real gradient commits on the same experience, and the merged content."""
    text = repo.snapshot().entries[NAME].text
    found = []
    for line in ("- Check fare rules first.\n", "- Never change basic economy.\n"):
        g = propose(repo, GradientRequest(name=NAME, content=text + line,
                                          rationale=f"add {line.strip()}", evidence=[URI],
                                          confidence=0.7))
        found.append(to_semantic(g, URI))
    return found, text + "- Check fare rules first.\n- Never change basic economy.\n"


def engine(repo: ExperienceRepository, merged: str | None, ids: list[str],
           updater: PolicyUpdater | None = None
           ) -> tuple[PolicyTrainingEngine, ScriptedChatModel]:
    # the merge writes fields; expgit keeps the front matter: the body is enough
    steps = [] if merged is None else [Step("merge", json.dumps({"items": [{
        "name": NAME, "action": "upsert", "gradient_ids": ids, "rationale": "both rules",
        "summary": "", "tags": [], "body": merged.split("\n---\n", 1)[1],
        "confidence": 0.8}]}))]
    model = ScriptedChatModel(steps)
    llm = StructuredLLM(model, UsageMeter())
    return PolicyTrainingEngine(repo, PatchMergePolicyOptimizer(repo, llm),
                                updater or GitPolicyUpdater(repo)), model


def run(eng: PolicyTrainingEngine, grads: list[SemanticGradient],
        mode: Literal["propose", "apply"]) -> Any:
    return asyncio.run(eng.plan_and_apply(grads, PipelineContext(mode=mode)))


def test_propose_mode_makes_a_proposal_and_leaves_main(seeded_repo: ExperienceRepository,
                                                       tmp_path: Path) -> None:
    grads, merged = gradients(seeded_repo)
    ids = [g.gradient_id or "" for g in grads]
    main = seeded_repo.main_commit()
    body = tmp_path / "pr.md"
    eng, model = engine(seeded_repo, merged, ids, GitPolicyUpdater(seeded_repo, body))
    plan, result = run(eng, grads, "propose")

    model.assert_done()
    assert seeded_repo.main_commit() == main
    assert [i.gradient_ids for i in plan.items] == [ids]
    assert result.proposal_id and result.applied_commit is None and result.errors == []
    assert result.written == [NAME] and result.deleted == []
    assert result.updated_policy_set.commit == main
    [proposal] = list_proposals(seeded_repo)
    assert proposal.id == result.proposal_id and proposal.base == main
    assert sorted(proposal.gradient_commits) == sorted(
        g.metadata.commit or "" for g in grads)
    path = path_of(seeded_repo)
    assert git(path, "show", f"expgit/proposals/{proposal.id}:experiences/{NAME}.md") == merged
    text = body.read_text()
    assert "Never change basic economy" in text and URI in text and NAME in text
    assert "with the llm patch-merge merger" in text
    assert seeded_repo.lock().holder() is None  # released
    fsck(path)


def test_apply_mode_moves_main(seeded_repo: ExperienceRepository) -> None:
    grads, merged = gradients(seeded_repo)
    ids = [g.gradient_id or "" for g in grads]
    dropped = to_semantic(propose(seeded_repo, GradientRequest(
        name="refund-method-rules", delete=True, rationale="not needed")), URI)
    main = seeded_repo.main_commit()
    eng, model = engine(seeded_repo, merged, ids)
    plan, result = run(eng, [*grads, dropped], "apply")
    assert plan.metadata.dropped_gradient_ids == [dropped.gradient_id]

    model.assert_done()
    new_main = seeded_repo.main_commit()
    assert new_main != main and result.applied_commit == new_main
    assert result.errors == []
    assert seeded_repo.snapshot().entries[NAME].text == merged
    assert result.updated_policy_set.commit == new_main
    assert result.updated_policy_set.snapshot_id == seeded_repo.snapshot().id
    assert "refund-method-rules" in seeded_repo.snapshot()  # the dropped edit is not made
    # every gradient the merger saw is closed with the proposal, the dropped one too
    assert list_proposals(seeded_repo) == [] and list_gradients(seeded_repo) == []
    assert len(list_gradients(seeded_repo, ("applied",))) == 3
    assert {p.id for p in list_proposals(seeded_repo, ("applied",))} == {result.proposal_id}
    fsck(path_of(seeded_repo))


def test_no_gradients_no_call_no_commit(seeded_repo: ExperienceRepository) -> None:
    before = repo_state(path_of(seeded_repo))
    eng, model = engine(seeded_repo, None, [])
    plan, result = run(eng, [], "apply")
    assert model.calls == [] and plan.items == []
    assert result.proposal_id is None and result.applied_commit is None
    assert result.updated_policy_set.commit == seeded_repo.main_commit()
    assert repo_state(path_of(seeded_repo)) == before


def test_an_empty_plan_commits_nothing(seeded_repo: ExperienceRepository) -> None:
    grads, _ = gradients(seeded_repo)
    before = repo_state(path_of(seeded_repo))
    model = ScriptedChatModel([Step("merge", json.dumps({"items": []}))])
    llm = StructuredLLM(model, UsageMeter())
    eng = PolicyTrainingEngine(seeded_repo, PatchMergePolicyOptimizer(seeded_repo, llm),
                               GitPolicyUpdater(seeded_repo))
    plan, result = run(eng, grads, "apply")
    assert plan.items == [] and result.proposal_id is None
    assert plan.metadata.dropped_gradient_ids == [g.gradient_id for g in grads]
    assert repo_state(path_of(seeded_repo)) == before


def test_a_plan_made_on_other_content_is_refused(seeded_repo: ExperienceRepository) -> None:
    before = repo_state(path_of(seeded_repo))
    plan = PolicyUpdatePlan(items=[PolicyPlanItem(
        kind="upsert_experience", target_experience_name=NAME, before_content="stale\n",
        after_content="whatever\n")])
    with pytest.raises(ConflictError, match=NAME):
        asyncio.run(GitPolicyUpdater(seeded_repo).apply(plan, seeded_repo.snapshot(),
                                                        PipelineContext(mode="apply")))
    assert repo_state(path_of(seeded_repo)) == before


HOLDER = """
import sys, time
from pathlib import Path
from expgit.store.lock import RepoLock
lock = RepoLock(Path(sys.argv[1]), wait_seconds=5, stale_seconds=600, purpose="test holder")
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


def hold_lock(repo: ExperienceRepository, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo.git.common_dir),
                             str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def with_lock_wait(repo: ExperienceRepository, seconds: float) -> ExperienceRepository:
    return ExperienceRepository(repo.git, repo.settings.model_copy(
        update={"lock_wait_seconds": seconds}))


def test_a_lock_held_by_another_process_fails_after_the_wait(
        seeded_repo: ExperienceRepository) -> None:
    grads, merged = gradients(seeded_repo)
    repo = with_lock_wait(seeded_repo, 0.3)
    before = repo_state(path_of(repo))
    holder = hold_lock(repo, 30)
    try:
        eng, model = engine(repo, merged, [g.gradient_id or "" for g in grads])
        with pytest.raises(LockHeldError, match="test holder"):
            run(eng, grads, "apply")
        assert model.calls == []  # nothing planned without the lock
        assert repo_state(path_of(repo)) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_lock_released_during_the_wait_is_taken(seeded_repo: ExperienceRepository) -> None:
    grads, merged = gradients(seeded_repo)
    repo = with_lock_wait(seeded_repo, 20)
    holder = hold_lock(repo, 0.5)
    try:
        eng, model = engine(repo, merged, [g.gradient_id or "" for g in grads])
        _, result = run(eng, grads, "apply")
        model.assert_done()
        assert result.applied_commit == repo.main_commit()
    finally:
        holder.wait(timeout=30)
