"""``expgit show``: one experience's file, at main, a revision or a version."""

from __future__ import annotations

import dataclasses

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.store.workflow.history import show_experience


@click.command("show")
@click.argument("name")
@click.option("--at", "rev", metavar="REV", help="Show it as it was at this revision.")
@click.option("--version", "version", type=click.IntRange(min=1),
              help="Show version N (the N-th commit that changed it).")
@json_option
@click.pass_context
def show_cmd(ctx: click.Context, name: str, rev: str | None, version: int | None,
             as_json: bool) -> None:
    """Print experience NAME's file (front matter and body).

    \b
    Example:
      expgit show refund-method-rules
      expgit show refund-method-rules --version 1
    """
    shown = show_experience(open_repo(ctx), name, rev=rev, version=version)
    emit(as_json, dataclasses.asdict(shown), lambda: click.echo(shown.content, nl=False))
