"""``expgit train-rollouts``: train from recorded rollouts (JSONL)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from expgit.cli._common import json_option, open_repo, option_group
from expgit.cli._progress import progress_display
from expgit.cli.train_common import ModelFlags, model_options, output, report_html_option
from expgit.runs.build import run_train_rollouts
from expgit.runs.relabel import EVALUATORS

# ``--mode``, ``--pr-body``, ``--report``, ``--remote`` (train and train-rollouts)
train_write_options = option_group(
    click.option("--mode", type=click.Choice(["propose", "apply"]), default="propose",
                 show_default=True, help="propose: stop at a proposal branch, main "
                 "untouched; apply: apply each proposal to main."),
    click.option("--pr-body", type=click.Path(path_type=Path, dir_okay=False),
                 help="Write the proposals' PR description (title line, blank line, "
                 "body) to FILE."),
    click.option("--report", type=click.Path(path_type=Path, dir_okay=False),
                 help="Also write the whole run as JSON to FILE."),
    click.option("--remote", metavar="NAME", help="Share one repository with other "
                 "trainers: push the trajectories, gradients and proposals to this "
                 "remote (never forced); --mode apply applies to its main."),
)


@click.command("train-rollouts")
@click.argument("rollouts_file", metavar="FILE",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--evaluator", type=click.Choice(EVALUATORS), default="recorded",
              show_default=True, help="recorded: each rollout's own evaluation; feedback: "
              "label each by its feedback signals (thumbs, ratings, re-asks in "
              "metadata.message_stamps and metadata.feedback_events; see docs/outcomes.md).")
@train_write_options
@report_html_option
@model_options(agent_tools=False)
@json_option
@click.pass_context
def train_rollouts_cmd(ctx: click.Context, rollouts_file: Path, evaluator: str, mode: str,
                       pr_body: Path | None, report: Path | None, remote: str | None,
                       report_html: Path | None, flags: ModelFlags, as_json: bool
                       ) -> None:
    """Train from recorded rollouts: FILE holds one Rollout JSON object per line, each
    with its case (and, ideally, its evaluation). One update against the current main.

    With --remote NAME, what it makes is pushed to that remote, which other trainers
    share (never a forced push; see docs/remote.md).

    \b
    Example:
      expgit train-rollouts recorded.jsonl --mode propose
      expgit train-rollouts recorded.jsonl --remote origin
      expgit train-rollouts sessions.jsonl --evaluator feedback
    """
    repo = open_repo(ctx)
    with progress_display() as progress:
        options = flags.run_options(repo, mode="apply" if mode == "apply" else "propose",
                                    pr_body=pr_body, remote=remote, progress=progress,
                                    evaluator=evaluator)
        result = asyncio.run(run_train_rollouts(repo, rollouts_file, options))
    output(result, as_json, report, report_html=report_html, repo=repo)
