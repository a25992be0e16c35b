"""Shared by the listing-mode tests: a skills-layout repository with a baggage skill (the
rule a scripted agent needs) and an always-on refund skill, the airline case that needs
it, and a strict scripted agent that reads a skill only through the ``Skill`` tool."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from skills_support import REFUND, REFUND_MD
from tool_support import call, last_role, turn, write_cases

from expgit.init import init_repository
from expgit.llm.port import ToolMessages, ToolTurn

BAGGAGE = "baggage-rules"
OTHER = "seat-rules"
MARKER = "Call update_reservation_baggages yourself"
DESCRIPTION = "Use when a user asks to change the checked bags of a reservation."
BAGGAGE_MD = f"""---
name: {BAGGAGE}
description: {DESCRIPTION}
metadata:
  expgit-tags: baggage
---
# Baggage changes are tool calls

When the user asks to set checked bags: {MARKER}, with the total and paid bags given.
"""
OTHER_MD = f"""---
name: {OTHER}
description: Use when a user asks to change a seat; {"seats by cabin class " * 8}
---
Seats follow the cabin class.
"""
BAGS = re.compile(r"bags of (\w+) to (\d+) total, (\d+) paid, with (\w+)")
SKILL_CALLED = re.compile(r"load skill (\S+)")


TRIGGERS = [
    {"query": "Please set the checked bags of NO6JO3 to 3 total", "should_trigger": True},
    {"query": "I need more luggage on my trip next week", "should_trigger": True},
    {"query": "Change my seat to 12A, please", "should_trigger": False},
]


def skills_repo(tmp: Path, toml_extra: str = "", baggage_description: str | None = None,
                triggers: str | None = None) -> Path:
    """A skills-layout repository at ``tmp/repo`` with the three skills (the baggage
    skill's description replaced by ``baggage_description`` if given, and its
    ``evals/triggers.json`` holding ``triggers`` if given)."""
    seed = tmp / "seed"
    if triggers is not None:
        (seed / "skills" / BAGGAGE / "evals").mkdir(parents=True)
        (seed / "skills" / BAGGAGE / "evals" / "triggers.json").write_text(triggers)
    baggage = BAGGAGE_MD if baggage_description is None else BAGGAGE_MD.replace(
        DESCRIPTION, baggage_description)
    for name, text in ((BAGGAGE, baggage), (REFUND, REFUND_MD), (OTHER, OTHER_MD)):
        (seed / "skills" / name).mkdir(parents=True, exist_ok=True)
        (seed / "skills" / name / "SKILL.md").write_text(text)
    (seed / "expgit.toml").write_text('experiences_root = "skills"\nlayout = "skills"\n'
                                      f"token_budget = 2000\n{toml_extra}")
    init_repository(tmp / "repo", seed=seed)
    return tmp / "repo"


def bag_cases(folder: Path, *turns: str) -> Path:
    """One airline case per user turn, passing when the bags of NO6JO3 are set to 3."""
    return write_cases(folder, [{
        "name": f"bags-{i}", "task_signature": "update-baggage", "input": {"user_turns": [t]},
        "rubric": {"criteria": [{"name": "bags-set", "check": {
            "type": "db_state", "expected": {"reservations.NO6JO3.total_baggages": 3}}}]}}
        for i, t in enumerate(turns)], name="cases.yaml")


ASK = "Please set the checked bags of NO6JO3 to 3 total, 0 paid, with credit_card_4421."


def listing_agent(messages: ToolMessages) -> ToolTurn:
    """Strict: it acts on the baggage rule only when the rule came back from a ``Skill``
    call (never from the system prompt, which must hold the listing, not the body). A
    user message ``... load skill NAME`` makes it load NAME first."""
    system = str(messages[0]["content"])
    assert "<available_skills>" in system and MARKER not in system
    if last_role(messages) == "user":
        asked = SKILL_CALLED.search(str(messages[-1]["content"]))
        wanted = asked.group(1) if asked else BAGGAGE
        if f"<name>\n{wanted}\n</name>\n<description>\nUse when" in system or asked:
            return turn(call("Skill", "s1", skill=wanted))
        return turn(text="I cannot help with bags.")
    last = messages[-1]
    if last["role"] == "tool" and str(last["tool_call_id"]) == "s1":
        if MARKER not in str(last["content"]):
            return turn(text="No skill for that; please ask a human agent.")
        match = BAGS.search(next(str(m["content"]) for m in messages if m["role"] == "user"))
        assert match is not None
        rid, total, paid, payment = match.groups()
        return turn(call("update_reservation_baggages", "b1", reservation_id=rid,
                         total_baggages=int(total), nonfree_baggages=int(paid),
                         payment_id=payment))
    return turn(text="Your bags are updated.")


def rollout_requests(server: Any) -> list[tuple[str, Any, dict[str, Any] | None]]:
    return [c for c in server.chat.calls if c[0] == "rollout"]


def report_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data
