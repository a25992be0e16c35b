"""``expgit list``: the experiences on main (or at a revision), from the catalog."""

from __future__ import annotations

import click

from expgit.cli._common import emit, epoch, json_option, open_repo, short
from expgit.store.catalog import ExperienceRow, catalog
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
    """List the experiences on main (or at REV) with status, version and summary.

    \b
    Example:
      expgit list
      expgit list --stats
      expgit list --at main~3 --json
    """
    repo = open_repo(ctx)
    listed = catalog(repo, rev)
    rows = listed.rows
    stats: dict[str, ExperienceStats] = {}
    if with_stats:  # imported here: a plain listing never loads the statistics
        from expgit.outcomes.stats import experience_stats

        stats = experience_stats(repo)

    def human() -> None:
        lines: list[str] = []
        if with_stats:
            lines.append(f"{'NAME':<44} {'STATUS':<10} {'VER':<5} {'USED':>5} {'PASS':>5} "
                         f"{'FAIL':>5} {'HELP':>5} {'HARM':>5} {'MEAN':>5}  LAST USED")
        for r in rows:
            line = f"{r.name:<44} {r.status:<10} v{r.version:<4}"
            if with_stats:
                s = stats.get(r.name) or ExperienceStats(r.name)
                mean = "-" if s.mean_score is None else f"{s.mean_score:.2f}"
                last = f"{s.last_used:%Y-%m-%d %H:%M}" if s.last_used else "-"
                lines.append(f"{line} {s.times_used:>5} {s.passed:>5} {s.failed:>5} "
                             f"{s.helpful:>5} {s.harmful:>5} {mean:>5}  {last}")
            else:
                lines.append(f"{line} {r.problem or r.summary[:70]}")
        if lines:
            click.echo("\n".join(lines))
        click.echo(f"{len(rows)} experiences at {short(listed.commit)} "
                   f"(snapshot {short(listed.snapshot_id)})", err=True)

    def view(r: ExperienceRow) -> dict[str, object]:
        data = r.as_dict()
        if with_stats:
            used = stats.get(r.name) or ExperienceStats(r.name)
            data["stats"] = used.as_dict() | {"last_used": epoch(used.last_used)}
        return data

    emit(as_json, {"commit": listed.commit, "snapshot_id": listed.snapshot_id,
                   "experiences": [view(r) for r in rows]}, human)
