from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, short
from expgit.init import init_repository


@click.command("init")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--bare", is_flag=True, help="Create a bare repository (a shared server).")
@click.option("--from", "seed", type=click.Path(path_type=Path, file_okay=False),
              help="Seed from a folder holding expgit.toml and experiences/ "
              "(such as example_repo/).")
@click.option("--no-hooks", is_flag=True, help="Do not install the expgit git hooks.")
@json_option
@click.pass_context
def init_cmd(ctx: click.Context, directory: Path | None, bare: bool, seed: Path | None,
             no_hooks: bool, as_json: bool) -> None:
    """Create an experience repository in DIRECTORY (default: the -C folder).

    The first commit holds expgit.toml and the experiences folder; git hooks that
    validate experience files are installed (client hooks, or server hooks with --bare).

    \b
    Example:
      expgit init my-experiences --from example_repo
      expgit init --bare /srv/git/experiences.git --from example_repo
    """
    result = init_repository(directory or Path("."), bare=bare, seed=seed,
                             hooks=not no_hooks)
    emit(as_json, {"path": str(result.path), "bare": result.bare, "commit": result.commit,
                   "experiences": result.experiences, "hooks": result.messages},
         lambda: click.echo(f"Initialised {'bare ' if bare else ''}experience repository in "
                            f"{result.path} with {result.experiences} experiences "
                            f"({short(result.commit)})"))
