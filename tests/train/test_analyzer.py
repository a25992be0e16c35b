"""TrajectoryRolloutAnalyzer with the strict scripted LLM on a seeded repository."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import fsck, git

from expgit.core.domain import (
    Case,
    CriterionResult,
    Message,
    Rollout,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
    TextPart,
    ToolPart,
)
from expgit.errors import InvalidInputError
from expgit.llm.port import LLMOutputError, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.outcomes.stats import trajectory_row
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import (
    CHARS_PER_TOKEN,
    LOCAL_ANALYSIS_LIMITS,
    AnalysisLimits,
    schema_chars,
)
from expgit.train.components.llm_outputs import analyze_output
from expgit.train.components.trajectory_analyzer import (
    TrajectoryRolloutAnalyzer,
    outcome_of,
    read_front_matter,
    truncate,
)
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import TrajectoryStore, rollout_id
from expgit.train.records.transcript import read_transcript

BRANCH = "refs/heads/expgit/trajectories"
REPLY = {
    "title": "Cancelled an ineligible economy booking",
    "outcome": "failure",
    "summary": "The user asked to cancel; the agent cancelled without checking eligibility.",
    "key_steps": ["Loaded the reservation", "Cancelled it"],
    "mistakes": ["Skipped the 24-hour and insurance checks"],
    "lessons": ["Check cancellation eligibility before calling cancel_reservation"],
    "retrieval_anchor": "cancel reservation eligibility economy insurance",
}


def llm(*replies: str) -> tuple[StructuredLLM, ScriptedChatModel]:
    model = ScriptedChatModel([Step("analyze", r) for r in replies])
    return StructuredLLM(model, UsageMeter()), model


def make_rollout(output: str = "status: confirmed", evaluation: RubricEvaluation | None = None,
                 messages: list[Message] | None = None) -> Rollout:
    case = Case(name="cancel-1", task_signature="airline.cancel",
                input={"user_query": "Please cancel reservation ABC123"},
                rubric=Rubric(name="cancel", criteria=[
                    RubricCriterion(name="denied", description="refuse the cancellation")]))
    if messages is None:
        messages = [
            Message.text("user", "Please cancel reservation ABC123"),
            Message(role="assistant", parts=[
                TextPart(text="Let me look it up."),
                ToolPart(tool_id="t1", tool_name="get_reservation_details",
                         tool_input={"reservation_id": "ABC123"}, tool_output=output)]),
            Message.text("assistant", "Your reservation is cancelled."),
        ]
    return Rollout(case=case, messages=messages, policy_snapshot_id="snap",
                   evaluation=evaluation)


FAILED = RubricEvaluation(passed=False, score=0.0, feedback=["cancelled an ineligible trip"],
                          criterion_results=[CriterionResult(
                              criterion_name="denied", passed=False, score=0.0,
                              feedback=["the agent cancelled"])])


class FakeEvaluator:
    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, rollout: Rollout, context: PipelineContext) -> RubricEvaluation:
        self.calls += 1
        return RubricEvaluation(passed=True, score=0.75, feedback=["evaluator says mostly ok"])


def analyze(analyzer: TrajectoryRolloutAnalyzer, rollout: Rollout) -> Any:
    return asyncio.run(analyzer.analyze(rollout, PipelineContext()))


def tool_output_chars(repo: ExperienceRepository, limit: int) -> ExperienceRepository:
    """``repo`` with ``[train] tool_output_chars = limit``."""
    settings = repo.settings.model_copy(update={
        "train": repo.settings.train.model_copy(update={"tool_output_chars": limit})})
    return ExperienceRepository(repo.git, settings)


def prompt_of(model: ScriptedChatModel, index: int = 0) -> str:
    prompt: str = model.calls[index][1][1]["content"]
    return prompt


def test_rollout_evaluation_wins_and_the_trajectory_lands_on_its_branch(
        seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    structured, model = llm(json.dumps(REPLY))
    evaluator = FakeEvaluator()
    analyzer = TrajectoryRolloutAnalyzer(seeded_repo, structured, evaluator)
    rollout = make_rollout(evaluation=FAILED)
    result = analyze(analyzer, rollout)

    model.assert_done()
    assert len(model.calls) == 1 and model.calls[0][0] == "analyze"
    assert evaluator.calls == 0
    assert result.evaluation == FAILED
    assert result.metadata.evaluation_source == "rollout"
    user = prompt_of(model)
    assert "passed: no" in user and "cancelled an ineligible trip" in user
    assert "get_reservation_details" in user and "Please cancel reservation ABC123" in user

    trajectory = result.trajectory
    tid = rollout_id(rollout)
    assert trajectory.uri == f"expgit/trajectories:trajectories/{tid[:2]}/{tid}.md"
    assert trajectory.outcome == "failure"
    assert trajectory.retrieval_anchor == REPLY["retrieval_anchor"]
    assert trajectory.content == TrajectoryStore(seeded_repo).read(trajectory.uri)
    for text in (REPLY["title"], REPLY["summary"], REPLY["lessons"][0], REPLY["mistakes"][0]):
        assert text in trajectory.content
    front = read_front_matter(trajectory.content, trajectory.uri)
    assert front["outcome"] == "failure" and front["evaluation"]["score"] == 0.0

    assert seeded_repo.main_commit() == main
    path = seeded_repo.git.work_tree
    assert path is not None
    assert git(path, "show", f"{BRANCH}:trajectories/{tid[:2]}/{tid}.md") == trajectory.content
    fsck(path)


def test_the_evaluator_is_used_when_the_rollout_has_no_evaluation(
        seeded_repo: ExperienceRepository) -> None:
    structured, model = llm(json.dumps(REPLY))
    evaluator = FakeEvaluator()
    result = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured, evaluator),
                     make_rollout())
    assert evaluator.calls == 1
    assert result.evaluation.score == 0.75
    assert result.metadata.evaluation_source == "evaluator"
    assert "evaluator says mostly ok" in prompt_of(model)


def test_fallback_evaluation_passes_iff_a_trajectory_was_extracted(
        seeded_repo: ExperienceRepository) -> None:
    structured, model = llm(json.dumps(REPLY))
    result = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), make_rollout())
    assert "No evaluation is available" in prompt_of(model)
    assert result.trajectory is not None
    assert result.evaluation.passed and result.evaluation.score == 1.0
    assert "fallback" in result.evaluation.feedback[0]
    assert result.metadata.evaluation_source == "fallback"

    empty, silent = llm()
    nothing = analyze(TrajectoryRolloutAnalyzer(seeded_repo, empty),
                      make_rollout(messages=[Message(role="assistant", parts=[])]))
    assert silent.calls == []
    assert nothing.trajectory is None
    assert not nothing.evaluation.passed and nothing.evaluation.score == 0.0
    assert "fallback" in nothing.evaluation.feedback[0]


def test_long_tool_outputs_are_truncated_before_the_prompt(
        seeded_repo: ExperienceRepository) -> None:
    repo = tool_output_chars(seeded_repo, 200)
    long_output = "HEAD-" + "x" * 5000 + "-TAIL"
    structured, model = llm(json.dumps(REPLY))
    analyze(TrajectoryRolloutAnalyzer(repo, structured), make_rollout(output=long_output))
    user = prompt_of(model)
    assert long_output not in user
    assert f"[... {len(long_output) - 200} chars truncated]" in user
    assert "HEAD-" in user and "-TAIL" in user  # head and tail are kept
    assert truncate("short", 200) == "short"


def test_a_second_analysis_of_the_same_rollout_makes_no_call(
        seeded_repo: ExperienceRepository) -> None:
    structured, _ = llm(json.dumps(REPLY))
    rollout = make_rollout(evaluation=FAILED)
    first = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), rollout)
    tip = seeded_repo.git.ref(BRANCH)

    again_llm, again_model = llm()  # no step: any call fails the test
    evaluator = FakeEvaluator()
    second = analyze(TrajectoryRolloutAnalyzer(seeded_repo, again_llm, evaluator),
                     rollout.model_copy(deep=True))
    assert again_model.calls == [] and evaluator.calls == 0
    assert second.metadata.reused is True
    assert second.trajectory == first.trajectory
    assert second.evaluation == first.evaluation
    assert seeded_repo.git.ref(BRANCH) == tip

    # without an evaluation on the rollout, the stored one is reused (no evaluator call)
    structured, _ = llm(json.dumps(REPLY))
    bare = make_rollout(output="other")
    stored = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), bare)
    third = analyze(TrajectoryRolloutAnalyzer(seeded_repo, llm()[0], evaluator), bare)
    assert evaluator.calls == 0
    assert third.evaluation == stored.evaluation
    assert third.metadata.evaluation_source == "stored"


def test_invalid_json_is_repaired_once(seeded_repo: ExperienceRepository) -> None:
    structured, model = llm("this is not json", json.dumps(REPLY))
    result = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), make_rollout())
    model.assert_done()
    assert len(model.calls) == 2  # the ask and its one repair round
    assert "That reply was invalid" in model.calls[1][1][-1]["content"]
    assert result.trajectory is not None and result.trajectory.outcome == "failure"


def test_a_failed_call_raises_and_stores_nothing(seeded_repo: ExperienceRepository) -> None:
    structured, _ = llm("nope", json.dumps({"title": "x"}))
    with pytest.raises(LLMOutputError):
        analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), make_rollout())
    assert seeded_repo.git.ref(BRANCH) is None


def test_the_reply_is_bounded_and_the_outcome_follows_the_evaluation(
        seeded_repo: ExperienceRepository) -> None:
    rambling = {**REPLY, "outcome": "success",
                "summary": " ".join(f"The agent read rule {i} of the policy." for i in range(60)),
                "key_steps": [f"step {i} read the booking" for i in range(30)],
                "lessons": [f"check eligibility rule {i}" for i in range(9)]}
    structured, model = llm(json.dumps(rambling))
    result = analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured),
                     make_rollout(evaluation=FAILED))
    model.assert_done()
    assert len(model.calls) == 1  # soft bounds are clipped, not refused
    trajectory = result.trajectory
    assert trajectory.outcome == "failure"  # the evaluation wins over the model
    assert read_front_matter(trajectory.content, trajectory.uri)["outcome"] == "failure"
    limits = AnalysisLimits()
    # clipped after its last whole sentence within the bound, with no "…"
    summary = trajectory.content.split("## Summary\n\n", 1)[1].split("\n", 1)[0]
    assert limits.summary_chars // 2 <= len(summary) <= limits.summary_chars
    assert summary.startswith("The agent read rule 0 of") and summary.endswith("policy.")
    assert "rule 59" not in trajectory.content
    assert "step 9 " in trajectory.content and "step 10 " not in trajectory.content
    assert trajectory.content.count("check eligibility rule") == limits.max_lessons

    # on the wire, no length or count bounds (grammar servers cannot compile long ones);
    # the output model keeps them, and they are enforced on the reply (clipped above)
    schema = model.calls[0][2]["json_schema"]["schema"]  # type: ignore[index]
    props = schema["properties"]
    assert schema["title"] == "AnalyzeOutput" and schema["required"] == list(REPLY)
    assert props["summary"] == {"type": "string"}
    assert props["key_steps"] == {"items": {"type": "string"}, "type": "array"}
    assert props["title"]["minLength"] == 1
    full = analyze_output(limits).model_json_schema()["properties"]
    assert full["summary"] == {"maxLength": 600, "type": "string"}
    assert full["key_steps"] == {"items": {"maxLength": 200, "type": "string"},
                                 "maxItems": 10, "type": "array"}
    assert full["retrieval_anchor"]["maxLength"] == 150
    assert "at most 10 items" in model.calls[0][1][0]["content"]

    local = analyze_output(LOCAL_ANALYSIS_LIMITS).model_json_schema()["properties"]
    assert local["key_steps"]["maxItems"] == 4 and local["summary"]["maxLength"] == 240
    assert outcome_of(RubricEvaluation(passed=False, score=0.5)) == "partial"
    assert outcome_of(RubricEvaluation(passed=True, score=0.5)) == "success"


def test_a_long_transcript_is_cut_to_fit_the_prompt_budget(
        seeded_repo: ExperienceRepository) -> None:
    essay = "HEAD-" + "word " * 6000 + "-TAIL"
    messages = [Message.text("user", "Please cancel reservation ABC123"),
                Message.text("assistant", essay)]
    structured, model = llm(json.dumps(REPLY), json.dumps(REPLY))
    analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured),
            make_rollout(messages=messages, evaluation=FAILED))
    unbounded = sum(len(m["content"]) for m in model.calls[0][1])
    assert essay in model.calls[0][1][1]["content"]  # no budget: nothing is cut

    budget = 3000
    analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured, prompt_tokens=budget),
            make_rollout(messages=[*messages, Message.text("user", "again")],
                         evaluation=FAILED))
    model.assert_done()
    user = model.calls[1][1][1]["content"]
    prompt = sum(len(m["content"]) for m in model.calls[1][1])
    schema = schema_chars(analyze_output(AnalysisLimits()))
    assert prompt + schema <= budget * CHARS_PER_TOKEN < unbounded
    assert essay not in user and "chars truncated]" in user
    assert "HEAD-" in user and "-TAIL" in user
    assert "Please cancel reservation ABC123" in user  # short parts stay whole


def test_the_transcript_is_stored_beside_the_trajectory_bounded_and_redacted(
        seeded_repo: ExperienceRepository) -> None:
    repo = tool_output_chars(seeded_repo, 200)
    output = "owner: ana@example.com " + "x" * 5000 + "-TAIL"
    structured, _ = llm(json.dumps(REPLY))
    rollout = make_rollout(output=output, evaluation=FAILED)
    result = analyze(TrajectoryRolloutAnalyzer(repo, structured), rollout)
    tid = rollout_id(rollout)
    path = seeded_repo.git.work_tree
    assert path is not None and result.trajectory is not None
    # one commit holds both files
    assert git(path, "show", "--name-only", "--format=", BRANCH).split() == [
        f"trajectories/{tid[:2]}/{tid}.md", f"trajectories/{tid[:2]}/{tid}.transcript.json"]
    stored = TrajectoryStore(seeded_repo).find_transcript(tid)
    assert stored is not None
    transcript = read_transcript(stored, "test")
    assert (transcript.trajectory, transcript.case, transcript.tool_calls) == (
        tid, "cancel-1", 1)
    assert [m.role for m in transcript.messages] == ["user", "assistant", "assistant"]
    tool = transcript.messages[1].parts[1]
    assert (tool.type, tool.name, tool.id, tool.input) == (
        "tool", "get_reservation_details", "t1", '{"reservation_id": "ABC123"}')
    assert tool.output is not None and tool.output.endswith("-TAIL")  # head and tail kept
    assert f"[... {len(output) - 200} chars truncated]" in tool.output
    assert "ana@example.com" not in stored.decode() and "[REDACTED:email]" in tool.output
    assert transcript.encode() == stored  # canonical: the same rollout, the same blob


def test_a_reused_trajectory_stored_without_a_transcript_gets_one_once(
        seeded_repo: ExperienceRepository) -> None:
    structured, _ = llm(json.dumps(REPLY))
    rollout = make_rollout(evaluation=FAILED)
    analyze(TrajectoryRolloutAnalyzer(seeded_repo, structured), rollout)
    store = TrajectoryStore(seeded_repo)
    tid = rollout_id(rollout)
    kept = store.find_transcript(tid)
    # as the code before transcripts left it: the document alone
    store.side.write({store.transcript_path_of(tid): None}, "drop the transcript")
    assert store.find_transcript(tid) is None

    silent, model = llm()  # reused: no call
    again = analyze(TrajectoryRolloutAnalyzer(seeded_repo, silent), rollout)
    assert model.calls == [] and again.metadata.reused is True
    assert store.find_transcript(tid) == kept  # the same rollout, the same blob
    tip = seeded_repo.git.ref(BRANCH)
    analyze(TrajectoryRolloutAnalyzer(seeded_repo, llm()[0]), rollout)
    assert seeded_repo.git.ref(BRANCH) == tip  # it has one now: nothing written
    assert not store.add_transcript(rollout_id(make_rollout("other")), b"{}")  # no such one


def test_a_trajectory_whose_front_matter_is_an_alias_bomb_is_unreadable() -> None:
    """Trajectories live on a side branch anyone with push rights can write: their front
    matter is read with the alias bound, as cases files and experiences are."""
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 8)]
    text = "---\n" + "\n".join(levels) + "\n---\nbody\n"
    with pytest.raises(InvalidInputError, match="no readable front matter"):
        read_front_matter(text, "expgit-trajectory://t1")
    assert trajectory_row("t1", text) is None
