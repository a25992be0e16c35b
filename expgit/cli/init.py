from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, short, warn
from expgit.init import init_repository
from expgit.store.format.layout import LayoutKind


@click.command("init")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--bare", is_flag=True, help="Create a bare repository (a shared server).")
@click.option("--from", "seed", type=click.Path(path_type=Path, file_okay=False),
              help="Seed from a folder holding expgit.toml and its experiences, in "
              "either layout (such as example_repo/).")
@click.option("--layout", type=click.Choice(["skills", "flat"]), default=None,
              help="skills (the default): <root>/<name>/SKILL.md Agent Skills folders; "
              "flat: experiences/<name>.md files. A seed in the other layout is "
              "converted.")
@click.option("--no-hooks", is_flag=True, help="Do not install the expgit git hooks.")
@json_option
@click.pass_context
def init_cmd(ctx: click.Context, directory: Path | None, bare: bool, seed: Path | None,
             layout: LayoutKind | None, no_hooks: bool, as_json: bool) -> None:
    """Create an experience repository in DIRECTORY (default: the -C folder).

    The first commit holds expgit.toml and the skills folder (skills/, each skill a
    <name>/SKILL.md folder); git hooks that validate them are installed (client hooks,
    or server hooks with --bare). DIRECTORY may also be the top folder of a git
    repository with commits: expgit is then added to its checked-out branch in one
    commit (expgit.toml, .agents/skills/ and the .claude/skills link), nothing else
    changed.

    \b
    Example:
      expgit init my-experiences --from example_repo
      expgit init --bare /srv/git/experiences.git --from example_repo
      expgit init . --from path/to/example_repo      # inside a code repository
    """
    result = init_repository(directory or Path("."), bare=bare, seed=seed,
                             hooks=not no_hooks, layout=layout)
    warn(result.warnings)
    emit(as_json, {"path": str(result.path), "bare": result.bare, "commit": result.commit,
                   "experiences": result.experiences, "hooks": result.messages,
                   "added_to": result.added_to, "warnings": result.warnings},
         lambda: click.echo(
             f"Added expgit to {result.path} on {result.added_to} with "
             f"{result.experiences} skills ({short(result.commit)})" if result.added_to else
             f"Initialised {'bare ' if bare else ''}experience repository in "
             f"{result.path} with {result.experiences} experiences "
             f"({short(result.commit)})"))
