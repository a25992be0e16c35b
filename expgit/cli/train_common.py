"""What ``expgit train``, ``eval`` and ``train-rollouts`` share: the model's and budget's
options gathered into one :class:`ModelFlags`, the environment service options, the
estimate printed before a run, and printing and writing a run report (the gate's and
trials' options: ``expgit.cli._run_options``, light enough for ``apply``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import click

from expgit.cli._common import emit, option_group, warn
from expgit.cli._invocation import command_args
from expgit.cli._run_options import llm_options, make_mcp, mcp_options, user_model_option
from expgit.errors import ExpgitError, GateError, RunErrorsError, UsageError
from expgit.llm.budget import RunEstimate
from expgit.remote.environment import EnvironmentService
from expgit.runs.build import NO_LLM, CaseSource, LLMOptions, RunOptions
from expgit.store.repository import ExperienceRepository
from expgit.train.measurement.candidate import gate_failures, gate_refusal
from expgit.train.measurement.skill_evals import SkillCases
from expgit.train.reports.run_report import RunReport, render_text, write_report
from expgit.train.reports.verdict import verdict_lines

F = TypeVar("F", bound=Callable[..., Any])


# ``--env-url``, ``--env-token-env``, ``--dataset``, ``--domain``
env_options = option_group(
    click.option("--env-url", metavar="URL",
                 help="An environment service (e.g. `expgit env serve`): its cases "
                 "and its rollouts instead of --cases FILE and in-process rollouts."),
    click.option("--env-token-env", metavar="VAR",
                 help="The environment variable holding the service's bearer token "
                 "(default: [serve] token_env, EXPGIT_TOKEN, used when set)."),
    click.option("--dataset", help="The service's dataset (default: the service's)."),
    click.option("--domain", help="The service's domain (default: the service's)."),
)


LOOPBACK = ("127.0.0.1", "localhost", "::1")  # a service bound here needs no token

# ``--allow-host`` of the two services (``expgit serve``, ``expgit env serve``)
allow_host_option = click.option(
    "--allow-host", "allow_hosts", multiple=True, metavar="NAME",
    help="Also answer requests whose Host header names NAME (loopback names and the "
    "--host address are always answered; any other Host is 400, which stops DNS "
    "rebinding). Repeatable.")


def bearer_token(token_env: str | None, default_env: str) -> str | None:
    """The token in ``token_env`` (which must then be set), else in ``default_env`` if
    that is set, else None."""
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise UsageError(f"the environment variable {token_env} is not set",
                             hint="export it with the service's token")
        return token
    return os.environ.get(default_env) or None


def environment_service(repo: ExperienceRepository, env_url: str | None,
                        token_env: str | None, dataset: str | None, domain: str | None
                        ) -> EnvironmentService | None:
    if env_url is None:
        if token_env or dataset or domain:
            raise UsageError("--env-token-env, --dataset and --domain need --env-url")
        return None
    return EnvironmentService(env_url.rstrip("/"), dataset=dataset, domain=domain,
                              token=bearer_token(token_env, repo.settings.serve.token_env))


def case_source(cases: Path | None, service: EnvironmentService | None, split: str | None,
                *, file_option: str = "--cases", split_option: str = "--split"
                ) -> CaseSource | None:
    """The cases file, or the split of the environment service; None if neither (which
    is an error for the training cases: exactly one of --cases / --env-url)."""
    if cases is not None and service is not None:
        raise UsageError(f"give {file_option} FILE or --env-url URL, not both")
    if service is None:
        if split is not None:
            raise UsageError(f"{split_option} needs --env-url")
        return (SkillCases.parse(str(cases)) or cases) if cases is not None else None
    return service.cases(split) if split is not None else None


def make_llm_options(llm_choice: str | None, model: str | None, base_url: str | None,
                     user_model: str | None = None) -> LLMOptions:
    choice: Literal["local", "openai"] | None = (
        "local" if llm_choice == "local" else "openai" if llm_choice == "openai" else None)
    return LLMOptions(choice=choice, model=model, base_url=base_url, user_model=user_model)


# ``--max-calls``, ``--max-cost`` (``[llm] max_calls`` / ``max_cost``)
budget_options = option_group(
    click.option("--max-calls", type=click.IntRange(min=1), metavar="N",
                 help="Stop calling the model after N calls; what the run made is "
                 "kept (exit 7).  [default: [llm] max_calls, unbounded]"),
    click.option("--max-cost", type=click.FloatRange(min=0, min_open=True),
                 metavar="AMOUNT", help="Stop calling the model once its calls cost "
                 "AMOUNT (in [llm] currency, at [llm.prices]); as --max-calls.  "
                 "[default: [llm] max_cost, unbounded]"),
)


def print_estimate(estimate: RunEstimate) -> None:
    """Before the run, on stderr: its estimate and any budget warning."""
    click.echo(f"expgit: {estimate.line()}", err=True)
    for note in estimate.notes:
        click.echo(f"expgit: estimate: {note}", err=True)
    warn(estimate.warnings)


@dataclass(frozen=True)
class ModelFlags:
    """A run command's model, budget and MCP options, as :func:`model_options` hands
    them over."""

    llm: LLMOptions
    concurrency: int
    max_calls: int | None
    max_cost: float | None
    mcp_command: str | None = None
    mcp_url: str | None = None

    def run_options(self, repo: ExperienceRepository, **fields: Any) -> RunOptions:
        """The run's options: these, the estimate printed before it, and ``fields``."""
        return RunOptions(llm=self.llm, concurrency=self.concurrency,
                          max_calls=self.max_calls, max_cost=self.max_cost,
                          announce=print_estimate,
                          mcp=make_mcp(repo, self.mcp_command, self.mcp_url), **fields)


