"""The tool environment of a multi-turn rollout, and a helper to write one.

A :class:`ToolEnvironment` is one rollout's world: its tools' schemas (OpenAI-style),
the execution of a call against its own state, and that state at the end (what
``db_state`` checks compare). An :class:`EnvironmentFactory` makes a fresh one per
rollout from a parsed database fixture, so concurrent rollouts never share state; an
:class:`EnvironmentKind` (registered by name, see :mod:`expgit.train.tools.registry`)
parses a fixture into a factory.

:class:`StateEnvironment` implements the Protocol over a JSON-like ``dict`` state and
a list of :class:`Tool` (arguments as a pydantic model: its JSON Schema is the tool's
schema, and arguments that fail it are a :class:`ToolError`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from expgit.errors import InvalidInputError

State = dict[str, Any]


class ToolError(Exception):
    """A call the tool refuses (bad arguments, a missing record, a broken rule): the
    agent sees the message as the call's error result."""


class ToolEnvironment(Protocol):
    """One rollout's tools and state. ``execute`` returns the result text the agent sees
    and raises (ToolError or anything else) for an error result; the executor refuses
    a tool not in ``tool_schemas`` before calling it. ``execute`` raising
    :class:`~expgit.errors.ToolServerError` is no result: the environment itself broke,
    and the rollout ends with that cause. The methods may block (a server's round trip):
    the executor calls them off its event loop. An environment that holds a resource (a
    server process, a session) also has ``close()``, which the executor calls once when
    the rollout ends (:func:`close_environment`)."""

    def tool_schemas(self) -> list[dict[str, Any]]: ...

    def execute(self, name: str, arguments: dict[str, Any]) -> str: ...

    def final_state(self) -> State: ...


class EnvironmentFactory(Protocol):
    """A parsed fixture: its tool names, its initial state, a fresh environment."""

    @property
    def tool_names(self) -> frozenset[str]: ...

    def initial_state(self) -> State: ...

    def new(self) -> ToolEnvironment: ...


@dataclass(frozen=True)
class Conversation:
    """How a conversation in an environment differs from the executor's defaults. A
    factory may have one as its ``conversation`` attribute (tau2's domains do):
    ``instructions`` heads the agent's system prompt in place of the generic one (the
    experiences follow, as always), ``greeting`` is the agent's first message, said
    before the user speaks, and the limits replace ``[train] tool_max_steps`` /
    ``tool_max_user_turns``."""

    instructions: str | None = None
    greeting: str | None = None
    max_steps: int | None = None
    max_user_turns: int | None = None


class EnvironmentKind(Protocol):
    """A named kind of environment (``environment: airline`` in a cases file)."""

    name: str

    def open(self, database: Path) -> EnvironmentFactory:
        """The factory of ``database``; InvalidInputError if it does not parse."""
        ...


# What an environment (or its factory) may also do. A kind registered by a plugin need
# not: the executor checks for each at run time, hence runtime_checkable.
@runtime_checkable
class TakesServedTools(Protocol):
    """A factory that can take its tools from an MCP server's (tau2's domains can)."""

    def with_tools(self, tools: EnvironmentFactory) -> EnvironmentFactory | None: ...


@runtime_checkable
class HasConversation(Protocol):
    """A factory whose conversations differ from the executor's defaults."""

    @property
    def conversation(self) -> Conversation: ...


@runtime_checkable
class Closable(Protocol):
    """An environment that holds a resource (a server process, a session)."""

    def close(self) -> None: ...


def served_by(factory: EnvironmentFactory, tools: EnvironmentFactory | None
              ) -> EnvironmentFactory | None:
    """``factory`` with its tools taken from ``tools`` (an MCP server's), for a factory
    that can take them (:class:`TakesServedTools`); None if it cannot, or there are no
    ``tools``."""
    if tools is None or not isinstance(factory, TakesServedTools):
        return None
    return factory.with_tools(tools)


def conversation_of(factory: EnvironmentFactory) -> Conversation:
    """The factory's :class:`Conversation` (:class:`HasConversation`), or the executor's
    defaults when it has none."""
    return factory.conversation if isinstance(factory, HasConversation) else Conversation()


def close_environment(env: ToolEnvironment) -> None:
    """``env.close()``, for an environment that has one (:class:`Closable`)."""
    if isinstance(env, Closable):
        env.close()


@dataclass(frozen=True)
class Tool:
    """One tool: ``run(state, args)`` may change ``state`` and returns a JSON-able
    result; it raises ToolError for a refused call."""

    name: str
    description: str
    args: type[BaseModel]
    run: Callable[[State, Any], Any]

    def schema(self) -> dict[str, Any]:
        parameters = self.args.model_json_schema()
        parameters.pop("title", None)
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": parameters}}


class StateEnvironment:
    """A ToolEnvironment over a deep copy of ``state`` and ``tools``."""

    def __init__(self, tools: Sequence[Tool], state: State) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.state: State = copy.deepcopy(state)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}")
        try:
            args = tool.args.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors()[:4])
            raise ToolError(f"invalid arguments for {name}: {problems}") from None
        result = tool.run(self.state, args)
        return result if isinstance(result, str) else json.dumps(result, sort_keys=True)

    def final_state(self) -> State:
        return self.state


@dataclass(frozen=True)
class StateFactory:
    """An EnvironmentFactory of StateEnvironments (each with its own copy of ``state``)."""

    tools: tuple[Tool, ...]
    state: State

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools)

    def initial_state(self) -> State:
        return copy.deepcopy(self.state)

    def new(self) -> StateEnvironment:
        return StateEnvironment(self.tools, self.state)


def read_json(path: Path) -> Any:
    """A JSON fixture; InvalidInputError (one line) if it is missing or does not parse."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such database fixture") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: cannot read the database fixture: {exc}") from None
    except ValueError as exc:
        raise InvalidInputError(f"{path}: the database fixture is not valid JSON: {exc}"
                                ) from None
