"""``expgit serve``: the training service over HTTP (rollouts in, training in git)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from expgit.asgi.server import serve_forever
from expgit.cli._common import open_repo
from expgit.cli._run_options import llm_options
from expgit.cli.train_common import LOOPBACK, allow_host_option, bearer_token
from expgit.outcomes.api import outcomes_router
from expgit.service.training_app import ServiceLimits, create_training_app


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface; set a token).")
@allow_host_option
@click.option("--port", type=click.IntRange(0, 65535), default=8766, show_default=True,
              help="The port (0: any free port; the URL printed says which). `expgit env "
              "serve` defaults to 8765, so both can run side by side.")
@click.option("--mode", type=click.Choice(["propose", "apply"]), default="propose",
              show_default=True, help="propose: each update stops at a proposal branch, "
              "main untouched; apply: each update is applied to main.")
@click.option("--token-env", metavar="VAR",
              help="Require `Authorization: Bearer <token>`, the token being the value "
              "of the environment variable VAR. Default: [serve] token_env (EXPGIT_TOKEN), "
              "when it is set.")
@click.option("--remote", metavar="NAME", help="Share one repository with other "
              "trainers: push each update's trajectories, gradients and proposal to this "
              "remote (never forced), the side branches at shutdown; --mode apply "
              "applies to its main.")
@llm_options
@click.pass_context
def serve_cmd(ctx: click.Context, host: str, allow_hosts: tuple[str, ...], port: int,
              mode: str, token_env: str | None,
              remote: str | None, llm_choice: str | None, model: str | None,
              base_url: str | None, concurrency: int) -> None:
    """Serve the training service: POST /v1/train/rollouts takes one Rollout JSON object
    (its case, messages with tool calls as ToolParts, its evaluation) and answers 202
    with a job id; GET /v1/train/jobs/ID answers the job's status and, once finished,
    its trajectory URI, gradient ids, proposal id or applied commit, and errors.
    POST /v1/outcomes records a typed outcome (needs an Idempotency-Key header; see
    `expgit outcomes --help`); GET /v1/outcomes lists them.

    Rollouts are trained as they come (streaming: batched by [train]
    max_gradients_per_update and max_wait_seconds); everything produced is in git.
    Limits from [serve] (body size, queue); --concurrency bounds the analyses and
    estimations at once (default: [serve] max_concurrency). Prints the URL once ready;
    stops cleanly on Ctrl-C / SIGTERM, finishing the jobs in flight.

    \b
    Example:
      expgit serve                                  # http://127.0.0.1:8766, propose mode
      expgit serve --port 0 --mode apply --token-env EXPGIT_TOKEN --llm openai
    """
    from expgit.llm.factory import open_llm  # the openai client loads only when needed

    repo = open_repo(ctx)
    serve = repo.settings.serve
    variable = token_env or serve.token_env
    token = bearer_token(token_env, serve.token_env)
    explicit = ctx.get_parameter_source("concurrency") is not click.core.ParameterSource.DEFAULT
    runtime = open_llm(repo.settings.llm, choice="local" if llm_choice == "local" else
                       "openai" if llm_choice == "openai" else None, model=model,
                       base_url=base_url, meter=None)
    path = repo.git.work_tree or repo.git.git_dir
    app = create_training_app(
        path, runtime, mode="apply" if mode == "apply" else "propose", token=token,
        limits=ServiceLimits(max_concurrency=concurrency if explicit else None),
        routers=[outcomes_router(Path(path))], remote=remote)
    if token is None and host not in LOOPBACK:
        click.echo(f"expgit: warning: no token ({variable} is not set): anyone who can "
                   f"reach {host}:{port} can train this repository", err=True)

    def ready(url: str) -> None:
        auth = f", bearer token from {variable}" if token else ""
        click.echo(f"expgit: training service ({mode} mode, {runtime.description}"
                   f"{auth}) listening", err=True)
        click.echo(url)
        sys.stdout.flush()

    serve_forever(app, host=host, port=port, on_ready=ready, allow_hosts=allow_hosts)

