"""``expgit learn``: the offline learning report from recorded rollouts."""

from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo, progress
from expgit.learn.report import learn_report


@click.command("learn")
@click.option("--rollouts", "rollouts_file", required=True, metavar="FILE",
              type=click.Path(path_type=Path, dir_okay=False),
              help="Recorded rollouts: one Rollout JSON object per line, with its case.")
@click.option("--outcomes", "outcomes_file", metavar="FILE",
              type=click.Path(path_type=Path, dir_okay=False),
              help="Outcome records: one OutcomeRecord JSON object per line.")
@click.option("-o", "--output", "output_dir", required=True, metavar="DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="Folder for metrics.json, findings.json and experience_seed_pack.json "
                   "(created if missing; those files are replaced).")
@click.option("--propose", is_flag=True,
              help="Also turn the seed pack and the findings into gradients and one "
                   "proposal for review (main is not touched).")
@json_option
@click.pass_context
def learn_cmd(ctx: click.Context, rollouts_file: Path, outcomes_file: Path | None,
              output_dir: Path, propose: bool, as_json: bool) -> None:
    """Learn offline from recorded rollouts: accuracy per task signature, outcome
    coverage and per-experience statistics (metrics.json), findings with stable ids
    (findings.json) and candidate experiences from well-rated runs
    (experience_seed_pack.json). No LLM call. Report-only (no git write) unless
    --propose."""
    result = learn_report(open_repo(ctx), rollouts_file, output_dir,
                          outcomes_file=outcomes_file, propose=propose, progress=progress)

    def human() -> None:
        accuracy = "-" if result.accuracy is None else f"{result.accuracy:.0%}"
        click.echo(f"{result.rollouts} rollouts, {result.outcomes} outcome records, "
                   f"accuracy {accuracy}")
        for finding in result.findings:
            click.echo(f"finding {finding.id} [{finding.severity}] {finding.type}: "
                       f"{finding.summary}")
        for seed in result.seeds:
            click.echo(f"seed {seed.name} ({seed.task_signature}, "
                       f"{seed.well_rated_rollouts} well-rated runs)")
        if result.proposal is not None and result.proposal.proposal_id:
            click.echo(f"proposal {result.proposal.proposal_id}: "
                       f"{', '.join(result.proposal.edits)} (review it with `expgit review "
                       f"{result.proposal.proposal_id}`)")
        for note in result.notes:
            click.echo(f"note: {note}")
        click.echo(f"wrote {', '.join(result.files)}", err=True)

    emit(as_json, result.summary(), human)
