"""``expgit mcp``: serve the experiences on main to an agent over MCP (stdio)."""

from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import open_repo
from expgit.errors import UsageError


@click.command("mcp")
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve the experiences on main to an agent as an MCP server over stdio.

    Tools: search_experiences, get_experience, report_outcome (to the outcomes branch;
    main is never written). Resources: experience://NAME, experience://index.

    \b
    Example (what an MCP client runs):
      expgit -C /path/to/my-experiences mcp
    """
    open_repo(ctx)  # not an experience repository: refused before serving
    try:
        from expgit.service.mcp_server import serve_mcp
    except ImportError as exc:
        raise UsageError(f"expgit mcp needs the mcp package ({exc.name} is missing)",
                         hint="pip install 'expgit[mcp]'") from None
    serve_mcp(Path.cwd())
