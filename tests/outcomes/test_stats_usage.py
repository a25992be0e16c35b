"""Experience usage and statistics: a small train run with the strict scripted LLM, outcome
records on its rollouts, trajectories and experiences, the roll-up, ``list --stats`` and
the estimator's prompt."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import git
from json_shapes import assert_shape
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE, Handles, script

from expgit.core.domain import (
    Message,
    Rollout,
    RolloutAnalysis,
    RubricEvaluation,
    Trajectory,
)
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.outcomes.records import OutcomeRequest
from expgit.outcomes.stats import experience_stats, trajectory_row
from expgit.outcomes.store import OutcomeStore
from expgit.retrieval.usage import UsedExperience, read_usage
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import ListCaseLoader
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.trajectory_analyzer import read_front_matter
from expgit.train.context import PipelineContext
from expgit.train.measurement.track_record import track_record
from expgit.train.records.trajectory_store import TrajectoryStore

ACTIVE = ["cancellation-eligibility-rules", "checked-baggage-allowance",
          "confirm-before-write-actions", "flight-change-rules", "refund-method-rules",
          "verify-identity-before-account-changes", "when-to-transfer-to-human"]


def train_once(repo: ExperienceRepository) -> dict[str, str]:
    """One propose-mode train run on the baggage case (passes) and the pets case (fails);
    the stored trajectory id of each case."""
    chat = script(repo)
    pipeline = build_pipeline(repo, Handles(StructuredLLM(chat, UsageMeter())))
    asyncio.run(pipeline.train(ListCaseLoader([BAGGAGE_CASE, PETS_CASE], 8),
                               PipelineContext(mode="propose")))
    chat.assert_done()
    store = TrajectoryStore(repo)
    return {str(read_front_matter(store.find(tid) or "", tid)["case"]): tid
            for tid in store.ids()}


def add(repo: ExperienceRepository, key: str, kind: str, target: str, verdict: str,
        score: float) -> None:
    OutcomeStore(repo).add(OutcomeRequest.model_validate(
        {"target_kind": kind, "target_id": target, "verdict": verdict, "score": score,
         "source": "test"}), key)


@pytest.fixture
def trained(seeded_repo: ExperienceRepository) -> tuple[ExperienceRepository, dict[str, str]]:
    ids = train_once(seeded_repo)
    assert set(ids) == {BAGGAGE_CASE.name, PETS_CASE.name}
    return seeded_repo, ids


def test_trajectories_record_the_experiences_used_and_the_evaluation(
        trained: tuple[ExperienceRepository, dict[str, str]]) -> None:
    repo, ids = trained
    snapshot = repo.snapshot()
    document = TrajectoryStore(repo).find(ids[BAGGAGE_CASE.name]) or ""
    front = read_front_matter(document, "baggage")
    used = front["experiences_used"]
    assert sorted(u["name"] for u in used) == ACTIVE  # a small library is shown whole
    assert all(u["blob"] == snapshot.entries[u["name"]].blob for u in used)  # versions
    assert used[0]["name"] == "checked-baggage-allowance"  # the most relevant first
    assert used[0]["reason"].startswith("rank 1 (bm25 score ") and used[0]["score"] > 0
    assert front["evaluation"]["passed"] is True and front["evaluation"]["score"] == 1.0
    assert front["analyzed_at"]
    pets = read_front_matter(TrajectoryStore(repo).find(ids[PETS_CASE.name]) or "", "pets")
    assert pets["evaluation"]["passed"] is False


def test_stats_roll_up_evaluations_and_outcomes(
        trained: tuple[ExperienceRepository, dict[str, str]]) -> None:
    repo, ids = trained
    before = experience_stats(repo)
    assert set(before) == set(ACTIVE)  # the draft was never shown
    bags = before["checked-baggage-allowance"]
    assert (bags.times_used, bags.passed, bags.failed, bags.helpful, bags.harmful) == \
        (2, 1, 1, 0, 0)
    assert bags.mean_score == pytest.approx(0.5) and bags.last_used is not None
    assert experience_stats(repo) == before  # cached by the branch tips: same answer

    store = TrajectoryStore(repo)
    add(repo, "k1", "rollout", ids[PETS_CASE.name], "harmful", 0.0)
    add(repo, "k2", "trajectory", store.uri_of(ids[BAGGAGE_CASE.name]), "pass", 1.0)
    add(repo, "k3", "experience", "checked-baggage-allowance", "helpful", 0.9)
    add(repo, "k4", "experience", "refund-method-rules", "neutral", 0.5)
    after = experience_stats(repo)  # the outcomes branch moved: recomputed
    bags = after["checked-baggage-allowance"]
    assert (bags.helpful, bags.harmful, bags.outcomes) == (2, 1, 3)
    assert (bags.times_used, bags.passed, bags.failed) == (2, 1, 1)  # evaluations only
    refunds = after["refund-method-rules"]
    assert (refunds.helpful, refunds.harmful, refunds.outcomes) == (1, 1, 3)
    flights = after["flight-change-rules"]
    assert (flights.helpful, flights.harmful, flights.outcomes) == (1, 1, 2)
    line = track_record(bags)
    assert line.startswith("in the agent's context for 2 evaluated runs: 1 passed, 1 failed")
    assert "2 helpful, 1 harmful" in line and len(line) <= 240


def test_list_stats_cli(trained: tuple[ExperienceRepository, dict[str, str]],  # type: ignore[no-untyped-def]
                        run_cli, tmp_path: Path) -> None:
    repo, ids = trained
    add(repo, "k1", "rollout", ids[PETS_CASE.name], "fail", 0.0)
    path = tmp_path / "repo"
    refs = git(path, "for-each-ref")
    result = run_cli("-C", path, "list", "--stats", "--json")
    assert result.code == 0, result.err
    listed = json.loads(result.out)
    assert_shape("list --stats", listed)
    rows = {r["name"]: r for r in listed["experiences"]}
    assert type(rows["checked-baggage-allowance"]["stats"]["last_used"]) is int  # seconds
    assert rows["checked-baggage-allowance"]["stats"] | {"last_used": None} == {
        "name": "checked-baggage-allowance", "times_used": 2, "passed": 1, "failed": 1,
        "helpful": 0, "harmful": 1, "outcomes": 1, "mean_score": 0.5, "last_used": None,
        "predictions": {"hits": 0, "misses": 0, "hit_rate": None}}  # no candidate eval
    assert rows["compensation-certificates"]["stats"]["times_used"] == 0
    table = run_cli("-C", path, "list", "--stats")
    assert table.code == 0
    header, *lines = table.out.splitlines()
    assert header.split()[:9] == ["NAME", "STATUS", "VER", "USED", "PASS", "FAIL", "HELP",
                                  "HARM", "MEAN"]
    bags = next(line for line in lines if line.startswith("checked-baggage-allowance "))
    assert bags.split()[3:9] == ["2", "1", "1", "0", "1", "0.50"]
    plain = run_cli("-C", path, "list", "--json")
    assert "stats" not in json.loads(plain.out)["experiences"][0]
    assert git(path, "for-each-ref") == refs  # reads only


def test_the_estimator_prompt_shows_each_experience_track_record(
        trained: tuple[ExperienceRepository, dict[str, str]]) -> None:
    repo, ids = trained
    add(repo, "k1", "experience", "checked-baggage-allowance", "harmful", 0.1)
    tid = ids[BAGGAGE_CASE.name]
    store = TrajectoryStore(repo)
    content = store.find(tid) or ""
    analysis = RolloutAnalysis(
        rollout=Rollout(case=BAGGAGE_CASE, policy_snapshot_id="s", messages=[
            Message.text("user", str(BAGGAGE_CASE.input["user_query"])),
            Message.text("assistant", "3 free checked bags")]),
        evaluation=RubricEvaluation(passed=True, score=1),
        trajectory=Trajectory(name=tid, uri=store.uri_of(tid), content=content,
                              outcome="success",
                              retrieval_anchor="checked baggage allowance gold economy"))
    chat = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
    meter = UsageMeter()
    estimator = ExperienceGradientEstimator(repo, StructuredLLM(chat, meter),
                                            relevant_experiences=2,
                                            usage_stats=experience_stats)
    assert asyncio.run(estimator.estimate(analysis, repo.snapshot(), PipelineContext())) == []
    chat.assert_done()
    assert {s: u.calls for s, u in meter.by_stage().items()} == {"estimate": 1}
    user = chat.calls[0][1][-1]["content"]
    # ranked by the document, not by the usage list in its front matter: baggage first
    assert user.split("\n### ")[1].startswith("checked-baggage-allowance ")
    section = user.split("### checked-baggage-allowance ")[1].split("\n### ")[0]
    assert ("Track record: in the agent's context for 2 evaluated runs: 1 passed, 1 failed; "
            "mean score 0.50; outcome reports: 0 helpful, 1 harmful; last used ") in section
    assert user.count("Track record: ") == 2
    # switched off: no statistics at all
    quiet = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
    asyncio.run(ExperienceGradientEstimator(
        repo, StructuredLLM(quiet, UsageMeter()), relevant_experiences=2,
        usage_stats=None).estimate(analysis, repo.snapshot(), PipelineContext()))
    assert "Track record: no recorded use yet" in quiet.calls[0][1][-1]["content"]



def test_usage_records_are_read_leniently() -> None:
    assert read_usage({"experiences_used": [
        "a", {"name": "b", "blob": "f" * 40}, {"name": "a", "blob": "x"}, {"blob": "y"}, 3,
        " ", {"name": "c", "blob": 7}]}) == [
        UsedExperience(name="a"), UsedExperience(name="b", blob="f" * 40),
        UsedExperience(name="c")]
    assert read_usage({}) == read_usage({"experiences_used": "a"}) == []
    assert trajectory_row("t", "---\nname: t\n---\nno usage\n") is None
    assert trajectory_row("t", "not a document") is None
    row = trajectory_row("t", "---\nexperiences_used: [x, {name: y}]\nevaluation: "
                              "{passed: false, score: 0.25}\n---\n")
    assert row is not None and (row.experiences, row.passed, row.score) == (
        ("x", "y"), False, 0.25)
