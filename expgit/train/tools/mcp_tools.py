"""Tools from an MCP server: a ToolEnvironment per rollout over the official ``mcp``
SDK's client (``pip install 'expgit[mcp]'``), configured by ``[agent.mcp]``
(:class:`~expgit.store.format.settings.McpSettings`) or ``--mcp-command`` / ``--mcp-url``.

- **Transports.** ``command`` (+ ``args``, ``env``): a stdio server, one process per
  rollout (started at the rollout's first tool call, stopped when it ends): rollouts never
  share a process, so one that crashes or leaks state ends only its own. ``url``:
  streamable HTTP, one MCP session per rollout. The handshake is the ``initialize`` one
  (``mode="legacy"``), which every server speaks.
- **Listed once.** :class:`McpToolFactory` lists the tools once per run (a short session
  of its own) and keeps the listing, or its failure; their input schemas become the
  OpenAI function tools the agent is sent.
- **State key.** With ``state_key_argument``, that argument is taken out of every
  schema the model sees and set on every call to the rollout's own key
  (:attr:`McpToolEnvironment.state_key`), for servers that keep per-conversation state.
- **Bounds.** Each call gets ``call_timeout_seconds`` (the start and the listing
  ``start_timeout_seconds``); a result
  past ``max_output_chars`` is cut with :func:`expgit.core.redaction.text.cap_text`'s marker.
  Results are untrusted text: the run's redactor redacts the rollout before it is stored.
- **Failures.** A result with ``isError`` or a JSON-RPC error answer is a ToolError (the
  agent sees it). A server that does not start, dies, hangs past the time limit or
  answers malformed JSON-RPC raises :class:`~expgit.errors.ToolServerError`: the rollout
  ends with that cause. The server's stderr is kept (never echoed) and its tail is part
  of the cause.

Each environment runs its session in an event loop of its own thread (an anyio blocking
portal), so the synchronous ToolEnvironment methods can wait for the server; the
executor calls them off its own loop.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import IO, Any, TextIO, cast

import anyio
import anyio.lowlevel
from anyio.from_thread import BlockingPortal, start_blocking_portal

from expgit.core.redaction.text import cap_text
from expgit.errors import ToolServerError, UsageError
from expgit.store.format.settings import McpSettings
from expgit.train.tools.environment import State, ToolError

INSTALL_HINT = "pip install 'expgit[mcp]'"
_STDERR_TAIL = 400  # characters of the server's stderr quoted in a failure's cause
_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED


def require_mcp() -> None:
    """UsageError (exit 2) naming the install command, unless the mcp SDK is installed."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"tools from an MCP server need the mcp package ({exc.name} is "
                         "missing)", hint=INSTALL_HINT) from None
    # the SDK logs a server's malformed lines with their text: that is the rollout's
    # cause to report (bounded, redacted), never raw on the terminal
    logging.getLogger("mcp").addHandler(logging.NullHandler())
    logging.getLogger("mcp").propagate = False


def describe(settings: McpSettings) -> str:
    """The server as a cause names it: its command, or its URL."""
    return repr(settings.command) if settings.command is not None else str(settings.url)


def function_schema(tool: Any, hidden: str | None) -> dict[str, Any]:
    """An MCP tool (``name``, ``description``, ``input_schema``) as an OpenAI function
    tool, without the ``hidden`` argument."""
    parameters: dict[str, Any] = copy.deepcopy(dict(tool.input_schema or {}))
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    if hidden is not None:
        properties = parameters.get("properties")
        if isinstance(properties, dict):
            properties.pop(hidden, None)
        required = parameters.get("required")
        if isinstance(required, list):
            parameters["required"] = [r for r in required if r != hidden]
    return {"type": "function", "function": {
        "name": str(tool.name), "description": str(tool.description or ""),
        "parameters": parameters}}


