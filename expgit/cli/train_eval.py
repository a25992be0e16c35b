"""``expgit eval``: run and score cases against main; nothing is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from expgit.cli._common import json_option, open_repo
from expgit.cli.train_common import Progress, llm_options, make_llm_options, output
from expgit.train.build import RunOptions, run_eval


@click.command("eval")
@click.option("--cases", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The cases to evaluate (.yaml, .yml, .json or .jsonl).")
@click.option("--report", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the whole run as JSON to FILE.")
@llm_options
@json_option
@click.pass_context
def eval_cmd(ctx: click.Context, cases: Path, report: Path | None, llm_choice: str | None,
             model: str | None, base_url: str | None, concurrency: int,
             as_json: bool) -> None:
    """Evaluate the experiences on main with CASES: one rollout per case, scored by its
    rubric (no training, nothing written). Prints accuracy, average reward and the LLM
    cost.
    """
    options = RunOptions(llm=make_llm_options(llm_choice, model, base_url),
                         concurrency=concurrency, progress=Progress)
    output(asyncio.run(run_eval(open_repo(ctx), cases, options)), as_json, report)
