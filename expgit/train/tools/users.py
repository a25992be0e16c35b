"""The user side of a multi-turn rollout: scripted from the case, or simulated by an LLM.

A case's ``input`` names it: ``user_turns`` (a list of messages, said in order, one per
user turn; the conversation ends after the last), or ``user_instructions`` (text: an
LLM plays the user from them, one ``user`` call per turn, and ends the conversation by
answering ``###STOP###``; ``user_query``, if given, is its first message), or
``user_scenario`` (a tau2 task's scenario: :class:`ScenarioUser`, tau2's user simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from expgit.core.domain import Case
from expgit.errors import InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository

STOP = "###STOP###"


@dataclass(frozen=True)
class Turn:
    role: str  # "user" | "agent"
    text: str


class UserSimulator(Protocol):
    async def next_message(self, transcript: Sequence[Turn]) -> str | None:
        """The user's next message given the conversation so far; None: the user is done."""
        ...


@dataclass
class ScriptedUser:
    turns: list[str]
    _said: int = field(default=0)

    async def next_message(self, transcript: Sequence[Turn]) -> str | None:
        if self._said >= len(self.turns):
            return None
        self._said += 1
        return self.turns[self._said - 1]


@dataclass
class LLMUser:
    llm: StructuredLLM
    instructions: str
    first: str | None = None
    repo: ExperienceRepository | None = None

    async def next_message(self, transcript: Sequence[Turn]) -> str | None:
        if not transcript and self.first:
            return self.first
        system, user = render_prompt("user", self.repo, instructions=self.instructions,
                                     transcript=list(transcript))
        text = (await self.llm.text("user", [{"role": "system", "content": system},
                                             {"role": "user", "content": user}])).strip()
        return None if not text or STOP in text else text


# tau2's user simulator ends the conversation on any of these (src/tau2/user/
# user_simulator_base.py: STOP, TRANSFER, OUT_OF_SCOPE; user_simulator.py: is_stop).
TAU2_STOPS = (STOP, "###TRANSFER###", "###OUT-OF-SCOPE###")


@dataclass
class ScenarioUser:
    """tau2's user simulator: the guidelines and the task's scenario as the system
    prompt (``prompts/tau2_user.md.j2``), the conversation as a chat with the roles
    flipped (the agent's messages are the simulator's ``user`` turns), one ``user`` call
    per turn; a reply holding any of :data:`TAU2_STOPS` ends the conversation. If the
    agent has not spoken first, the simulator is asked to open."""

    llm: StructuredLLM
    scenario: str
    repo: ExperienceRepository | None = None

    async def next_message(self, transcript: Sequence[Turn]) -> str | None:
        system, opening = render_prompt("tau2_user", self.repo, scenario=self.scenario)
        chat = [{"role": "system", "content": system}]
        for turn in transcript:
            chat.append({"role": "user" if turn.role == "agent" else "assistant",
                         "content": turn.text})
        if not transcript or transcript[-1].role != "agent":
            chat.append({"role": "user", "content": opening})
        text = (await self.llm.text("user", chat)).strip()
        return None if not text or any(stop in text for stop in TAU2_STOPS) else text


def check_user_input(case: Case, where: str) -> None:
    """InvalidInputError unless the case's input says who the user is."""
    turns = case.input.get("user_turns")
    instructions = case.input.get("user_instructions")
    if isinstance(case.input.get("user_scenario"), str) and turns is None:
        instructions = case.input["user_scenario"]  # a tau2 task's (user_for: ScenarioUser)
    if turns is not None:
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
            raise InvalidInputError(f"{where}: input.user_turns must be a non-empty list "
                                    "of messages")
    elif not isinstance(instructions, str) or not instructions.strip():
        raise InvalidInputError(f"{where}: a tool-environment case needs input.user_turns "
                                "(scripted) or input.user_instructions (simulated)")


def user_for(case: Case, llm: StructuredLLM, repo: ExperienceRepository | None = None
             ) -> UserSimulator:
    turns = case.input.get("user_turns")
    if isinstance(turns, list):
        return ScriptedUser([str(t) for t in turns])
    scenario = case.input.get("user_scenario")
    if isinstance(scenario, str):
        return ScenarioUser(llm, scenario, repo)
    first = case.input.get("user_query")
    return LLMUser(llm, str(case.input.get("user_instructions", "")),
                   first if isinstance(first, str) else None, repo)
