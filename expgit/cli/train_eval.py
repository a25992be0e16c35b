"""``expgit eval``: run and score cases against main; nothing is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from expgit.cli._common import emit, json_option, open_repo
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
from expgit.errors import UsageError
from expgit.runs.build import RunOptions, run_eval
from expgit.runs.gate_comment import GATE_MARKER, write_comment
from expgit.runs.skill_lift import run_skill_eval
from expgit.runs.trigger_run import run_trigger_eval
from expgit.store.repository import ExperienceRepository
from expgit.train.reports.run_report import cost_table


@click.command("eval")
@click.option("--cases", type=click.Path(path_type=Path, dir_okay=False),
              help="The cases to evaluate (.yaml, .yml, .json or .jsonl), or tau2's "
              "tasks (tau2:airline:test, tau2:airline:test#2,6); or --env-url.")
@env_options
@click.option("--split", help="With --env-url: the split to evaluate.  [default: eval]")
@click.option("--report", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the whole run as JSON to FILE.")
@report_html_option
@click.option("--at", "at", metavar="REV", help="Evaluate this revision (a proposal id, "
              "a commit, a branch) instead of main.")
@click.option("--compare", nargs=2, metavar="A B", help="Evaluate both revisions on the "
              "same cases and report B against A: delta, flipped cases.")
@click.option("--skill", metavar="NAME", help="Run skill NAME's own evals (its "
              "evals/evals.json) with the skill and without it, write benchmark.json and "
              "print the lift (docs/skill-evals.md).")
@click.option("--runs", type=click.IntRange(min=1), default=None, metavar="K",
              help="With --skill: runs of every case in each configuration (with "
              "--triggers: of each query).  [default: 3]")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
              help="With --skill: where benchmark.json goes.  [default: NAME-workspace]")
@gate_options
@click.option("--comment", "comment", type=click.Path(path_type=Path, dir_okay=False),
              metavar="FILE", help="With --compare: also write B's measured effect as a "
              "pull request comment in markdown to FILE (its first line is the marker "
              f"{GATE_MARKER}, so a CI job finds and updates its one comment).")
@trials_option
@click.option("--triggers", is_flag=True, help="With --skill NAME: run each query of the "
              "skill's evals/triggers.json --runs times with the listing agent and report "
              "the trigger rate (did it call Skill with NAME), per query and overall.")
@model_options()
@json_option
@click.pass_context
def eval_cmd(ctx: click.Context, cases: Path | None, env_url: str | None,
             env_token_env: str | None, dataset: str | None, domain: str | None,
             split: str | None, report: Path | None, report_html: Path | None,
             at: str | None, compare: tuple[str, str] | None, skill: str | None,
             runs: int | None, out: Path | None, gate: bool | None,
             min_delta: float | None, max_regressions: int | None, comment: Path | None,
             trials: int, triggers: bool, flags: ModelFlags, as_json: bool) -> None:
    """Evaluate the experiences on main with CASES: one rollout per case, scored by its
    rubric (no training, nothing written). Prints accuracy, average reward and the LLM
    cost.

    \b
    --at REV evaluates another revision; --compare A B both, and B's effect against A
    (delta, flipped cases); with --gate, B failing the regression gate exits 6 (a pull
    request's check: examples/ci/expgit-ci.sh). --trials K runs each case K times: pass^1,
    pass^K and a 95% interval.

    \b
    With --env-url URL instead of --cases: the environment service runs and scores the
    cases of --split (default eval) against main's snapshot; no model starts here.

    \b
    --skill NAME --triggers runs the skill's trigger evals (evals/triggers.json in its
    folder: [{"query": ..., "should_trigger": true|false}], the Agent Skills guide's
    format) with the listing agent; see docs/skill-listing.md.

    \b
    Example:
      expgit eval --cases example_repo/cases/eval.yaml
      expgit eval --env-url http://127.0.0.1:1944 --split eval --json
      expgit eval --cases eval.yaml --compare main 1a2b3c4d5e6f --trials 3
      expgit eval --cases eval.yaml --compare origin/main HEAD --gate --comment gate.md
      expgit eval --skill fix-flaky-tests --runs 3 --out flaky-workspace
      expgit eval --skill fix-flaky-tests --triggers --runs 3
    """
    repo = open_repo(ctx)
    if triggers:
        _triggers(repo, skill, runs or 3, at, cases, compare, flags, as_json)
        return
    for flag, given in (("--runs", runs), ("--out", out)):
        if given is not None and skill is None:
            raise UsageError(f"{flag} needs --skill NAME")
    if skill is not None:
        others = [flag for flag, given in (("--cases", cases), ("--env-url", env_url),
                                           ("--at", at), ("--compare", compare),
                                           ("--gate", gate), ("--comment", comment))
                  if given]
        if others:
            raise UsageError(f"--skill runs the skill's own evals on main; drop "
                             f"{', '.join(others)}")
        with progress_display() as progress:
            options = flags.run_options(repo, progress=progress, trials=runs or 3)
            result = asyncio.run(run_skill_eval(repo, skill, options,
                                                out or Path(f"{skill}-workspace")))
        output(result, as_json, report, report_html=report_html, repo=repo)
        return
    service = environment_service(repo, env_url, env_token_env, dataset, domain)
    eval_set = case_source(cases, service, split or ("eval" if service else None))
    if eval_set is None:
        raise UsageError("give the cases: --cases FILE or --env-url URL")
    if at is not None and compare:
        raise UsageError("give --at REV or --compare A B, not both")
    for flag, given in (("--gate", gate), ("--comment", comment)):
        if given and not compare:
            raise UsageError(f"{flag} needs --compare A B", hint="B is measured against A")
    checked = make_gate(repo, gate, min_delta, max_regressions, measured=bool(compare))
    with progress_display() as progress:
        options = flags.run_options(repo, progress=progress, trials=trials, gate=checked)
        result = asyncio.run(run_eval(repo, eval_set, options, at=at,
                                      compare=compare or None))
    if comment is not None:
        write_comment(repo, result, comment)
    output(result, as_json, report, report_html=report_html, repo=repo)


def _triggers(repo: ExperienceRepository, skill: str | None, runs: int,
              at: str | None, cases: Path | None, compare: tuple[str, str] | None,
              flags: ModelFlags, as_json: bool) -> None:
    """``eval --skill NAME --triggers``: the trigger rate of NAME's trigger evals."""
    if skill is None:
        raise UsageError("give --skill NAME with --triggers",
                         hint="expgit eval --skill NAME --triggers [--runs K]")
    if cases is not None or compare:
        raise UsageError("--triggers runs the skill's own evals/triggers.json: give no "
                         "--cases or --compare")
    options = RunOptions(llm=flags.llm, concurrency=flags.concurrency,
                         max_calls=flags.max_calls, max_cost=flags.max_cost)
    report = asyncio.run(run_trigger_eval(repo, skill, options, runs=runs, at=at))
    emit(as_json, report.model_dump(mode="json"),
         lambda: click.echo("\n".join([*report.lines(), "", *cost_table(report.usage)])))
