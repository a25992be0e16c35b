"""``expgit log``: the audit trail of policy updates on main, read from its history."""

from __future__ import annotations

from typing import Any

import click

from expgit.cli._common import emit, json_option, minute, open_repo, short
from expgit.cli._views import gradient_view
from expgit.store.workflow.history import PolicyUpdate, policy_log


def _print_update(u: PolicyUpdate) -> None:
    click.echo(click.style(f"{short(u.commit)} {u.kind}", fg="yellow")
               + f"  {minute(u.time)} UTC  {u.author}")
    click.echo(f"    {u.subject}")
    if u.proposal and u.proposal != short(u.commit):  # merged by a forge, or rebuilt
        click.echo(f"    proposal {u.proposal}")
    for c in u.changes:
        click.echo(f"    {c.operation:<6} {c.name}  +{c.added}/-{c.removed}")
    for g in u.gradients:
        click.echo(f"    gradient {g.id}: {g.operation} {g.target}, confidence "
                   f"{g.confidence:.2f}, evidence {', '.join(g.evidence) or '-'}")
        click.echo(f"        {g.rationale.splitlines()[0] if g.rationale else ''}")
    for sha in u.missing_gradients:
        click.echo(f"    gradient {short(sha)}: (not in the repository, or not a gradient)")
    if u.reverts:
        click.echo(f"    reverts {short(u.reverts)}")
    for sha in u.reverted_by:
        click.echo(click.style(f"    reverted by {short(sha)}", fg="red"))
    if u.note:
        click.echo(f"    note: {u.note.strip()}")
    click.echo()


def update_view(u: PolicyUpdate) -> dict[str, Any]:
    """One entry of ``expgit log --json``: the gradients it merged, in full; the trailer
    values it names but cannot load, as ``missing_gradient_commits`` (commits, not ids);
    ``reverts`` and ``reverted_by`` are commits."""
    return {"commit": u.commit, "kind": u.kind, "subject": u.subject,
            "description": u.description, "author": u.author, "time": u.time,
            "changes": [{"experience": c.name, "operation": c.operation,
                         "added": c.added, "removed": c.removed} for c in u.changes],
            "gradients": [gradient_view(g) for g in u.gradients],
            "missing_gradient_commits": list(u.missing_gradients),
            "proposal": u.proposal, "reverts": u.reverts,
            "reverted_by": list(u.reverted_by), "note": u.note}


@click.command("log")
@click.argument("name", required=False)
@click.option("-n", "--max-count", type=click.IntRange(min=1), help="Show at most N updates.")
@json_option
@click.pass_context
def log_cmd(ctx: click.Context, name: str | None, max_count: int | None,
            as_json: bool) -> None:
    """Show each policy update on main (for NAME only if given), newest first:
    description, merged gradients with evidence and confidence, author, time, reverts.

    \b
    Example:
      expgit log
      expgit log refund-method-rules -n 5 --json
    """
    repo = open_repo(ctx)
    tip = repo.main_commit()  # read once: the log and its "commit" name the same tip
    updates = policy_log(repo, name, rev=tip, limit=max_count)

    def human() -> None:
        for update in updates:
            _print_update(update)

    emit(as_json, {"commit": tip, "updates": [update_view(u) for u in updates]}, human)
