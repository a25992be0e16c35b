from __future__ import annotations

import dataclasses

import click

from expgit.cli._common import emit, json_option, open_repo, short, warn
from expgit.cli._complete import open_ids
from expgit.store.apply import apply_proposal


@click.command("apply")
@click.argument("proposal", shell_complete=open_ids("proposal"))
@click.option("--remote", help="Apply to the main branch of this remote: push with "
              "--force-with-lease, and fetch and re-check when someone else pushed first.")
@json_option
@click.pass_context
def apply_cmd(ctx: click.Context, proposal: str, remote: str | None, as_json: bool) -> None:
    """Apply PROPOSAL to main under the repository lock.

    If main moved since the proposal was made, every experience it touches must still be
    as the proposal saw it; then it is rebuilt on top of main, else refused (exit 3).

    \b
    Example:
      expgit apply 1a2b3c4d5e6f
      expgit apply 1a2b3c4d5e6f --remote origin
    """
    result = apply_proposal(open_repo(ctx), proposal, remote=remote)
    warn(result.warnings)
    emit(as_json, dataclasses.asdict(result), lambda: click.echo(
        f"Applied proposal {result.proposal}: main {short(result.previous)} -> "
        f"{short(result.commit)}" + (" (rebuilt on the moved main)" if result.rebased else "")
        + (f" on {result.remote}" if result.remote else "")))