def result_text(result: Any) -> str:
    """A CallToolResult's content as text: its text blocks, a placeholder for others, or
    its structured content as JSON."""
    texts = [str(block.text) if getattr(block, "type", None) == "text"
             else f"[{getattr(block, 'type', 'unknown')} content]"
             for block in result.content or []]
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, sort_keys=True))
    return "\n".join(texts)


def _cause(exc: BaseException) -> str:
    """The first leaf of an exception (group), as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or "no message"
    return f"{type(exc).__name__}: {text}"


class _Connection:
    """One MCP client session, in its own thread's event loop until :meth:`close`."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self._stack = ExitStack()
        self._errlog: IO[str] = self._stack.enter_context(
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))  # noqa: SIM115
        self._portal: BlockingPortal = self._stack.enter_context(start_blocking_portal())
        self._client: Any = None
        self._failure: str | None = None  # why the session ended, once it has
        self._protocol_error: str | None = None
        self._scope: anyio.CancelScope | None = None
        self._ready: anyio.Event | None = None
        self._closing: anyio.Event | None = None
        try:
            self._portal.call(self._events)
            self._portal.start_task_soon(self._serve)
            self._portal.call(self._started)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ in the portal
    def _events(self) -> None:
        self._ready, self._closing = anyio.Event(), anyio.Event()

    async def _started(self) -> None:
        assert self._ready is not None and self._closing is not None
        with anyio.move_on_after(self.settings.start_timeout_seconds):
            await self._ready.wait()
        if self._client is None:
            self._closing.set()
            raise self._error("did not start", self._failure or "no answer to initialize "
                              f"within {self.settings.start_timeout_seconds:g}s "
                              "([agent.mcp] start_timeout_seconds)")

    async def _serve(self) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert self._ready is not None and self._closing is not None
        s = self.settings
        server: Any = s.url if s.command is None else stdio_client(
            StdioServerParameters(command=s.command, args=list(s.args), env=dict(s.env)),
            errlog=cast("TextIO", self._errlog))
        try:
            async with Client(server, mode="legacy", cache=None,
                              message_handler=self._on_message) as client:
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:  # the server's failure is the rollout's cause
            self._failure = self._failure or _cause(exc)
        finally:
            self._failure = self._failure or "the session ended"
            self._client = None
            self._ready.set()
            if self._scope is not None:
                self._scope.cancel()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line that is not JSON-RPC
            self._protocol_error = f"malformed JSON-RPC from the server: {_cause(message)}"
            if self._scope is not None:
                self._scope.cancel()

    async def _request(self, method: str, *args: Any) -> Any:
        client = self._client
        if self._protocol_error is not None:
            raise self._error("failed", self._protocol_error)
        if client is None:
            raise self._error("is gone", self._failure or "the session ended")
        with anyio.move_on_after(self.settings.call_timeout_seconds) as scope:
            self._scope = scope
            try:
                result = await getattr(client, method)(*args)
                await anyio.lowlevel.checkpoint()  # a bad line's report, queued before
                if self._protocol_error is None:
                    return result
            except Exception as exc:
                from mcp.shared.exceptions import MCPError

                if isinstance(exc, MCPError) and exc.code != _CONNECTION_CLOSED:
                    raise ToolError(exc.error.message) from None
                raise self._error("failed", self._protocol_error or _cause(exc)) from None
            finally:
                self._scope = None
        raise self._error("failed", self._protocol_error or self._failure or
                          f"no answer within {self.settings.call_timeout_seconds:g}s "
                          "([agent.mcp] call_timeout_seconds)")

    async def _stop(self) -> None:
        if self._closing is not None:
            self._closing.set()
        with anyio.move_on_after(self.settings.call_timeout_seconds):
            while self._client is not None:
                await anyio.sleep(0.01)

    # ----------------------------------------------------------------- from any thread
    def request(self, method: str, *args: Any) -> Any:
        return self._portal.call(self._request, method, *args)

    def _error(self, what: str, cause: str) -> ToolServerError:
        message = f"the MCP server {describe(self.settings)} {what}: {cause}"
        tail = self._stderr_tail()
        return ToolServerError(message + (f"; its stderr ends: {tail}" if tail else ""))

    def _stderr_tail(self) -> str:
        try:
            self._errlog.flush()
            self._errlog.seek(0)
            text = self._errlog.read()
        except (OSError, ValueError):
            return ""
        return " ".join(text[-_STDERR_TAIL:].split())

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a broken session: nothing left to save
            self._portal.call(self._stop)
        self._stack.close()


