"""``expgit report-html``: a saved run report (``--report FILE``) as one HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import click
from pydantic import ValidationError

from expgit.cli._common import open_repo
from expgit.errors import ExpgitError, InvalidInputError
from expgit.runs.html import write_html
from expgit.train.reports.run_report import RunReport


@click.command("report-html")
@click.argument("report_file", metavar="REPORT",
                type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("-o", "--output", "output", type=click.Path(path_type=Path, dir_okay=False),
              required=True, help="The HTML file to write.")
@click.pass_context
def report_html_cmd(ctx: click.Context, report_file: Path, output: Path) -> None:
    """Render a run report (the JSON of --report FILE) as one self-contained HTML page.

    The page is the one --report-html writes: accuracy per phase and epoch, the flipped
    cases, each proposal's diff (read from this repository) and the LLM calls and cost
    per stage; no script, no external resource.

    \b
    Example:
      expgit report-html run.json -o run.html    # run.json: from train --report
    """
    try:
        data = json.loads(report_file.read_text(encoding="utf-8"))
        RunReport.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise InvalidInputError(f"{report_file}: not a run report: "
                                f"{str(exc).splitlines()[0]}",
                                hint="give the JSON that --report FILE wrote") from None
    try:
        repo = open_repo(ctx)
    except ExpgitError:  # not in the repository: the page says the diffs are missing
        repo = None
    write_html(data, output, repo)
    click.echo(f"wrote {output}")
