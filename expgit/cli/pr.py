from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.cli._complete import open_ids
from expgit.store.workflow.forge import FORGES, shell_line
from expgit.store.workflow.pull_request import ForgeCliMissing, PullRequest, push_proposal


def _human(result: PullRequest, opened: bool) -> None:
    state = "pushed" if result.pushed else "already pushed"
    click.echo(f"{result.branch}: {state} to {result.remote} ({result.remote_url})")
    if opened:
        click.echo(f"opened: {result.url or '(the ' + result.forge + ' CLI printed no URL)'}")
        return
    click.echo(f"title: {result.title}\n\n{result.body}")
    if "--body" in result.command:  # the body inline: shown above already
        click.echo(f"open the pull request with: expgit pr {result.proposal} --remote "
                   f"{shell_line([result.remote])} --open  (needs {result.command[0]})")
    else:
        click.echo(f"open the pull request with: {shell_line(result.command)}")


@click.command("pr")
@click.argument("proposal", shell_complete=open_ids("proposal"))
@click.option("--remote", default="origin", show_default=True,
              help="The remote to push the proposal's branch to.")
@click.option("--open", "open_pr", is_flag=True,
              help="Then open the pull request with the forge's CLI (gh, or glab).")
@click.option("--forge", type=click.Choice(sorted(FORGES)),
              help="The forge of the remote (default: from its URL, else github).")
@click.option("--body-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the pull request's body to this file.")
@json_option
@click.pass_context
def pr_cmd(ctx: click.Context, proposal: str, remote: str, open_pr: bool,
           forge: str | None, body_file: Path | None, as_json: bool) -> None:
    """Push PROPOSAL's branch to a remote and write its pull request's title and body.

    The body ends in the trailers Expgit-Proposal and Expgit-Gradient, so a squash merge
    keeps them. The branch is created on the remote, never overwritten: a remote branch
    with other content is refused (exit 3). With --open, the forge's CLI must be on PATH;
    without it nothing is pushed, and the commands to run are printed (exit 2).

    \b
    Example:
      expgit pr 1a2b3c4d5e6f --remote origin
      expgit pr 1a2b3c4d5e6f --remote origin --open
      expgit pr 1a2b3c4d5e6f --forge gitlab --body-file pr.md --json
    """
    try:
        result = push_proposal(open_repo(ctx), proposal, remote, forge=forge,
                               open_pr=open_pr, body_file=body_file)
    except ForgeCliMissing as exc:
        click.echo("run these commands to push the branch and open the pull request:",
                   err=as_json)
        for line in exc.commands:
            click.echo(f"  {line}", err=as_json)
        raise
    emit(as_json, dataclasses.asdict(result), lambda: _human(result, open_pr))
