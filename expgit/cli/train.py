"""``expgit train``: baseline eval, training epochs, final eval; and TRAIN_COMMANDS."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from expgit.cli._common import json_option, open_repo
from expgit.cli.train_common import Progress, llm_options, make_llm_options, output
from expgit.cli.train_eval import eval_cmd
from expgit.cli.train_rollouts import train_rollouts_cmd, train_write_options
from expgit.train.build import RunOptions, run_train


@click.command("train")
@click.option("--cases", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The training cases (.yaml, .yml, .json or .jsonl).")
@click.option("--eval-cases", type=click.Path(path_type=Path, dir_okay=False),
              help="Held-out cases: evaluated before (baseline) and after (final) training.")
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Passes over the training cases.")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="Cases per batch, one update each (default: all cases in one batch).")
@train_write_options
@llm_options
@json_option
@click.pass_context
def train_cmd(ctx: click.Context, cases: Path, eval_cases: Path | None, epochs: int,
              batch_size: int | None, mode: str, pr_body: Path | None, report: Path | None,
              llm_choice: str | None, model: str | None, base_url: str | None,
              concurrency: int, as_json: bool) -> None:
    """Train the experiences on the --cases FILE: run each case, turn the runs into trajectories (on
    the expgit/trajectories branch) and gradients, and merge each batch's gradients into
    a proposal.

    \b
    With --eval-cases: a baseline eval first and a final eval last, and the accuracy
    delta. --mode propose (the default) leaves main untouched: review the proposal
    branch (and the --pr-body FILE) as a pull request. --mode apply applies each proposal
    to main under the lock. Prints one line per phase and the LLM calls, tokens and cost
    per stage.
    """
    options = RunOptions(llm=make_llm_options(llm_choice, model, base_url),
                         concurrency=concurrency, mode="apply" if mode == "apply" else "propose",
                         pr_body=pr_body, progress=Progress)
    result = asyncio.run(run_train(open_repo(ctx), cases, options, eval_cases=eval_cases,
                                   epochs=epochs, batch_size=batch_size))
    output(result, as_json, report)


TRAIN_COMMANDS: list[click.Command] = [train_cmd, eval_cmd, train_rollouts_cmd]
