"""Group reflection ([train] group_size = K): K runs of each training case on one snapshot,
one group_reflect call per group whose runs differ, none for a group whose runs agree.

The agent is seeded: each run of a group gets its own seed (run i: seed i + 1), and the
scripted agent draws from it whether its answer names the refund's destination (the
phrase the rubric wants). The scripted group reflection reads the prompt, as a model
would: its lesson is what the better run said that the worse one did not, so it can only
name the phrase when the prompt shows a run that said it.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path

import pytest
from conftest import fsck, git
from scripted_pipeline import Handles, merge_of

from expgit.core.checks import RegexCheck
from expgit.core.domain import (
    Case,
    CriterionResult,
    Rollout,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
)
from expgit.errors import UsageError
from expgit.llm.port import LLMError, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import ListCaseLoader
from expgit.train.components.trajectory_analyzer import read_front_matter
from expgit.train.context import PipelineContext
from expgit.train.groups import group_cases, sampling_of, split_groups, verdict
from expgit.train.measurement.phase_metrics import PhaseMetrics
from expgit.train.reports.run_report import phase_line

PHRASE = "to the original payment method"
REFUND_CASE = Case(
    name="refund-destination", task_signature="refund-destination",
    input={"user_query": "My flight was cancelled by the airline. Where does my refund go?"},
    rubric=Rubric(name="refund", criteria=[RubricCriterion(
        name="names-destination", check=RegexCheck(pattern=r"orig\w* pay\w*"))]))
GOOD = f"The refund goes back {PHRASE} within 7 days."
BAD = "The refund will be processed within 7 days."
LESSON = "refund-destination"
MERGED = ("# Refund destination\n\nWhen: a refund.\n\n"
          "1. Tell the user the refund goes back to the original payment method.\n")


def seeded_agent(chat: ScriptedChatModel) -> Step:
    """One rollout of the seeded agent: its answer names the destination or not, drawn
    from the call's own seed (None for an ungrouped run: it fails)."""
    def answer(messages: list[dict[str, str]]) -> str:
        seed = chat.seeds[-1]
        return GOOD if seed is not None and random.Random(seed).random() < 0.5 else BAD
    return Step("rollout", answer)


def answers_in(prompt: str) -> list[tuple[str, str]]:
    """(label, final answer) of each run the prompt shows, best first: the group prompt's
    "## Run i (label)" sections, or the reflect prompt's single transcript."""
    runs = re.split(r"\n## Run \d+ \((best|worst|other)\)", prompt)
    if len(runs) == 1:
        transcript = prompt.split("## Transcript", 1)[1].split("## Evaluation", 1)[0]
        return [("only", transcript.rsplit("### assistant", 1)[1].strip())]
    shown = []
    for label, body in zip(runs[1::2], runs[2::2], strict=True):
        body = body.split("## Existing experiences", 1)[0]
        match = re.search(r"Its final answer: (.*)", body)
        text = match.group(1) if match else body.rsplit("### assistant", 1)[1]
        shown.append((label, text.strip()))
    return shown


def contrast_lesson(messages: list[dict[str, str]]) -> dict[str, object]:
    """The scripted reflection's reply: the words of the best run's answer that the worst
    run's lacks (none when the prompt shows one run), as a lesson."""
    runs = answers_in(messages[-1]["content"])
    best, worst = runs[0][1], runs[-1][1]
    extra = " ".join(w for w in best.split() if w not in worst.split())
    rule = f"Tell the user the refund goes {extra}." if extra else "Answer the question."
    return {"title": "Refund destination", "summary": "Where a refund goes.",
            "key_steps": ["answered"], "mistakes": [], "lessons": [rule],
            "retrieval_anchor": "refund destination payment",
            "edits": [{"name": LESSON, "action": "create",
                       "rationale": "The passing runs named the refund destination.",
                       "summary": "Say where a refund goes.", "tags": ["refund"],
                       "body": f"# Refund destination\n\nWhen: a refund.\n\nProcedure:\n"
                               f"1. {rule}\n", "confidence": 0.8}]}


def group_reply(messages: list[dict[str, str]]) -> str:
    reply = contrast_lesson(messages)
    return json.dumps({**reply, "difference": str(reply["lessons"])})


def reflect_reply(messages: list[dict[str, str]]) -> str:
    return json.dumps({**contrast_lesson(messages), "outcome": "failure"})


