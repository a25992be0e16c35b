from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo, short
from expgit.retrieval.skill_listing import BudgetCheck, budget_checks
from expgit.store.format.always_on import stale_files
from expgit.store.format.skill_check import warnings_at
from expgit.store.format.validate import require_valid, validate_commit


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
    \b
    In the skills layout it also prints the size of the skill listing the agents see
    (name, description and location of every active skill that is not always-on) against
    Claude Code's budget (1% of the context window, descriptions cut at 1,536
    characters) and Codex's (2% of the window or 8,000 characters); past one it warns
    (a warning, not a failure). [agent] context_window_tokens sets the window.

    \b
    Example:
      expgit validate
      expgit validate main~1 --json
    """
    repo = open_repo(ctx)
    commit = repo.commit(rev) if rev else repo.main_commit()
    problems = validate_commit(repo, commit) + stale_files(repo, commit)
    warnings = warnings_at(repo, commit) if repo.layout.skills else []
    listing = (budget_checks(repo.snapshot(commit), repo.settings.agent.context_window_tokens)
               if repo.layout.skills else [])
    warnings += [_over(check) for check in listing if check.over]
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)

    def human() -> None:
        for problem in problems:
            click.echo(problem)
        for check in listing:
            click.echo(_size_line(check))
        if not problems:
            click.echo(f"all experiences valid at {short(commit)}")

    emit(as_json, {"commit": commit, "valid": not problems, "problems": problems,
                   **({"listing": [c.as_json() for c in listing]} if listing else {}),
                   **({"warnings": warnings} if warnings else {})}, human)
    require_valid(problems, f"at {short(commit)}")


def _limit(check: BudgetCheck) -> str:
    tokens = f"{check.limit_tokens} tokens" if check.limit_tokens is not None else ""
    chars = f"{check.limit_chars} characters" if check.limit_chars is not None else ""
    return " or ".join(x for x in (tokens, chars) if x)


def _size_line(check: BudgetCheck) -> str:
    return (f"skill listing for {check.agent}: {check.chars} characters (~{check.tokens} "
            f"tokens); budget {_limit(check)} ({check.rule}): "
            f"{'OVER' if check.over else 'fits'}")


def _over(check: BudgetCheck) -> str:
    return (f"the skill listing ({check.chars} characters, ~{check.tokens} tokens) is over "
            f"{check.agent}'s budget of {_limit(check)} ({check.rule}): it will shorten "
            "descriptions or leave skills out; fold narrow skills into broader ones")
