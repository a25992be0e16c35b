from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.cli._views import proposal_view
from expgit.store.migrate import ALREADY, DEFAULT_ROOT, migrate_to_skills


@click.command("migrate")
@click.option("--to", "layout", type=click.Choice(["skills"]), required=True,
              help="The layout to move to: skills (Agent Skills folders, <root>/<name>/"
                   "SKILL.md).")
@click.option("--root", metavar="DIR",
              help=f"The skills root folder (default: {DEFAULT_ROOT}; give the current "
                   "root to keep it).")
@json_option
@click.pass_context
def migrate_cmd(ctx: click.Context, layout: str, root: str | None, as_json: bool) -> None:
    """Propose moving every experience to the skills layout, as one proposal.

    Each <root>/<name>.md becomes <skills root>/<name>/SKILL.md: summary becomes
    description, status, tags and always move into metadata (expgit-status,
    expgit-tags, expgit-always), and expgit.toml gets layout = "skills". Review, apply
    and revert it like any proposal; versions and `expgit log NAME` go on from before
    the move. An experience that cannot become a valid skill stops it (exit 5, the file
    named, nothing written). Prints the proposal id; a repository already in the skills
    layout prints one line and changes nothing.

    \b
    Example:
      expgit migrate --to skills
      expgit migrate --to skills --root .agents/skills --json
    """
    proposal = migrate_to_skills(open_repo(ctx), root)
    if proposal is None:
        emit(as_json, {"migrated": False, "message": ALREADY, "renames": [], "proposal": None},
             lambda: click.echo(ALREADY))
        return
    renames = [{"experience": c.name, "from": c.old_path, "to": c.path}
               for c in proposal.changes if c.old_path is not None]
    emit(as_json, {"migrated": True, "message": proposal.subject, "renames": renames,
                   "proposal": proposal_view(proposal)},
         lambda: click.echo(proposal.id))