def outcomes(size: int) -> list[bool]:
    """Whether each run of a group of ``size`` passes (the seeded agent's draw)."""
    return [random.Random(run + 1).random() < 0.5 for run in range(size)]


def train(repo: ExperienceRepository, chat: ScriptedChatModel, size: int,
          cases: list[Case] | None = None) -> tuple[UsageMeter, PhaseMetrics]:
    meter = UsageMeter()
    pipeline = build_pipeline(repo, Handles(StructuredLLM(chat, meter)), concurrency=3,
                              group_size=size)
    result = asyncio.run(pipeline.train(ListCaseLoader(cases or [REFUND_CASE], 8),
                                        PipelineContext(mode="propose")))
    chat.assert_done()
    return meter, result.epochs[0]


def tree(repo: ExperienceRepository) -> Path:
    path = repo.git.work_tree
    assert path is not None
    return path


def proposed_lesson(repo: ExperienceRepository, proposal: str) -> str:
    return git(tree(repo), "show", f"expgit/proposals/{proposal}:experiences/{LESSON}.md")


def test_the_seeds_give_a_mixed_group() -> None:
    # the premise of the learning test: 4 seeded runs, some pass and some fail
    assert True in outcomes(4) and False in outcomes(4)


def test_one_group_call_learns_the_phrase_from_the_contrast(
        seeded_repo: ExperienceRepository) -> None:
    chat = ScriptedChatModel([])
    chat.steps += [seeded_agent(chat) for _ in range(4)]
    chat.steps += [Step("group_reflect", group_reply),
                   Step("merge", merge_of({LESSON: MERGED}))]
    meter, epoch = train(seeded_repo, chat, 4)
    assert {s: u.calls for s, u in meter.by_stage().items()} == {
        "rollout": 4, "group_reflect": 1, "merge": 1}
    assert chat.seeds == [1, 2, 3, 4, None, None]  # each run its own seed; then the
    # group_reflect and merge calls at the runtime's own sampling
    prompt = next(m for stage, m, _ in chat.calls if stage == "group_reflect")[-1]["content"]
    assert prompt.count("## Case refund-destination") == 1  # the case once
    assert "(best): passed" in prompt and "(worst): failed" in prompt
    # the gradient the group call proposed names the phrase, learnt from the better run
    gradient = git(tree(seeded_repo), "for-each-ref", "--format=%(refname)",
                   "refs/heads/expgit/gradients/").split()
    assert len(gradient) == 1
    body = git(tree(seeded_repo), "show", f"{gradient[0]}:experiences/{LESSON}.md")
    assert "original payment method" in body
    assert epoch.groups is not None
    assert (epoch.groups.groups, epoch.groups.reflected, epoch.groups.skipped) == (1, 1, 0)
    passed = sum(outcomes(4))
    assert (epoch.cases, epoch.passed) == (4, passed)
    assert epoch.summary is not None and epoch.summary.pass_k["1"] == passed / 4
    assert epoch.summary.pass_k["4"] == 0.0  # not every run passed
    assert "group_size=4 groups=1 reflected=1 skipped=0" in phase_line(epoch)
    # the stored trajectory names every run of the group with its own outcome
    trajectories = [name for name in git(tree(seeded_repo), "ls-tree", "-r",
                                         "--name-only", "expgit/trajectories").split()
                    if name.endswith(".md")]  # beside it: its worst run's transcript
    assert len(trajectories) == 1
    document = git(tree(seeded_repo), "show", f"expgit/trajectories:{trajectories[0]}")
    runs = read_front_matter(document, trajectories[0])["group"]
    assert [r["run"] for r in runs] == [0, 1, 2, 3]
    assert [r["passed"] for r in runs] == outcomes(4)
    assert all(r["transcript"] is None for r in runs)  # the seam: no transcripts stored
    # the gradient cites the group's trajectory as its evidence
    message = git(tree(seeded_repo), "log", "-1", "--format=%B", gradient[0])
    assert trajectories[0].removeprefix("trajectories/").removesuffix(".md") in message
    assert epoch.proposals and proposed_lesson(seeded_repo, epoch.proposals[0])
    fsck(tree(seeded_repo))


