"""``expgit hooks install``: the git hooks that check experiences on commit and on push."""

from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.hooks.install import install_hooks


@click.group("hooks")
def hooks_group() -> None:
    """Git hooks that refuse invalid experiences on commit and on push.

    \b
    Example:
      expgit hooks install                        # pre-commit, in a clone
      expgit -C server.git hooks install --server # pre-receive and update
    """


@hooks_group.command("install")
@click.option("--server", is_flag=True,
              help="Install the push checks (pre-receive, update) for the repository people "
                   "push to, usually bare, instead of the pre-commit check.")
@json_option
@click.pass_context
def install(ctx: click.Context, server: bool, as_json: bool) -> None:
    """Install the hooks into the repository's hooks folder (core.hooksPath if set).

    \b
    Without --server: pre-commit refuses commits whose staged experience files are
    invalid. With --server: pushes to the main branch are refused if they delete it,
    are not a fast-forward, or bring invalid experience files; other branches pass.

    An existing hook that is not expgit's is kept as <hook>.legacy and runs first.
    Installing again rewrites expgit's hooks in place.

    \b
    Example:
      expgit hooks install
      expgit -C server.git hooks install --server --json
    """
    messages = install_hooks(open_repo(ctx).git, server=server)

    def human() -> None:
        for message in messages:
            click.echo(message)

    emit(as_json, {"hooks": messages}, human)
