"""A tiny MCP server for the tests of tools from an MCP server (built with the mcp SDK's
MCPServer, the former FastMCP): counters kept per ``state_key``.

    python tests/mcp_counter_server.py [MODE] [--http PORT]

Tools: ``add(amount)`` adds to the caller's counter and returns its total;
``total()`` returns it; ``shout(chars)`` returns that many characters. MODE:
``normal``; ``die`` (the process exits at its second tool call); ``garbage`` (a line
that is not JSON-RPC on stdout at every tool call); ``hang`` (every tool call sleeps
for an hour). ``--http PORT``: streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

from mcp.server.mcpserver import MCPServer

MODE = next((a for a in sys.argv[1:] if not a.startswith("--") and not a.isdigit()),
            "normal")
server = MCPServer("counters")
# the wire, taken before the SDK's stdio server points fd 1 at stderr (it guards the
# protocol against stray prints): a garbage line must reach the client's reader
WIRE = os.dup(1)
counters: Counter[str] = Counter()
calls = 0


def _misbehave() -> None:
    global calls
    calls += 1
    if MODE == "die" and calls >= 2:
        sys.stderr.write("counter server: dying on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if MODE == "garbage":
        os.write(WIRE, b"this is not json-rpc\n")
    if MODE == "hang":
        time.sleep(3600)


@server.tool()
def add(amount: int, state_key: str) -> int:
    """Add ``amount`` to your counter; returns the new total."""
    _misbehave()
    counters[state_key] += amount
    return counters[state_key]


@server.tool()
def total(state_key: str) -> int:
    """Your counter's total."""
    _misbehave()
    return counters[state_key]


@server.tool()
def shout(chars: int, state_key: str) -> str:
    """A text of ``chars`` characters."""
    _misbehave()
    return "A" * chars


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
