from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo, skipped_strays
from expgit.cli._complete import open_ids
from expgit.cli._views import proposal_view
from expgit.errors import InvalidInputError
from expgit.store.refnames import Stray
from expgit.store.workflow.proposals import merge


@click.command("merge")
@click.argument("gradients", nargs=-1, shell_complete=open_ids("gradient"))
@click.option("--all", "merge_all", is_flag=True,
              help="Merge every open gradient that is not already in a proposal.")
@click.option("--pr-body", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the PR description (title line, blank line, body) to FILE.")
@json_option
@click.pass_context
def merge_cmd(ctx: click.Context, gradients: tuple[str, ...], merge_all: bool,
              pr_body: Path | None, as_json: bool) -> None:
    """Merge GRADIENTS (ids) into one proposal commit with a PR description.

    Edits of different experiences combine and identical edits collapse; two different
    edits of one experience, or a gradient whose experience changed on main since, are a
    conflict (exit 3) and nothing is written. Prints the proposal id.

    \b
    Example:
      expgit merge --all --pr-body pr.md
      expgit merge 1a2b3c4d5e6f 6f5e4d3c2b1a
    """
    if merge_all == bool(gradients):
        raise InvalidInputError("name the gradients to merge, or use --all")
    strays: list[Stray] = []
    try:
        proposal = merge(open_repo(ctx), None if merge_all else list(gradients),
                         pr_body=pr_body, strays=strays)
    finally:  # said even when nothing is left to merge
        skipped = skipped_strays(strays)
    emit(as_json, proposal_view(proposal) | skipped, lambda: click.echo(proposal.id))
