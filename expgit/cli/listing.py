"""``expgit list``: the experiences on main (or at a revision), from the catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from expgit.cli._common import emit, epoch, json_option, minute, open_repo, short
from expgit.cli._views import usage_view
from expgit.store.derived.catalog import ExperienceRow, catalog
from expgit.store.derived.predictions import PredictionRecords, TrackRecord, prediction_record
from expgit.train.measurement.track_record import ExperienceStats

if TYPE_CHECKING:
    from expgit.sessions.status.skill_usage import SkillUsage


@click.command("list")
@click.option("--at", "rev", metavar="REV", help="List the experiences at this revision.")
@click.option("--stats", "with_stats", is_flag=True,
              help="Add usage statistics: runs that had each experience in context, "
                   "passed/failed, helpful/harmful outcome reports, mean score, last use "
                   "(from the trajectories and outcomes branches), and the hit rate of "
                   "the predictions of its edits, also per proposing model (from the "
                   "proposals' trailers).")
@click.option("--usage", "with_usage", is_flag=True,
              help="Add each skill's loads in the ingested sessions: on the last 30 days, "
                   "and the last load (docs/skill-usage.md).")
@json_option
@click.pass_context
def list_cmd(ctx: click.Context, rev: str | None, with_stats: bool, with_usage: bool,
             as_json: bool) -> None:
    """List the experiences on main (or at REV) with status, version and summary.

    \b
    Example:
      expgit list
      expgit list --stats
      expgit list --usage
      expgit list --at main~3 --json
    """
    repo = open_repo(ctx)
    listed = catalog(repo, rev)
    rows = listed.rows
    stats: dict[str, ExperienceStats] = {}
    records = PredictionRecords()
    if with_stats:  # imported here: a plain listing never loads the statistics
        from expgit.outcomes.stats import experience_stats

        stats = experience_stats(repo)
        records = prediction_record(repo)
    usage: dict[str, SkillUsage] = {}
    if with_usage:  # imported here too: a plain listing never reads the sessions
        from expgit.sessions.status.skill_usage import skills_usage

        usage = skills_usage(repo, rows).usage

    def hits(record: TrackRecord) -> str:
        return f"{record.hits}/{record.checked}" if record.checked else "-"

    def human() -> None:
        lines: list[str] = []
        if with_stats:
            lines.append(f"{'NAME':<44} {'STATUS':<10} {'VER':<5} {'USED':>5} {'PASS':>5} "
                         f"{'FAIL':>5} {'HELP':>5} {'HARM':>5} {'MEAN':>5} {'HITS':>5}  "
                         "LAST USED")
        for r in rows:
            line = f"{r.name:<44} {r.status:<10} v{r.version:<4}"
            if with_stats:
                s = stats.get(r.name) or ExperienceStats(r.name)
                mean = "-" if s.mean_score is None else f"{s.mean_score:.2f}"
                last = minute(s.last_used) if s.last_used else "-"
                record = records.by_experience.get(r.name, TrackRecord())
                lines.append(f"{line} {s.times_used:>5} {s.passed:>5} {s.failed:>5} "
                             f"{s.helpful:>5} {s.harmful:>5} {mean:>5} {hits(record):>5}  "
                             f"{last}")
            elif not with_usage:
                lines.append(f"{line} {r.problem or r.summary[:70]}")
            if with_usage:
                u = usage[r.name]
                last = minute(u.last_load) if u.last_load else "-"
                lines.append(f"{r.name:<44} loads (30 days) {u.loads_30d:>5}  last load {last}")
        if records.by_model:
            lines.append("prediction hits by proposing model: " + ", ".join(
                f"{model} {hits(record)}" for model, record in sorted(records.by_model.items())))
        if lines:
            click.echo("\n".join(lines))
        click.echo(f"{len(rows)} experiences at {short(listed.commit)} "
                   f"(snapshot {short(listed.snapshot_id)})", err=True)

    def view(r: ExperienceRow) -> dict[str, object]:
        data = r.as_dict()
        if with_stats:
            used = stats.get(r.name) or ExperienceStats(r.name)
            data["stats"] = used.as_dict() | {"last_used": epoch(used.last_used)} | {
                "predictions": records.by_experience.get(r.name, TrackRecord()).as_dict()}
        if with_usage:
            data["usage"] = usage_view(usage[r.name])
        return data

    models = {"models": {m: r.as_dict() for m, r in sorted(records.by_model.items())}
              } if with_stats else {}
    emit(as_json, {"commit": listed.commit, "snapshot_id": listed.snapshot_id,
                   "experiences": [view(r) for r in rows], **models}, human)
