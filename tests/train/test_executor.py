"""SingleTurnLLMRolloutExecutor with the strict scripted LLM."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import EXAMPLE, repo_state
from json_value import number

from expgit.core.domain import Case, Rollout
from expgit.errors import UsageError
from expgit.llm.port import ChatMessages, Completion, LLMError, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.usage import read_usage
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases, parse_case
from expgit.train.components.evaluator import RubricRolloutEvaluator
from expgit.train.components.executor import SingleTurnLLMRolloutExecutor
from expgit.train.context import ExecutionContext
from expgit.train.interfaces import RolloutExecutor

ACTIVE = ["cancellation-eligibility-rules", "checked-baggage-allowance",
          "confirm-before-write-actions", "flight-change-rules", "refund-method-rules",
          "verify-identity-before-account-changes", "when-to-transfer-to-human"]
CTX = ExecutionContext(policy_snapshot_id="policy-123")


def case(name: str, query: str, *criteria: dict[str, Any]) -> Case:
    criteria = criteria or ({"name": "refuses", "check": {"type": "contains",
                                                          "value": "cannot"}},)
    return parse_case({"name": name, "input": {"user_query": query},
                       "rubric": {"criteria": list(criteria)}}, "test")


@dataclass
class Counting:
    """A ChatModel wrapper: counts calls in flight, with a per-call delay."""

    inner: ScriptedChatModel
    delay: Any = 0.02
    model: str = "scripted"
    in_flight: int = 0
    max_in_flight: int = 0
    finished: list[str] = field(default_factory=list)

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float) -> Completion:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            delay = self.delay(messages) if callable(self.delay) else self.delay
            await asyncio.sleep(delay)
            result = await self.inner.complete(
                messages, stage=stage, response_format=response_format,
                max_tokens=max_tokens, temperature=temperature)
            self.finished.append(messages[-1]["content"])
            return result
        finally:
            self.in_flight -= 1


def executor(model: Any, **kwargs: Any) -> tuple[SingleTurnLLMRolloutExecutor, UsageMeter]:
    meter = UsageMeter()
    llm = StructuredLLM(model, meter)
    return SingleTurnLLMRolloutExecutor(llm, RubricRolloutEvaluator(llm), **kwargs), meter


def used_names(rollout: Rollout) -> list[str]:
    return [u.name for u in read_usage(rollout.metadata)]


def run(ex: RolloutExecutor, cases: list[Case], snap: Snapshot,
        ctx: ExecutionContext = CTX) -> list[Rollout]:
    return asyncio.run(ex.execute(cases, snap, ctx))


def test_all_active_experiences_in_the_system_prompt(seeded_repo: ExperienceRepository
                                                     ) -> None:
    snap = seeded_repo.snapshot()
    model = ScriptedChatModel([Step("rollout", "Sorry, you cannot cancel it.")])
    ex, meter = executor(model)
    [rollout] = run(ex, [case("c1", "Can I cancel my basic economy ticket?")], snap)
    model.assert_done()
    stage, messages, fmt = model.calls[0]
    assert stage == "rollout" and fmt is None
    system, user = messages[0], messages[1]
    assert system["role"] == "system" and user == {
        "role": "user", "content": "Can I cancel my basic economy ticket?"}
    for name in ACTIVE:
        assert f'<experience name="{name}">' in system["content"]
        body = snap.entries[name].experience.body.strip()
        assert body in system["content"]
        assert snap.entries[name].experience.front_matter.summary in system["content"]
    assert "compensation-certificates" not in system["content"]  # a draft
    assert sorted(used_names(rollout)) == ACTIVE  # a small library fits whole, by rank
    first = read_usage(rollout.metadata)[0]
    assert first.name == "cancellation-eligibility-rules"  # the most relevant first
    assert first.blob == snap.entries[first.name].blob  # the version shown
    assert (first.reason or "").startswith("rank 1 (bm25 score ") and (first.score or 0) > 0
    assert number(rollout.metadata, "context_tokens") > 0
    assert rollout.metadata["snapshot_id"] == snap.id
    assert rollout.metadata["snapshot_commit"] == snap.commit
    assert rollout.policy_snapshot_id == "policy-123"
    assert [m.role for m in rollout.messages] == ["user", "assistant"]
    assert rollout.messages[1].plain_text == "Sorry, you cannot cancel it."
    assert rollout.error is None and rollout.evaluation is not None
    assert rollout.evaluation.passed and rollout.evaluation.score == 1.0
    assert meter.by_stage()["rollout"].calls == 1 and set(meter.by_stage()) == {"rollout"}


def test_top_k_most_relevant(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    model = ScriptedChatModel([Step("rollout", "3 bags") for _ in range(2)])
    ex, _ = executor(model, top_k=2)
    bags, cancel = run(ex, [
        case("bags", "How many checked bags are free for a gold member?"),
        case("cancel", "Can I cancel my basic economy ticket booked 3 days ago?")], snap)
    model.assert_done()
    assert used_names(bags)[0] == "checked-baggage-allowance"
    assert used_names(cancel)[0] == "cancellation-eligibility-rules"
    for rollout in (bags, cancel):
        used = used_names(rollout)
        assert len(used) == 2 and set(used) <= set(ACTIVE)
    prompts = {m[-1]["content"]: m[0]["content"] for _, m, _ in model.calls}
    bag_prompt = prompts["How many checked bags are free for a gold member?"]
    assert bag_prompt.count("<experience name=") == 2
    assert bag_prompt.index('<experience name="checked-baggage-allowance">') < bag_prompt.index(
        f'<experience name="{used_names(bags)[1]}">')


def test_top_k_never_shows_drafts_and_zero_shows_none(seeded_repo: ExperienceRepository
                                                      ) -> None:
    snap = seeded_repo.snapshot()
    query = "compensation certificate for a delayed flight"  # the draft ranks first
    model = ScriptedChatModel([Step("rollout", "no"), Step("rollout", "no")])
    ex, _ = executor(model, top_k=1)
    [r] = run(ex, [case("c", query)], snap)
    assert used_names(r) != ["compensation-certificates"]
    assert len(used_names(r)) == 1
    ex0, _ = executor(model, top_k=0)
    [r0] = run(ex0, [case("c", query)], snap)
    model.assert_done()
    assert r0.metadata["experiences_used"] == []
    assert "No experiences yet" in model.calls[1][1][0]["content"]


def test_concurrency_bound_and_order(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    cases = [case(f"c{i}", f"question {i}") for i in range(8)]
    # later cases answer faster, so completion order differs from case order
    delay = lambda messages: 0.01 * (10 - int(messages[-1]["content"].split()[-1]))  # noqa: E731
    model = Counting(ScriptedChatModel([
        Step("rollout", lambda m: f"cannot: {m[-1]['content']}") for _ in cases]),
        delay=delay)
    ex, meter = executor(model, concurrency=3)
    rollouts = run(ex, cases, snap)
    model.inner.assert_done()
    assert model.max_in_flight == 3
    assert model.finished != [f"question {i}" for i in range(8)]
    assert [r.case.name for r in rollouts] == [c.name for c in cases]
    assert [r.messages[1].plain_text for r in rollouts] == [
        f"cannot: question {i}" for i in range(8)]
    assert meter.by_stage()["rollout"].calls == 8
    serial, _ = executor(Counting(ScriptedChatModel([Step("rollout", "x")] * 3)),
                         concurrency=1)
    run(serial, cases[:3], snap)
    assert serial.llm.model.max_in_flight == 1  # type: ignore[attr-defined]


def test_failing_case_is_recorded(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()

    def reply(messages: ChatMessages) -> str:
        if "boom" in messages[-1]["content"]:
            raise LLMError("endpoint unavailable after 4 retries")
        return "I cannot."

    model = ScriptedChatModel([Step("rollout", reply) for _ in range(3)]
                              + [Step("rollout", "cut", finish_reason="length")])
    ex, meter = executor(model, concurrency=2)
    cases = [case("a", "first"), case("b", "boom now"), case("c", "third"),
             case("d", "fourth")]
    rollouts = run(ex, cases, snap)
    model.assert_done()
    assert [r.case.name for r in rollouts] == ["a", "b", "c", "d"]
    failed = {r.case.name: r for r in rollouts if r.error}
    assert set(failed) == {"b", "d"}
    assert failed["b"].error == (
        "rollout failed: LLMError: endpoint unavailable after 4 retries")
    assert "finish_reason=length" in (failed["d"].error or "")
    for r in failed.values():
        assert r.evaluation is not None and not r.evaluation.passed
        assert r.evaluation.score == 0.0 and len(r.evaluation.criterion_results) == 1
        assert r.policy_snapshot_id == "policy-123"
        assert [m.role for m in r.messages] == ["user"]
    ok = [r for r in rollouts if not r.error]
    assert all(r.evaluation and r.evaluation.passed for r in ok)
    assert meter.by_stage()["rollout"].calls == 3  # the raising call is not metered


def test_failing_judge_is_recorded_with_the_answer(seeded_repo: ExperienceRepository
                                                   ) -> None:
    model = ScriptedChatModel([Step("rollout", "an answer"), Step("judge", "nope"),
                               Step("judge", "still nope")])
    ex, meter = executor(model)
    c = case("j", "question", {"name": "judged", "check": {
        "type": "llm_judge", "instructions": "Is it right?"}})
    [r] = run(ex, [c], seeded_repo.snapshot())
    model.assert_done()
    assert (r.error or "").startswith("evaluation failed: LLMOutputError: judge:")
    assert [m.plain_text for m in r.messages] == ["question", "an answer"]
    assert r.evaluation is not None and not r.evaluation.passed
    assert {k: v.calls for k, v in meter.by_stage().items()} == {"rollout": 1, "judge": 2}


def test_example_eval_cases_cost_one_call_each(seeded_repo: ExperienceRepository) -> None:
    cases = load_cases(EXAMPLE / "cases" / "eval.yaml")
    model = ScriptedChatModel([Step("rollout", "I cannot help.") for _ in cases])
    ex, meter = executor(model, top_k=3)
    before = repo_state(seeded_repo.git.common_dir)
    rollouts = run(ex, cases, seeded_repo.snapshot())
    model.assert_done()
    assert len(model.calls) == len(cases)
    assert {k: v.calls for k, v in meter.by_stage().items()} == {"rollout": len(cases)}
    assert all(r.evaluation is not None and r.error is None for r in rollouts)
    assert repo_state(seeded_repo.git.common_dir) == before  # never writes


def test_input_without_user_query_is_sent_as_json(seeded_repo: ExperienceRepository
                                                  ) -> None:
    model = ScriptedChatModel([Step("rollout", "cannot")])
    ex, _ = executor(model)
    c = parse_case({"name": "j", "input": {"order": {"id": 7}, "ask": "status"},
                    "rubric": {"criteria": [{"name": "k", "check": {
                        "type": "contains", "value": "cannot"}}]}}, "test")
    run(ex, [c], seeded_repo.snapshot())
    assert json.loads(model.calls[0][1][1]["content"]) == {"ask": "status",
                                                            "order": {"id": 7}}


def test_no_cases_and_misuse(seeded_repo: ExperienceRepository) -> None:
    model = ScriptedChatModel([])
    ex, _ = executor(model)
    assert run(ex, [], seeded_repo.snapshot()) == []
    assert model.calls == []
    with pytest.raises(UsageError, match="concurrency"):
        executor(model, concurrency=0)
    with pytest.raises(UsageError, match="top_k"):
        executor(model, top_k=-1)