def test_one_failing_run_alone_does_not_teach_the_phrase(
        seeded_repo: ExperienceRepository) -> None:
    chat = ScriptedChatModel([])
    chat.steps += [seeded_agent(chat), Step("reflect", reflect_reply),
                   Step("merge", merge_of({LESSON: MERGED}))]
    meter, epoch = train(seeded_repo, chat, 1)
    assert {s: u.calls for s, u in meter.by_stage().items()} == {
        "rollout": 1, "reflect": 1, "merge": 1}
    assert chat.seeds == [None] * 3  # a group of one: the runtime's own sampling
    assert epoch.passed == 0 and epoch.groups is None
    gradient = git(tree(seeded_repo), "for-each-ref", "--format=%(refname)",
                   "refs/heads/expgit/gradients/").split()
    body = git(tree(seeded_repo), "show", f"{gradient[0]}:experiences/{LESSON}.md")
    assert "original payment" not in body and "Answer the question." in body


def same_answer(answer: str) -> Step:
    return Step("rollout", answer)


def test_a_group_whose_runs_agree_gets_no_call(seeded_repo: ExperienceRepository) -> None:
    other = REFUND_CASE.model_copy(update={"name": "refund-destination-2"})
    chat = ScriptedChatModel([same_answer(BAD) for _ in range(3)]
                             + [same_answer(GOOD) for _ in range(3)])
    meter, epoch = train(seeded_repo, chat, 3, [REFUND_CASE, other])
    # the answers go out in call order: the first case's three runs fail alike, the
    # second case's pass alike
    assert {s: u.calls for s, u in meter.by_stage().items()} == {"rollout": 6}
    assert epoch.groups is not None
    assert (epoch.groups.groups, epoch.groups.reflected, epoch.groups.skipped) == (2, 0, 2)
    assert epoch.gradients == 0 and epoch.proposals == []


def test_runs_that_failed_are_left_out_and_counted(seeded_repo: ExperienceRepository
                                                   ) -> None:
    answers = iter([GOOD, BAD, "boom"])

    def agent(messages: list[dict[str, str]]) -> str:
        answer = next(answers)
        if answer == "boom":
            raise LLMError("rollout: HTTP 503", cause="HTTP 503")
        return answer

    chat = ScriptedChatModel([Step("rollout", agent) for _ in range(3)]
                             + [Step("group_reflect", group_reply), Step("merge", merge_of(
                                 {LESSON: MERGED}))])
    meter, epoch = train(seeded_repo, chat, 3)
    assert meter.by_stage()["group_reflect"].calls == 1
    assert epoch.groups is not None
    assert (epoch.groups.reflected, epoch.groups.errors) == (1, 1)
    assert any("rollout failed" in e for e in epoch.errors)
    prompt = next(m for stage, m, _ in chat.calls if stage == "group_reflect")[-1]["content"]
    assert "1 more run failed with an error" in prompt
    assert "group_size=3 groups=1 reflected=1 skipped=0 run_errors=1" in phase_line(epoch)


def test_group_cases_give_each_run_its_own_seed() -> None:
    runs = group_cases([REFUND_CASE], 3, 0.9)
    assert [r.name for r in runs] == [REFUND_CASE.name] * 3
    samplings = [sampling_of(r) for r in runs]
    assert [(s.temperature, s.seed) for s in samplings if s] == [(0.9, 1), (0.9, 2),
                                                                 (0.9, 3)]
    assert sampling_of(REFUND_CASE) is None and group_cases([REFUND_CASE], 1, 0.9) == [
        REFUND_CASE]


def test_split_groups_refuses_a_mixed_layout() -> None:
    one = Rollout(case=REFUND_CASE, policy_snapshot_id="s")
    two = Rollout(case=REFUND_CASE.model_copy(update={"name": "x"}), policy_snapshot_id="s")
    assert split_groups([one, one], 2) == [[one, one]]
    with pytest.raises(UsageError, match="mixes the cases"):
        split_groups([one, two], 2)
    with pytest.raises(UsageError, match="cannot form groups"):
        split_groups([one, one, one], 2)


def test_the_same_evaluation_is_all_passed_or_the_same_failed_criteria() -> None:
    def evaluation(passed: bool, *failed: str) -> RubricEvaluation:
        return RubricEvaluation(passed=passed, score=0.5, criterion_results=[
            CriterionResult(criterion_name=n, passed=False, score=0.0) for n in failed])

    assert verdict(evaluation(True)) == verdict(evaluation(True, "optional-tone"))
    assert verdict(evaluation(False, "a")) == verdict(evaluation(False, "a"))
    assert verdict(evaluation(False, "a")) != verdict(evaluation(False, "a", "b"))
    assert verdict(evaluation(False, "a")) != verdict(evaluation(True))
