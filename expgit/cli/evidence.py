"""``expgit evidence``: the run behind an edit, for a reviewer."""

from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo


@click.command("evidence")
@click.argument("id_", metavar="ID")
@json_option
@click.pass_context
def evidence_cmd(ctx: click.Context, id_: str, as_json: bool) -> None:
    """Show the evidence behind a gradient, a proposal or a trajectory (ID: a unique
    prefix): each edit's rationale, prediction and check, the trajectory it came from,
    that run's transcript with its tool calls, and the evaluation per criterion.

    \b
    Example:
      expgit evidence 3f9c2a
      expgit evidence expgit/trajectories:trajectories/0123456789abcdef.md --json
    """
    from expgit.train.reports.evidence import evidence  # loads the trajectory store's readers
    from expgit.train.reports.evidence_text import render_evidence

    shown = evidence(open_repo(ctx), id_)
    emit(as_json, shown.model_dump(mode="json"),
         lambda: click.echo(render_evidence(shown), nl=False))
