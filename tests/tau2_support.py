"""A scripted model that plays both sides of a tau2 airline conversation over the local
script server: the simulated user (its system prompt holds the task's scenario) opens
with ``[task ID]`` and stops once the agent says it is done; the agent performs the
task's gold actions through the tools, one call per turn, then tells the user each
``communicate_info``. ``skip_write(seed)`` true: that run skips the task's first
confirmation-gated write (``n``: the how-manyth conversation on that task this is,
counted from 1; the script server runs one conversation at a time with
``--concurrency 1``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tool_support import call, turn

from expgit.llm.port import ToolTurn
from expgit.llm.scripted import Step
from expgit.train.tau2 import data

DONE = "All done."
TASK = re.compile(r"\[task (\w+)\]")


def task_of_scenario(system: str) -> str:
    return next(i for i, t in data.tasks().items() if t.instructions() in system)


def plan(task_id: str, skip: bool) -> list[tuple[str, dict[str, Any]]]:
    criteria = data.tasks()[task_id].evaluation_criteria
    assert criteria is not None
    actions = [(a.name, a.arguments) for a in criteria.actions or []]
    if skip:
        first = next(i for i, (n, _) in enumerate(actions) if n in data.write_tools())
        actions = actions[:first] + actions[first + 1:]
    return actions


SkipWrite = Callable[[str, int], bool]


def both_sides(skip_write: SkipWrite
               ) -> Callable[[list[dict[str, Any]]], str | ToolTurn]:
    started: dict[str, int] = {}

    def reply(messages: list[dict[str, Any]]) -> str | ToolTurn:
        system = str(messages[0]["content"])
        if "<scenario>" in system:  # the user simulator
            said = [m for m in messages if m["role"] == "user"]
            if len(said) <= 1:  # the agent's greeting only
                return f"[task {task_of_scenario(system)}] I need help with a reservation."
            return "###STOP###" if DONE in str(said[-1]["content"]) else "Yes, go ahead."
        first_user = next(str(m["content"]) for m in messages if m["role"] == "user")
        match = TASK.search(first_user)
        assert match is not None, first_user
        task_id = match.group(1)
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 0 and sum(1 for m in messages if m["role"] == "user") == 1:
            started[task_id] = started.get(task_id, 0) + 1  # a new conversation
        actions = plan(task_id, skip_write(task_id, started[task_id]))
        if done < len(actions):
            name, arguments = actions[done]
            return turn(call(name, f"c{done}", **arguments))
        criteria = data.tasks()[match.group(1)].evaluation_criteria
        assert criteria is not None
        return turn(text=" ".join([*(criteria.communicate_info or []), DONE]))
    return reply


def steps(count: int,
          skip_write: SkipWrite = lambda task, n: False) -> list[Step]:
    """``count`` rollout steps (agent and user turns alike) of :func:`both_sides`."""
    reply = both_sides(skip_write)
    return [Step("rollout", reply) for _ in range(count)]
