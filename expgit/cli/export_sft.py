"""``expgit export-sft``: labelled session segments as chat fine-tuning JSONL."""

from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.sessions.export import export_sft


@click.command("export-sft")
@click.option("--task-type", metavar="T",
              help="Only segments of this task type (as the scorer labelled them, e.g. "
              "code, debugging, data-analysis).")
@click.option("--min-score", type=click.FloatRange(0, 1), metavar="X",
              help="Only segments whose overall score is at least X (default: the "
              "segments at or above [sessions] sft_threshold, 0.8).")
@click.option("--limit", type=click.IntRange(min=0), metavar="N",
              help="At most N examples, best scores first.")
@click.option("-o", "--output", "out", required=True, metavar="FILE",
              type=click.Path(path_type=Path, dir_okay=False),
              help="The JSONL file to write (replaced as a whole, only once every "
              "example is valid).")
@json_option
@click.pass_context
def export_sft_cmd(ctx: click.Context, task_type: str | None, min_score: float | None,
                   limit: int | None, out: Path, as_json: bool) -> None:
    """Export the active, labelled task segments of ingested sessions (`expgit
    sessions`) as OpenAI chat fine-tuning JSONL: one segment per line, tool calls
    included, secrets and personal data redacted, each line validated before the file
    is written.

    \b
    Example:
      expgit export-sft -o sft.jsonl
      expgit export-sft --task-type debugging --min-score 0.9 --limit 500 -o sft.jsonl
    """
    report = export_sft(open_repo(ctx), task_type=task_type, min_score=min_score,
                        limit=limit, out=out)

    def human() -> None:
        click.echo(f"wrote {report.written} example(s) to {report.out} "
                   f"({report.candidates} labelled segment(s))")
        for reason, count in report.skipped.items():
            click.echo(f"  skipped {count}: {reason.replace('_', ' ')}")
        if report.redactions.total:
            kinds = ", ".join(f"{k} {v}" for k, v in report.redactions.counts.items())
            click.echo(f"  redacted {report.redactions.total}: {kinds}")

    emit(as_json, report.model_dump(mode="json"), human)
