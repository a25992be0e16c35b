"""``expgit export --to DIR``: the active skills where the agents read them."""

from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo, short
from expgit.store.skill_export import export_skills


@click.command("export")
@click.option("--to", "to", required=True, metavar="DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="The project (or home) folder to write into: DIR/.agents/skills, "
              "DIR/.claude/skills and the always-on block of DIR/AGENTS.md.")
@click.option("--rev", metavar="REV", help="Export the skills at REV (default: main).")
@click.option("--dry-run", is_flag=True,
              help="Print what would change (added, updated, removed, unchanged per "
              "skill) and write nothing.")
@json_option
@click.pass_context
def export_cmd(ctx: click.Context, to: Path, rev: str | None, dry_run: bool,
               as_json: bool) -> None:
    """Write the active skills of main (or REV) into DIR/.agents/skills/<name>/ (whole
    folders, exact bytes), link each from DIR/.claude/skills/<name> for Claude Code, and
    write the always-on block of DIR/AGENTS.md (not at the user level, --to ~). A
    manifest (.agents/skills/.expgit-export.json) records what expgit wrote: a second
    run changes nothing, a skill no longer active is removed, and a folder or file that
    expgit did not write is never overwritten (exit 3, nothing written).

    \b
    Example:
      expgit export --to ../my-project --dry-run
      expgit export --to ~ --json
    """
    result = export_skills(open_repo(ctx), to, rev=rev, dry_run=dry_run)

    def human() -> None:
        verb = "would change" if dry_run else "exported"
        click.echo(f"{verb} {result.to} from {short(result.commit)} "
                   f"(.claude/skills: {result.claude})")
        for change in result.skills:
            click.echo(f"  {change.action:<9}  {change.name}")
        for path, action in result.always_on.items():
            click.echo(f"  {action:<9}  {path} (always-on block)"
                       if action in ("updated", "unchanged") else f"  {path}: {action}")
        if not result.skills:
            click.echo("  no active skills")

    emit(as_json, {"to": str(result.to), "commit": result.commit, "dry_run": dry_run,
                   "claude": result.claude,
                   "skills": [{"name": c.name, "action": c.action} for c in result.skills],
                   "always_on": [{"path": p, "action": a}
                                 for p, a in result.always_on.items()]}, human)
