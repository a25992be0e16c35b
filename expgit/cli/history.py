from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import click

from expgit.cli._common import emit, json_option, open_repo, short
from expgit.cli._views import gradient_view
from expgit.outcomes.stats import experience_stats
from expgit.store.history import (
    ExperienceRow,
    PolicyUpdate,
    list_experiences,
    policy_log,
    show_experience,
)
from expgit.train.track_record import ExperienceStats


@click.command("list")
@click.option("--at", "rev", metavar="REV", help="List the experiences at this revision.")
@click.option("--stats", "with_stats", is_flag=True,
              help="Add usage statistics: runs that had each experience in context, "
                   "passed/failed, helpful/harmful outcome reports, mean score, last use "
                   "(from the trajectories and outcomes branches).")
@json_option
@click.pass_context
def list_cmd(ctx: click.Context, rev: str | None, with_stats: bool, as_json: bool) -> None:
    """List the experiences on main (or at REV) with status, version and summary."""
    repo = open_repo(ctx)
    snapshot = repo.snapshot(rev)
    rows = list_experiences(snapshot)
    stats = experience_stats(repo) if with_stats else {}

    def human() -> None:
        if with_stats:
            click.echo(f"{'NAME':<44} {'STATUS':<10} {'VER':<5} {'USED':>5} {'PASS':>5} "
                       f"{'FAIL':>5} {'HELP':>5} {'HARM':>5} {'MEAN':>5}  LAST USED")
        for r in rows:
            line = f"{r.name:<44} {r.status:<10} v{r.version:<4}"
            if with_stats:
                s = stats.get(r.name) or ExperienceStats(r.name)
                mean = "-" if s.mean_score is None else f"{s.mean_score:.2f}"
                last = f"{s.last_used:%Y-%m-%d %H:%M}" if s.last_used else "-"
                click.echo(f"{line} {s.times_used:>5} {s.passed:>5} {s.failed:>5} "
                           f"{s.helpful:>5} {s.harmful:>5} {mean:>5}  {last}")
            else:
                click.echo(f"{line} {r.problem or r.summary[:70]}")
        click.echo(f"{len(rows)} experiences at {short(snapshot.commit)} "
                   f"(snapshot {short(snapshot.id)})", err=True)

    def view(r: ExperienceRow) -> dict[str, object]:
        data = dataclasses.asdict(r)
        if with_stats:
            data["stats"] = (stats.get(r.name) or ExperienceStats(r.name)).as_dict()
        return data

    emit(as_json, {"commit": snapshot.commit, "snapshot_id": snapshot.id,
                   "experiences": [view(r) for r in rows]}, human)


@click.command("show")
@click.argument("name")
@click.option("--at", "rev", metavar="REV", help="Show it as it was at this revision.")
@click.option("--version", "version", type=click.IntRange(min=1),
              help="Show version N (the N-th commit that changed it).")
@json_option
@click.pass_context
def show_cmd(ctx: click.Context, name: str, rev: str | None, version: int | None,
             as_json: bool) -> None:
    """Print experience NAME's file (front matter and body)."""
    shown = show_experience(open_repo(ctx), name, rev=rev, version=version)
    emit(as_json, dataclasses.asdict(shown), lambda: click.echo(shown.content, nl=False))


def _print_update(u: PolicyUpdate) -> None:
    when = datetime.fromtimestamp(u.time, UTC)
    click.echo(click.style(f"{short(u.commit)} {u.kind}", fg="yellow")
               + f"  {when:%Y-%m-%d %H:%M} UTC  {u.author}")
    click.echo(f"    {u.subject}")
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


@click.command("log")
@click.argument("name", required=False)
@click.option("-n", "--max-count", type=click.IntRange(min=1), help="Show at most N updates.")
@json_option
@click.pass_context
def log_cmd(ctx: click.Context, name: str | None, max_count: int | None,
            as_json: bool) -> None:
    """Show each policy update on main (for NAME only if given), newest first:
    description, merged gradients with evidence and confidence, author, time, reverts."""
    updates = policy_log(open_repo(ctx), name, limit=max_count)

    def view(u: PolicyUpdate) -> dict[str, object]:
        data = dataclasses.asdict(u)
        data["gradients"] = [gradient_view(g) for g in u.gradients]
        return data

    def human() -> None:
        for update in updates:
            _print_update(update)

    emit(as_json, [view(u) for u in updates], human)
