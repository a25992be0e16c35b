from __future__ import annotations

import dataclasses

import click

from expgit.cli._common import emit, json_option, open_repo, short, warn
from expgit.store.workflow.revert import revert


@click.command("revert")
@click.argument("rev")
@json_option
@click.pass_context
def revert_cmd(ctx: click.Context, rev: str, as_json: bool) -> None:
    """Undo REV's experience changes in a new commit on main.

    Later edits of the same experiences are kept by a three-way merge; if they conflict,
    nothing is written (exit 3).

    \b
    Example:
      expgit revert main
      expgit revert 1a2b3c4d5e6f --json
    """
    result = revert(open_repo(ctx), rev)
    warn(result.warnings)
    emit(as_json, dataclasses.asdict(result), lambda: click.echo(
        f"Reverted {short(result.reverted)} in {short(result.commit)}: "
        + ", ".join(result.experiences)))
