"""tau2-bench's reward for one conversation, as tau2's evaluator computes it
(``src/tau2/evaluator/evaluator.py`` and ``evaluator_env.py``, ``evaluator_communicate.py``
at sierra-research/tau2-bench a2c0247; the semantics, not the code, are reproduced):

* a conversation that did not end normally (by the user's stop token; expgit's agent
  has no stop token of its own) gets 0, whatever else it did (tau2: a termination
  reason other than AGENT_STOP / USER_STOP);
* ``DB``: the rollout's tool calls are replayed, in order, on a fresh database, and the
  gold ``actions`` on another (a gold action that fails is skipped, as tau2 logs and
  skips it); 1 iff the two databases are equal;
* ``COMMUNICATE``: 1 iff every ``communicate_info`` string occurs in some agent message,
  lower-cased, in the message lower-cased with its commas removed;
* ``NL_ASSERTION``: judged by an LLM apart (a ``llm_judge`` criterion of the case), and
  only where ``reward_basis`` names it;
* the reward is the product of the components that ``reward_basis`` names.

Replaying the transcript rather than reading the live database is tau2's own way, and
makes the score the same wherever the tools ran (in process or through an MCP server).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from expgit.core.checks import Tau2RewardCheck
from expgit.core.domain import CriterionResult, Message, Rollout, ToolPart
from expgit.train.tau2 import data
from expgit.train.tau2.db import OverlayDB
from expgit.train.tools.environment import ToolError

NORMAL_STOPS = frozenset({"user done"})  # the executor's ``stopped``: the user ended it
Call = tuple[str, dict[str, Any]]


class CommunicateResult(BaseModel):
    info: str
    met: bool


class Tau2Reward(BaseModel):
    """One conversation's reward and its parts (None: the part was not computed)."""

    reward: float
    reward_basis: list[str]
    db_match: bool | None = None
    communicate: list[CommunicateResult] = Field(default_factory=list)
    breakdown: dict[str, float] = Field(default_factory=dict)
    note: str | None = None

    def lines(self) -> list[str]:
        """One feedback line per component."""
        if self.note:
            return [self.note]
        out = [f"DB: {'matches' if self.db_match else 'differs from'} the database the "
               "gold actions produce"]
        missing = [c.info for c in self.communicate if not c.met]
        if "COMMUNICATE" in self.reward_basis and self.communicate:
            out.append("COMMUNICATE: " + (f"never told the user {', '.join(map(repr, missing))}"
                                          if missing else "told the user everything asked"))
        return out


def replay(calls: Iterable[Call], domain: str = "airline") -> OverlayDB:
    """A fresh database with ``calls`` run on it in order; a refused call changes
    nothing more than the tool itself did before refusing (as in the live run)."""
    db = OverlayDB(data.load_db(data.db_path(domain)))
    for name, arguments in calls:
        with contextlib.suppress(ToolError):
            db.run(name, arguments)
    return db


@functools.lru_cache(maxsize=128)
def _gold_changes(domain: str, task_id: str) -> str:
    task = data.tasks(domain)[task_id]
    actions = (task.evaluation_criteria.actions or []) if task.evaluation_criteria else []
    return json.dumps(replay(((a.name, a.arguments) for a in actions), domain).changes(),
                      sort_keys=True)


def gold_changes(task_id: str, domain: str = "airline") -> dict[str, Any]:
    """The records the task's gold actions change, ``{table: {key: record}}``."""
    changes: dict[str, Any] = json.loads(_gold_changes(domain, task_id))
    return changes


def communicated(info: str, agent_texts: Sequence[str]) -> bool:
    """tau2's match: ``info.lower() in text.lower().replace(",", "")``."""
    needle = info.lower()
    return any(needle in text.lower().replace(",", "") for text in agent_texts)


def score(task: data.Task, calls: Sequence[Call], agent_texts: Sequence[str], *,
          stopped: str, domain: str = "airline") -> Tau2Reward:
    """The reward of a conversation: its completed-or-not tool ``calls`` (name,
    arguments) in order, the agent's text messages, and why it stopped."""
    criteria = task.evaluation_criteria
    basis = list(criteria.reward_basis) if criteria is not None else []
    if stopped not in NORMAL_STOPS:
        return Tau2Reward(reward=0.0, reward_basis=basis,
                          note=f"the conversation ended early ({stopped}): reward 0, as "
                          "tau2 gives a simulation that did not stop normally")
    if criteria is None:
        return Tau2Reward(reward=1.0, reward_basis=basis, note="no evaluation criteria")
    predicted = json.loads(json.dumps(replay(calls, domain).changes(), sort_keys=True))
    db_match = predicted == gold_changes(task.id, domain)
    checks = [CommunicateResult(info=info, met=communicated(info, agent_texts))
              for info in criteria.communicate_info or []]
    parts = {"DB": 1.0 if db_match else 0.0,
             "COMMUNICATE": 1.0 if all(c.met for c in checks) else 0.0}
    reward, breakdown = 1.0, {}
    for name in basis:
        if name in parts:
            breakdown[name] = parts[name]
            reward *= parts[name]
    return Tau2Reward(reward=reward, reward_basis=basis, db_match=db_match,
                      communicate=checks, breakdown=breakdown)


def rollout_calls(messages: Sequence[Message]) -> list[Call]:
    """Every tool call of the agent's messages, in order, completed or refused (tau2
    replays them all); a call whose arguments were not a JSON object is left out."""
    return [(part.tool_name, part.tool_input) for message in messages
            if message.role == "assistant" for part in message.parts
            if isinstance(part, ToolPart) and "_raw" not in part.tool_input]


def agent_texts(messages: Sequence[Message]) -> list[str]:
    return [message.plain_text for message in messages
            if message.role == "assistant" and message.plain_text]


def tau2_result(name: str, check: Tau2RewardCheck, rollout: Rollout) -> CriterionResult:
    """The criterion's result: passed iff the reward is 1; the parts in its metadata."""
    task = data.tasks(check.domain).get(check.task_id)
    if task is None:
        return CriterionResult(criterion_name=name, passed=False, score=0.0,
                               feedback=[f"no tau2 {check.domain} task {check.task_id!r}"],
                               metadata={"check": check.type})
    stopped = rollout.metadata.get("stopped")
    result = score(task, rollout_calls(rollout.messages), agent_texts(rollout.messages),
                   stopped=stopped if isinstance(stopped, str) else "unknown",
                   domain=check.domain)
    return CriterionResult(criterion_name=name, passed=result.reward >= 1.0,
                           score=max(0.0, min(1.0, result.reward)), feedback=result.lines(),
                           metadata={"check": check.type,
                                     "tau2": result.model_dump(exclude_none=True)})
