"""ToolCallingRolloutExecutor with the strict scripted LLM: one case per check kind, tool
errors, unknown tools, bad arguments, the limits, concurrency and a simulated user."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from json_value import dig
from pydantic import BaseModel
from tool_support import acting, call, tool_case, turn, write_cases

from expgit.core.domain import Case, Rollout, ToolPart
from expgit.errors import InvalidInputError
from expgit.llm.port import ToolCall, ToolMessages, ToolTurn, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.components.evaluator import RubricRolloutEvaluator
from expgit.train.components.executor import SingleTurnLLMRolloutExecutor
from expgit.train.components.tool_executor import (
    RoutingRolloutExecutor,
    ToolCallingRolloutExecutor,
    run_tool_call,
)
from expgit.train.context import ExecutionContext
from expgit.train.groups import group_cases
from expgit.train.tools import registry
from expgit.train.tools.environment import StateEnvironment, StateFactory, Tool, read_json

CTX = ExecutionContext(policy_snapshot_id="policy-1")
BAGS = ["I'm mia_li_3668. Add two bags to NO6JO3.", "Yes, go ahead."]
ADD_BAGS = call("update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3,
                nonfree_baggages=0, payment_id="credit_card_4421")


def executor(repo: ExperienceRepository, model: ScriptedChatModel, **kw: Any
             ) -> ToolCallingRolloutExecutor:
    llm = StructuredLLM(model, UsageMeter())
    single = SingleTurnLLMRolloutExecutor(llm, RubricRolloutEvaluator(llm), repo=repo)
    return ToolCallingRolloutExecutor(llm, RubricRolloutEvaluator(llm), single.experiences_for,
                                      repo=repo, **kw)


def run(repo: ExperienceRepository, model: ScriptedChatModel, cases: list[Case],
        **kw: Any) -> list[Rollout]:
    rollouts = asyncio.run(executor(repo, model, **kw).execute(cases, repo.snapshot(), CTX))
    model.assert_done()
    return rollouts


def tool_parts(rollout: Rollout) -> list[ToolPart]:
    return [p for m in rollout.messages for p in m.parts if isinstance(p, ToolPart)]


def test_a_groups_runs_sample_each_agent_turn_with_their_own_seed(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """[train] group_size: every rollout turn of run i is sampled with seed i + 1."""
    case = tool_case(tmp_path, "bags", BAGS[:1], {"type": "tool_called",
                                                    "name": "get_reservation_details"})
    model = ScriptedChatModel([
        Step("rollout", turn(call("get_reservation_details", reservation_id="NO6JO3"))),
        Step("rollout", turn(text="Here it is.")),
        Step("rollout", turn(call("get_reservation_details", reservation_id="NO6JO3"))),
        Step("rollout", turn(text="Here it is."))])
    rollouts = run(seeded_repo, model, group_cases([case], 2, 0.7), concurrency=1)
    assert all(r.error is None for r in rollouts)
    assert model.seeds == [1, 1, 2, 2]


def test_db_state_passes_and_every_call_is_recorded(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    case = tool_case(tmp_path, "bags", BAGS, {"type": "db_state", "expected": {
        "reservations.NO6JO3.total_baggages": 3, "reservations.NO6JO3.nonfree_baggages": 0}})
    model = ScriptedChatModel([
        Step("rollout", turn(call("get_reservation_details", reservation_id="NO6JO3"))),
        Step("rollout", turn(text="That is 3 bags, all free. Confirm?")),
        Step("rollout", turn(ADD_BAGS, text="Updating.")),
        Step("rollout", turn(text="Done: 3 bags."))])
    [rollout] = run(seeded_repo, model, [case])
    assert rollout.error is None and rollout.evaluation is not None
    assert rollout.evaluation.passed, rollout.evaluation.feedback
    assert [m.role for m in rollout.messages] == ["user", "assistant", "assistant", "user",
                                                  "assistant", "assistant"]
    parts = tool_parts(rollout)
    assert [p.tool_name for p in parts] == ["get_reservation_details",
                                            "update_reservation_baggages"]
    assert all(p.tool_status == "completed" for p in parts)
    assert '"total_baggages": 1' in (parts[0].tool_output or "")  # read before the update
    assert dig(rollout.metadata, "final_state", "reservations", "NO6JO3",
               "total_baggages") == 3
    assert rollout.metadata["stopped"] == "user done"
    system = model.calls[0][1][0]["content"]
    assert "checked-baggage-allowance" in system and "The current time is" in system
    extra = model.calls[0][2]
    assert extra is not None
    tools = extra["tools"]
    assert len(tools) == 8 and {t["function"]["name"] for t in tools} >= {
        "cancel_reservation", "transfer_to_human_agents"}
    # the fixture on disk is untouched: each rollout works on its own copy
    fixture = json.loads((tmp_path / "db.json").read_text())
    assert fixture["reservations"]["NO6JO3"]["total_baggages"] == 1


def test_db_state_failure_names_the_field(seeded_repo: ExperienceRepository,
                                          tmp_path: Path) -> None:
    case = tool_case(tmp_path, "bags", BAGS[:1], {"type": "db_state", "expected": {
        "reservations.NO6JO3.total_baggages": 3}})
    model = ScriptedChatModel([Step("rollout", turn(text="Bags cannot be added."))])
    [rollout] = run(seeded_repo, model, [case])
    assert rollout.evaluation is not None and not rollout.evaluation.passed
    assert rollout.evaluation.feedback == [
        "c0: final state differs: reservations.NO6JO3.total_baggages = 1, expected 3"]


@pytest.mark.parametrize(("check", "passed"), [
    ({"type": "tool_called", "name": "update_reservation_baggages"}, True),
    ({"type": "tool_called", "name": "update_reservation_baggages",
      "arguments": {"total_baggages": 3}}, True),
    ({"type": "tool_called", "name": "update_reservation_baggages",
      "arguments": {"total_baggages": 4}}, False),
    ({"type": "tool_not_called", "name": "cancel_reservation"}, True),
    ({"type": "tool_not_called", "name": "update_reservation_baggages"}, False),
    ({"type": "contains", "value": "3 bags"}, True),
])
def test_action_and_answer_checks(seeded_repo: ExperienceRepository, tmp_path: Path,
                                  check: dict[str, Any], passed: bool) -> None:
    case = tool_case(tmp_path, "bags", BAGS[:1], check)
    model = ScriptedChatModel([Step("rollout", turn(ADD_BAGS)),
                               Step("rollout", turn(text="Done: 3 bags."))])
    [rollout] = run(seeded_repo, model, [case])
    assert rollout.evaluation is not None and rollout.evaluation.passed is passed


def test_errors_are_results_the_agent_sees(seeded_repo: ExperienceRepository,
                                           tmp_path: Path) -> None:
    """An unknown tool, arguments that are not JSON, arguments that fail the schema and
    a tool that refuses: four error results, the next turn sees them, no crash."""
    case = tool_case(tmp_path, "errors", BAGS[:1],
                     {"type": "tool_not_called", "name": "cancel_reservation"})
    bad = [call("book_hotel", "u1"), call("cancel_reservation", "b1"),
           call("get_user_details", "t1", user_id=7),
           call("cancel_reservation", "n1", reservation_id="NOPE")]
    bad[1] = bad[1].model_copy(update={"arguments": "{not json"})
    seen: list[ToolMessages] = []

    def after(messages: ToolMessages) -> ToolTurn:
        seen.append(list(messages))
        return turn(text="Sorry, something went wrong.")

    model = ScriptedChatModel([Step("rollout", turn(*bad)), Step("rollout", after)])
    [rollout] = run(seeded_repo, model, [case])
    parts = tool_parts(rollout)
    assert [p.tool_status for p in parts] == ["error"] * 4
    outputs = [p.tool_output or "" for p in parts]
    assert "unknown tool 'book_hotel'" in outputs[0]
    assert "not a JSON object" in outputs[1] and parts[1].tool_input == {"_raw": "{not json"}
    assert "invalid arguments for get_user_details: user_id" in outputs[2]
    assert "reservation 'NOPE' not found" in outputs[3]
    results = [m for m in seen[0] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["u1", "b1", "t1", "n1"]
    assert rollout.error is None and rollout.evaluation is not None
    assert rollout.evaluation.passed  # failed calls are not calls


def test_a_tool_that_raises_is_an_error_result(seeded_repo: ExperienceRepository,
                                               tmp_path: Path) -> None:
    def boom(state: dict[str, Any], args: Any) -> Any:
        raise RuntimeError("disk on fire")

    class Kind:
        name = "broken"

        def open(self, database: Path) -> StateFactory:
            return StateFactory((Tool("explode", "Fails.", _NoArgs, boom),),
                                read_json(database))

    registry.register(Kind())
    [case] = load_cases(write_cases(tmp_path, [{
        "name": "boom", "input": {"user_turns": ["go"]},
        "rubric": {"criteria": [{"name": "c", "check": {"type": "tool_called",
                                                         "name": "explode"}}]}}],
        environment="broken"))
    model = ScriptedChatModel([Step("rollout", turn(call("explode"))),
                               Step("rollout", turn(text="It failed."))])
    [rollout] = run(seeded_repo, model, [case])
    [part] = tool_parts(rollout)
    assert (part.tool_status, part.tool_output) == ("error", "error: disk on fire")
    assert rollout.error is None and rollout.evaluation is not None
    assert not rollout.evaluation.passed


class _NoArgs(BaseModel):
    pass


def test_step_limit_stops_a_model_that_never_answers(seeded_repo: ExperienceRepository,
                                                     tmp_path: Path) -> None:
    case = tool_case(tmp_path, "loop", BAGS, {"type": "tool_not_called",
                                              "name": "cancel_reservation"})
    lookup = turn(call("get_reservation_details", reservation_id="NO6JO3"))
    model = ScriptedChatModel([Step("rollout", lookup) for _ in range(3)])
    [rollout] = run(seeded_repo, model, [case], max_steps=3)
    assert rollout.metadata["stopped"] == "step limit"
    assert len(tool_parts(rollout)) == 3 and rollout.evaluation is not None


def test_user_turn_limit(seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    case = tool_case(tmp_path, "chatty", ["one", "two", "three"],
                     {"type": "contains", "value": "ok"})
    model = ScriptedChatModel([Step("rollout", turn(text="ok")) for _ in range(2)])
    [rollout] = run(seeded_repo, model, [case], max_user_turns=2)
    assert rollout.metadata["stopped"] == "user turn limit"
    assert [m.plain_text for m in rollout.messages if m.role == "user"] == ["one", "two"]


def test_concurrent_rollouts_never_share_state(seeded_repo: ExperienceRepository,
                                               tmp_path: Path) -> None:
    cases = [tool_case(tmp_path, f"cancel-{i}", ["cancel ZFA04Y"], {
        "type": "db_state", "expected": {"reservations.ZFA04Y.status": "cancelled"}})
        for i in range(4)]
    agent = acting(lambda _: [call("cancel_reservation", reservation_id="ZFA04Y")])
    model = ScriptedChatModel([Step("rollout", agent) for _ in range(8)], delay_seconds=0.01)
    rollouts = run(seeded_repo, model, cases, concurrency=4)
    assert [r.case.name for r in rollouts] == [c.name for c in cases]
    for rollout in rollouts:  # each cancelled its own copy: none saw "already cancelled"
        [part] = tool_parts(rollout)
        assert part.tool_status == "completed", part.tool_output
        assert rollout.evaluation is not None and rollout.evaluation.passed


def test_simulated_user(seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    [case] = load_cases(write_cases(tmp_path, [{
        "name": "sim", "input": {"user_instructions": "You are mia_li_3668; cancel ZFA04Y."},
        "rubric": {"criteria": [{"name": "c", "check": {"type": "db_state", "expected": {
            "reservations.ZFA04Y.status": "cancelled"}}}]}}]))
    model = ScriptedChatModel([
        Step("user", "Hi, I'm mia_li_3668, please cancel ZFA04Y."),
        Step("rollout", turn(text="Cancel ZFA04Y, business, full refund. Confirm?")),
        Step("user", "yes"),
        Step("rollout", turn(call("cancel_reservation", reservation_id="ZFA04Y"))),
        Step("rollout", turn(text="Cancelled.")),
        Step("user", "###STOP###")])
    [rollout] = run(seeded_repo, model, [case])
    assert rollout.evaluation is not None and rollout.evaluation.passed
    assert [m.plain_text for m in rollout.messages if m.role == "user"] == [
        "Hi, I'm mia_li_3668, please cancel ZFA04Y.", "yes"]
    user_prompts = [c[1][1]["content"] for c in model.calls if c[0] == "user"]
    assert "agent: Cancelled." in user_prompts[-1]


def test_routing_keeps_case_order(seeded_repo: ExperienceRepository, tmp_path: Path
                                  ) -> None:
    from expgit.train.cases import parse_case
    plain = parse_case({"name": "plain", "input": "Hello?", "rubric": {"criteria": [
        {"name": "c", "check": {"type": "contains", "value": "hi"}}]}}, "test")
    tool = tool_case(tmp_path, "tool", ["hello"], {"type": "contains", "value": "hi"})
    model = ScriptedChatModel([Step("rollout", "hi there"), Step("rollout", turn(text="hi"))])
    llm = StructuredLLM(model, UsageMeter())
    single = SingleTurnLLMRolloutExecutor(llm, RubricRolloutEvaluator(llm), repo=seeded_repo)
    routing = RoutingRolloutExecutor(single, executor(seeded_repo, model))
    rollouts = asyncio.run(routing.execute([tool, plain], seeded_repo.snapshot(), CTX))
    assert [r.case.name for r in rollouts] == ["tool", "plain"]
    assert all(r.evaluation is not None and r.evaluation.passed for r in rollouts)
    assert "final_state" in rollouts[0].metadata and "final_state" not in rollouts[1].metadata


@pytest.mark.parametrize(("edit", "message"), [
    ({"environment": "hotel"}, "unknown environment 'hotel'"),
    ({"database": "missing.json"}, "no such database fixture"),
    ({"database": "broken.json"}, "the database fixture is not valid JSON"),
    ({"check": {"type": "tool_called", "name": "book_hotel"}}, "unknown tool 'book_hotel'"),
    ({"check": {"type": "db_state", "expected": {"reservations.NOPE.status": "x"}}},
     "refers to a record that is not in the database fixture"),
    ({"input": {"user_query": "hi"}}, "needs input.user_turns"),
])
def test_bad_input_is_refused_at_load(tmp_path: Path, edit: dict[str, Any],
                                      message: str) -> None:
    (tmp_path / "broken.json").write_text("{users: ")
    case = {"name": "x", "input": edit.get("input", {"user_turns": ["hi"]}),
            "rubric": {"criteria": [{"name": "c", "check": edit.get(
                "check", {"type": "tool_called", "name": "cancel_reservation"})}]}}
    path = write_cases(tmp_path, [case], environment=edit.get("environment", "airline"),
                       database=edit.get("database", "db.json"))
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        load_cases(path)


def test_action_checks_need_an_environment(tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text("- name: x\n  input: hi\n  rubric:\n    criteria:\n      - name: c\n"
                    "        check: {type: tool_called, name: cancel_reservation}\n")
    with pytest.raises(InvalidInputError, match="needs a tool environment"):
        load_cases(path)


def test_an_environment_named_by_import_path(seeded_repo: ExperienceRepository,
                                             tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text('{"notes": []}')
    [case] = load_cases(write_cases(tmp_path, [{
        "name": "note", "input": {"user_turns": ["note: buy milk"]},
        "rubric": {"criteria": [{"name": "c", "check": {"type": "db_state", "expected": {
            "notes.0": "buy milk"}}}]}}], environment="tool_support:NotesKind",
        database="notes.json"))
    model = ScriptedChatModel([Step("rollout", turn(call("add_note", text="buy milk"))),
                               Step("rollout", turn(text="Noted."))])
    [rollout] = run(seeded_repo, model, [case])
    assert rollout.evaluation is not None and rollout.evaluation.passed
    with pytest.raises(InvalidInputError, match="cannot be imported"):
        load_cases(write_cases(tmp_path, [case.model_dump(include={"name", "input",
                                                                    "rubric"})],
                               environment="no_such_module:Kind", name="bad.yaml"))


def test_deeply_nested_tool_arguments_are_an_error_the_agent_sees() -> None:
    """A model's arguments nested past the JSON depth bound are refused like any invalid
    JSON (an error result), not a RecursionError that ends the run."""
    nested = "[" * 100_000 + "]" * 100_000
    part = run_tool_call(StateEnvironment([], {}), {"lookup"},
                         ToolCall(id="c1", name="lookup", arguments=nested))
    assert part.tool_status == "error"
    assert part.tool_output == "error: the arguments are not a JSON object"