class McpToolEnvironment:
    """One rollout's tools on the MCP server (a ToolEnvironment with ``close``): its own
    session (and, for a stdio server, its own process), opened at its first call."""

    def __init__(self, factory: McpToolFactory, state_key: str,
                 env: Mapping[str, str] | None = None) -> None:
        self.factory = factory
        self.state_key = state_key
        self.env = dict(env or {})  # more environment for this rollout's stdio server
        self._connection: _Connection | None = None
        self._lock = threading.Lock()

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.factory.tool_schemas()

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        settings = self.factory.settings
        args = dict(arguments)
        if settings.state_key_argument is not None:
            args[settings.state_key_argument] = self.state_key
        with self._lock:
            if self._connection is None:
                self._connection = _Connection(settings if not self.env else
                                               settings.model_copy(update={
                                                   "env": {**settings.env, **self.env}}))
            result = self._connection.request("call_tool", name, args)
        text, _ = cap_text(self.factory.content(result), self.factory.max_output_chars)
        if result.is_error:
            raise ToolError(text)
        return text

    def final_state(self) -> State:
        """Nothing: the state is the server's (a case source that scores it reads it
        there, by :attr:`state_key`)."""
        return {}

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class McpToolFactory:
    """An EnvironmentFactory over the MCP server of ``settings``: the tools listed once
    (on first use; a failure to list is kept too, and each rollout ends with it), and
    a fresh :class:`McpToolEnvironment` per rollout. ``max_output_chars``: the bound of
    a tool result (``[limits] max_message_chars``); ``content``: a CallToolResult as the
    text the agent sees (:func:`result_text`; a server with its own envelope, such as
    tau2's, unwraps it there), before the bound."""

    def __init__(self, settings: McpSettings, *, max_output_chars: int = 20_000,
                 content: Callable[[Any], str] = result_text) -> None:
        require_mcp()
        self.settings = settings
        self.max_output_chars = max_output_chars
        self.content = content
        self._lock = threading.Lock()
        self._schemas: list[dict[str, Any]] | None = None
        self._failure: ToolServerError | None = None

    def tool_schemas(self) -> list[dict[str, Any]]:
        with self._lock:
            if self._schemas is None and self._failure is None:
                try:
                    self._schemas = self._list()
                except ToolServerError as exc:
                    self._failure = exc
                except ToolError as exc:
                    self._failure = ToolServerError(
                        f"the MCP server {describe(self.settings)} refused to list its "
                        f"tools: {exc}")
            if self._failure is not None:
                raise self._failure
            assert self._schemas is not None
            return copy.deepcopy(self._schemas)

    def _list(self) -> list[dict[str, Any]]:
        connection = _Connection(self.settings)
        try:
            tools = connection.request("list_tools").tools
        finally:
            connection.close()
        return [function_schema(tool, self.settings.state_key_argument) for tool in tools]

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(str(s["function"]["name"]) for s in self.tool_schemas())

    def initial_state(self) -> State:
        return {}

    def new(self, state_key: str | None = None,
            env: Mapping[str, str] | None = None) -> McpToolEnvironment:
        """A rollout's environment; ``state_key``: its key (default: a fresh random one);
        ``env``: more environment variables for its stdio server (over ``settings.env``)."""
        return McpToolEnvironment(self, state_key or uuid.uuid4().hex, env)

