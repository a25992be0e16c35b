from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo, short, warn
from expgit.cli._complete import open_ids
from expgit.cli._run_options import gate_options, llm_options, make_gate, trials_option
from expgit.errors import UsageError
from expgit.store.workflow.apply import ApplyResult, apply_proposal


@click.command("apply")
@click.argument("proposal", shell_complete=open_ids("proposal"))
@click.option("--remote", help="Apply to the main branch of this remote: push with "
              "--force-with-lease, and fetch and re-check when someone else pushed first.")
@click.option("--eval-cases", type=click.Path(path_type=Path, dir_okay=False),
              help="With --gate: the held-out cases to measure the proposal on.")
@trials_option
@gate_options
@llm_options
@json_option
@click.pass_context
def apply_cmd(ctx: click.Context, proposal: str, remote: str | None,
              eval_cases: Path | None, trials: int, gate: bool | None,
              min_delta: float | None, max_regressions: int | None, llm_choice: str | None,
              model: str | None, base_url: str | None, concurrency: int,
              as_json: bool) -> None:
    """Apply PROPOSAL to main under the repository lock.

    If main moved since the proposal was made, every experience it touches must still be
    as the proposal saw it; then it is rebuilt on top of main, else refused (exit 3).

    With --gate --eval-cases FILE: main and the proposal run the held-out cases first,
    and a proposal that fails the regression gate is not applied (exit 6).

    \b
    Example:
      expgit apply 1a2b3c4d5e6f
      expgit apply 1a2b3c4d5e6f --remote origin
      expgit apply 1a2b3c4d5e6f --gate --eval-cases eval.yaml
    """
    repo = open_repo(ctx)
    if eval_cases is not None and not gate:
        raise UsageError("--eval-cases needs --gate", hint="add --gate")
    checked = make_gate(repo, gate, min_delta, max_regressions,
                        measured=eval_cases is not None)
    result: ApplyResult
    if checked is not None and eval_cases is not None:
        from expgit.cli.train_common import make_llm_options  # loads the LLM stack
        from expgit.runs.gated_apply import run_gated_apply

        gated = asyncio.run(run_gated_apply(
            repo, proposal, eval_cases, checked, trials=trials, remote=remote,
            llm=make_llm_options(llm_choice, model, base_url), concurrency=concurrency))
        result = gated.applied
        click.echo(f"expgit: gate passed: {gated.candidate.gate.reason}", err=True)
    else:
        result = apply_proposal(repo, proposal, remote=remote)
    warn(result.warnings)
    emit(as_json, dataclasses.asdict(result), lambda: click.echo(
        f"Applied proposal {result.proposal}: main {short(result.previous)} -> "
        f"{short(result.commit)}" + (" (rebuilt on the moved main)" if result.rebased else "")
        + (f" on {result.remote}" if result.remote else "")))
