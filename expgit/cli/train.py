"""``expgit train``: baseline eval, training epochs, final eval."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from expgit.cli._common import json_option, open_repo
from expgit.cli._progress import progress_display
from expgit.cli._run_options import gate_options, make_gate, trials_option
from expgit.cli.train_common import (
    ModelFlags,
    case_source,
    env_options,
    environment_service,
    model_options,
    output,
    report_html_option,
)
from expgit.cli.train_rollouts import train_write_options
from expgit.errors import UsageError
from expgit.runs.build import run_train


@click.command("train")
@click.option("--cases", type=click.Path(path_type=Path, dir_okay=False),
              help="The training cases (.yaml, .yml, .json or .jsonl), tau2's tasks "
              "(tau2:airline:train, tau2:airline:test#2,6), or skill:NAME (skill NAME's "
              "evals/evals.json on main); or --env-url.")
@click.option("--eval-cases", type=click.Path(path_type=Path, dir_okay=False),
              help="Held-out cases: evaluated before (baseline) and after (final) "
              "training, and on each proposal's snapshot (candidate).")
@env_options
@click.option("--split", help="With --env-url: the training split.  [default: train]")
@click.option("--eval-split", help="With --env-url: the held-out split (as --eval-cases).")
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Passes over the training cases.")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="Cases per batch, one update each (default: all cases in one batch).")
@trials_option
@click.option("--group-size", type=int, metavar="K",
              help="Runs of each training case against the same snapshot (1 to 64); above "
              "1, one reflect call per group learns from its better and worse runs, and a "
              "group whose runs all agree gets none.  [default: [train] group_size, 1]")
@click.option("--no-candidate-eval", "candidate_eval", is_flag=True, default=True,
              flag_value=False, help="Do not measure each proposal on the held-out cases "
              "(saves one pass over them per proposal; no gate then).")
@gate_options
@train_write_options
@report_html_option
@model_options()
@json_option
@click.pass_context
def train_cmd(ctx: click.Context, cases: Path | None, eval_cases: Path | None,
              env_url: str | None, env_token_env: str | None, dataset: str | None,
              domain: str | None, split: str | None, eval_split: str | None, epochs: int,
              batch_size: int | None, trials: int, group_size: int | None,
              candidate_eval: bool,
              gate: bool | None, min_delta: float | None, max_regressions: int | None,
              mode: str, pr_body: Path | None, report: Path | None,
              remote: str | None, report_html: Path | None, flags: ModelFlags,
              as_json: bool) -> None:
    """Train the experiences on the --cases FILE: run each case, turn the runs into trajectories (on
    the expgit/trajectories branch) and gradients, and merge each batch's gradients into
    a proposal.

    \b
    With --env-url URL instead of --cases: the cases of --split (default train) come from
    that environment service, which also runs and scores the rollouts against this
    repository's snapshot (its /health is checked before any model starts).

    \b
    With --eval-cases: a baseline eval first and a final eval last, and the accuracy
    delta; each proposal's snapshot is evaluated too (candidate eval), and its figures
    go into its PR description. --gate: a proposal that lowers them is not applied, and
    the exit code is 6. --mode propose (the default) leaves main untouched: review the proposal
    branch (and the --pr-body FILE) as a pull request. --mode apply applies each proposal
    to main under the lock. Prints one line per phase and the LLM calls, tokens and cost
    per stage.

    With --remote NAME, several trainers share the repository on that remote: each
    update's trajectories, gradients and proposal are pushed there (never forced), and
    --mode apply applies to the remote's main by lease and retry, as `apply --remote`.

    \b
    Example:
      expgit train --cases train.yaml --eval-cases eval.yaml --pr-body pr.md
      expgit train --cases train.yaml --mode apply --report run.json
      expgit train --cases train.yaml --eval-cases eval.yaml --mode apply --gate
      expgit train --cases train.yaml --report-html run.html
      expgit train --cases train.yaml --group-size 4
      expgit train --cases skill:fix-flaky-tests
      expgit train --cases train.yaml --remote origin
    """
    repo = open_repo(ctx)
    service = environment_service(repo, env_url, env_token_env, dataset, domain)
    train_set = case_source(cases, service, split or ("train" if service else None))
    if train_set is None:
        raise UsageError("give the training cases: --cases FILE or --env-url URL")
    eval_set = case_source(eval_cases, service, eval_split, file_option="--eval-cases",
                           split_option="--eval-split")
    # [train] gate applies where proposals are measured (not with --remote); --gate
    # where they cannot be is refused
    measured = eval_set is not None and candidate_eval and (remote is None or bool(gate))
    gate_settings = make_gate(repo, gate, min_delta, max_regressions, measured=measured)
    with progress_display() as progress:
        options = flags.run_options(repo, mode="apply" if mode == "apply" else "propose",
                                    pr_body=pr_body, progress=progress, remote=remote,
                                    trials=trials, candidate_eval=candidate_eval,
                                    gate=gate_settings, group_size=group_size)
        result = asyncio.run(run_train(repo, train_set, options, eval_cases=eval_set,
                                       epochs=epochs, batch_size=batch_size))
    output(result, as_json, report, report_html=report_html, repo=repo)

