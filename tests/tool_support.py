"""Shared by the tool-calling tests: the example airline cases bound in a temp folder,
and scripted agents that call tools."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from conftest import EXAMPLE
from pydantic import BaseModel

from expgit.core.domain import Case
from expgit.llm.port import ToolCall, ToolMessages, ToolTurn
from expgit.train.cases import load_cases
from expgit.train.tools.environment import StateFactory, Tool, read_json

DB = EXAMPLE / "airline" / "db.json"


def write_cases(folder: Path, cases: list[dict[str, Any]], *, environment: str = "airline",
                name: str = "cases.yaml", database: str = "db.json") -> Path:
    """A cases file in ``folder`` bound to ``environment`` with a copy of the example DB."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "db.json").exists():
        shutil.copy(DB, folder / "db.json")
    path = folder / name
    path.write_text(yaml.safe_dump({"environment": environment, "database": database,
                                    "cases": cases}, sort_keys=False))
    return path


def tool_case(folder: Path, name: str, turns: list[str], *checks: dict[str, Any]) -> Case:
    criteria = [{"name": f"c{i}", "check": c} for i, c in enumerate(checks)]
    [case] = load_cases(write_cases(folder, [{"name": name, "input": {"user_turns": turns},
                                              "rubric": {"criteria": criteria}}],
                                    name=f"{name}.yaml"))
    return case


def call(name: str, call_id: str = "c1", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def turn(*calls: ToolCall, text: str = "") -> ToolTurn:
    return ToolTurn(text=text, tool_calls=list(calls))


def last_role(messages: ToolMessages) -> str:
    return str(messages[-1]["role"])


def acting(plan: Callable[[str], list[ToolCall]], answer: str = "Done."
           ) -> Callable[[ToolMessages], ToolTurn]:
    """A stateless scripted agent: after a user message, the calls ``plan(user text)``
    (none: it answers at once); after tool results, ``answer``."""
    def reply(messages: ToolMessages) -> ToolTurn:
        if last_role(messages) == "user":
            calls = plan(str(messages[-1]["content"]))
            return turn(*calls) if calls else turn(text=answer)
        return turn(text=answer)
    return reply


class _Note(BaseModel):
    text: str


def _add_note(state: dict[str, Any], args: _Note) -> Any:
    state["notes"].append(args.text)
    return {"notes": len(state["notes"])}


class NotesKind:
    """An environment of one's own, named by import path (``tool_support:NotesKind``)."""

    name = "notes"

    def open(self, database: Path) -> StateFactory:
        return StateFactory((Tool("add_note", "Add a note.", _Note, _add_note),),
                            read_json(database))
