from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo, short
from expgit.store.always_on import stale_files
from expgit.store.skill_check import warnings_at
from expgit.store.validate import require_valid, validate_commit


@click.command("validate")
@click.argument("rev", required=False)
@json_option
@click.pass_context
def validate_cmd(ctx: click.Context, rev: str | None, as_json: bool) -> None:
    """Check every experience file at REV (default: main): schema, name = file name,
    token budget, layout, injection. A prompt-injection payload (an instruction override,
    a download piped to a shell, secrets sent away, hidden characters...) is a problem,
    and so is a template override that does not render. In the skills layout, the
    always-on block of AGENTS.md must be up to date with the skills. With [skills]
    scanner = "cisco" in expgit.toml, Cisco's skill-scanner scans them too (exit 2 when
    it is not installed: pip install 'expgit[scanner]'). Exit 5 and one line per problem
    when any file is invalid.

    \b
    Example:
      expgit validate
      expgit validate main~1 --json
    """
    repo = open_repo(ctx)
    commit = repo.commit(rev) if rev else repo.main_commit()
    problems = validate_commit(repo, commit) + stale_files(repo, commit)
    warnings = warnings_at(repo, commit) if repo.layout.skills else []
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)

    def human() -> None:
        for problem in problems:
            click.echo(problem)
        if not problems:
            click.echo(f"all experiences valid at {short(commit)}")

    emit(as_json, {"commit": commit, "valid": not problems, "problems": problems,
                   **({"warnings": warnings} if warnings else {})}, human)
    require_valid(problems, f"at {short(commit)}")