def model_options(*, agent_tools: bool = True) -> Callable[[F], F]:
    """``--llm``, ``--model``, ``--base-url``, ``--concurrency`` (with ``agent_tools``:
    ``--mcp-command``, ``--mcp-url``, ``--user-model``), ``--max-calls``, ``--max-cost``,
    passed to the command as one argument, ``flags: ModelFlags``."""
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def command(*args: Any, llm_choice: str | None, model: str | None,
                    base_url: str | None, concurrency: int, max_calls: int | None,
                    max_cost: float | None, user_model: str | None = None,
                    mcp_command: str | None = None, mcp_url: str | None = None,
                    **kwargs: Any) -> Any:
            flags = ModelFlags(make_llm_options(llm_choice, model, base_url, user_model),
                               concurrency, max_calls, max_cost, mcp_command, mcp_url)
            return func(*args, flags=flags, **kwargs)

        tools = (mcp_options, user_model_option) if agent_tools else ()
        return cast(F, option_group(llm_options, *tools, budget_options)(command))
    return decorate


report_html_option = click.option(
    "--report-html", "report_html", type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the run as one self-contained HTML page to FILE (accuracy plot, "
    "flipped cases, each proposal's diff, LLM calls and cost per stage).")


def output(report: RunReport, as_json: bool, report_file: Path | None = None, *,
           report_html: Path | None = None, repo: ExperienceRepository | None = None
           ) -> None:
    """Print the run's warnings on stderr (another agent model than a proposal's), write
    ``--report`` (and ``--report-html``, the proposals' diffs read from ``repo``), print
    the run (text or JSON) on stdout; then fail (exit 1) if the run did
    not work (a phase whose every rollout failed) or a push to ``--remote`` did not
    land."""
    warn(report.warnings)  # before the result: a CI log shows it first
    if report_file is not None:
        write_report(report, report_file)
    if report_html is not None:
        from expgit.runs.html import write_html

        write_html(report.model_dump(mode="json"), report_html, repo)
    emit(as_json, report.model_dump(mode="json"),
         lambda: click.echo(render_text(report, verdict_lines(report, command_args.get())),
                            nl=False))
    if report.problems:
        where = ("the environment service's model (its --llm, --base-url)"
                 if report.llm == NO_LLM else
                 "the model endpoint: --llm, --base-url, [llm] in expgit.toml")
        raise ExpgitError(report.problems[0], hint=f"check {where}")
    failed = gate_failures(report.candidates)
    if failed:
        first = failed[0]
        raise GateError(gate_refusal(first)
                        + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
                        hint=f"it stays open for review: `expgit review {first.proposal}`")
    errors = report.errors()
    if errors:
        raise RunErrorsError(
            f"the run finished with errors: {errors[0]}"
            + (f" (and {len(errors) - 1} more kinds)" if len(errors) > 1 else ""),
            hint="what it made is kept; the report lists every failure"
            + (f"; it stopped early: {report.stopped}" if report.stopped else ""))
    if report.remote is not None and report.remote.errors:
        raise ExpgitError(f"push to {report.remote.remote!r} failed: "
                          f"{report.remote.errors[0]}",
                          hint="everything is kept in this repository; the next run with "
                          f"--remote {report.remote.remote} pushes it")
