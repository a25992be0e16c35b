"""``expgit learn``: the offline learning report from recorded rollouts."""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import ValidationError

from expgit.cli._common import emit, json_option, open_repo, option_group, progress
from expgit.errors import UsageError
from expgit.learn.report import learn_report
from expgit.store.format.settings import LearnSettings

_SHARE = click.FloatRange(0, 1)
# (flag, type, help): each overrides the [learn] setting of the same name, whose built-in
# default the help shows
_THRESHOLDS = (
    ("min-uses", click.IntRange(min=1),
     "Judged runs an experience needs before its failure rate is judged."),
    ("failure-margin", _SHARE,
     "Flag an experience whose runs fail this much more often than all runs."),
    ("min-failure-rate", _SHARE, "... and at least this often."),
    ("relevance-threshold", _SHARE,
     "Lexical relevance at which a used experience covers a run's task."),
    ("duplicate-threshold", _SHARE, "Similarity at which two experiences are near-"
     "duplicates."),
    ("min-outcome-coverage", _SHARE,
     "Below this share of runs with an outcome record, a finding says so."),
    ("seed-min-score", _SHARE, "Score from which a passed run may seed an experience."),
    ("max-evidence", click.IntRange(min=1), "Evidence examples kept per finding."),
)
_threshold_options = option_group(*(
    click.option(f"--{flag}", type=kind, default=None, metavar="N",
                 help=f"{text} [{LearnSettings.model_fields[flag.replace('-', '_')].default}]")
    for flag, kind, text in _THRESHOLDS))


def learn_options(settings: LearnSettings, overrides: dict[str, float | int | None]
                  ) -> LearnSettings:
    """The ``[learn]`` section with each threshold flag given in its place (validated as
    the section is)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return LearnSettings.model_validate(settings.model_dump() | given) if given else settings
    except ValidationError as exc:
        raise UsageError(f"invalid learn threshold: {exc.errors()[0]['msg']}") from None


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
@_threshold_options
@json_option
@click.pass_context
def learn_cmd(ctx: click.Context, /, rollouts_file: Path, outcomes_file: Path | None,
              output_dir: Path, propose: bool, as_json: bool,
              **thresholds: float | int | None) -> None:
    """Learn offline from recorded rollouts: accuracy per task signature, outcome
    coverage and per-experience statistics (metrics.json), findings with stable ids
    (findings.json) and candidate experiences from well-rated runs
    (experience_seed_pack.json). No LLM call. Report-only (no git write) unless
    --propose. The thresholds come from the [learn] section of expgit.toml (defaults in
    brackets); each flag overrides one.

    \b
    Example:
      expgit learn --rollouts rollouts.jsonl -o learn/
      expgit learn --rollouts rollouts.jsonl --outcomes outcomes.jsonl -o learn/ --propose
    """
    repo = open_repo(ctx)
    options = learn_options(repo.settings.learn, thresholds)
    result = learn_report(repo, rollouts_file, output_dir, outcomes_file=outcomes_file,
                          propose=propose, options=options, progress=progress)

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
