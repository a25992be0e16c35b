"""``expgit env serve``: the example environment service (cases + rollouts over HTTP)."""

from __future__ import annotations

from pathlib import Path

import click

from expgit.cli._common import open_repo, warn
from expgit.cli._run_options import llm_options
from expgit.cli.train_common import (
    LOOPBACK,
    allow_host_option,
    bearer_token,
    make_llm_options,
)
from expgit.errors import UsageError
from expgit.service.example_env import DEFAULT_DATASET, DEFAULT_DOMAIN, ExampleEnvironment
from expgit.service.example_service import ExampleService, serve_example
from expgit.store.format.settings import Settings
from expgit.store.repository import ExperienceRepository


@click.group("env")
def env_group() -> None:
    """Environment services: a benchmark's cases and rollouts over HTTP (docs/design.md), for
    `expgit train --env-url URL` and `expgit eval --env-url URL`.

    \b
    Example:
      expgit env serve --cases cases/train.yaml --cases cases/eval.yaml
    """


def _named_splits(values: tuple[str, ...]) -> dict[str, Path]:
    named: dict[str, Path] = {}
    for value in values:
        name, sep, file = value.partition("=")
        if not sep or not name.strip() or not file:
            raise UsageError(f"--split {value!r}: expected NAME=FILE, e.g. test=cases/eval.yaml")
        named[name.strip()] = Path(file)
    return named


def _current(ctx: click.Context) -> ExperienceRepository | None:
    """The repository the command runs in, None outside one (serving needs none)."""
    try:
        return open_repo(ctx)
    except UsageError:
        return None


def _served_paths(repos: tuple[Path, ...], current: ExperienceRepository | None
                  ) -> list[Path]:
    """The paths rollouts may read: each --repo (default: the current repository), by
    its work tree and its git directory. A --repo that is not a repository is refused."""
    opened = [ExperienceRepository.open(path) for path in repos] if repos else (
        [current] if current is not None else [])
    return [Path(where) for repo in opened
            for where in (repo.git.work_tree, repo.git.git_dir) if where is not None]


@env_group.command("serve")
@click.option("--cases", "cases", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="A cases file served as the split named by its stem "
              "(cases/train.yaml -> train). Repeatable.")
@click.option("--split", "named", multiple=True, metavar="NAME=FILE",
              help="A cases file served as split NAME. Repeatable.")
@click.option("--dataset", default=DEFAULT_DATASET, show_default=True,
              help="The dataset name the cases are served under.")
@click.option("--domain", default=DEFAULT_DOMAIN, show_default=True,
              help="The domain name the cases are served under.")
@click.option("--repo", "repos", multiple=True, type=click.Path(path_type=Path),
              help="A repository rollouts may read (the request's policy_set.root_uri); "
              "any other is refused with 403. Repeatable. Default: the current one.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@allow_host_option
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The port (0: a free one).")
@click.option("--token-env", metavar="VAR",
              help="Require the bearer token held in environment variable VAR (default: "
              "[serve] token_env, EXPGIT_TOKEN, when set).")
@llm_options
@click.pass_context
def env_serve_cmd(ctx: click.Context, cases: tuple[Path, ...], named: tuple[str, ...],
                  dataset: str, domain: str, repos: tuple[Path, ...], host: str,
                  allow_hosts: tuple[str, ...], port: int, token_env: str | None,
                  llm_choice: str | None, model: str | None, base_url: str | None,
                  concurrency: int) -> None:
    """Serve the cases of --cases / --split files and run their rollouts: a rollout
    reads the experiences of the repository path and commit the request names
    (read-only; only a --repo, by default the current repository) and asks the
    configured LLM (the embedded model when no endpoint is configured; --llm, --model,
    --base-url as for `expgit train`), scored by the
    case's rubric. --concurrency rollouts run at once; more wait in a queue.

    \b
    Prints the URL on stdout once the LLM is up and the service accepts connections;
    Ctrl-C (or SIGTERM) stops it. Then, in another shell, train against it:
    `expgit train --env-url URL --split train --eval-split eval --mode propose`.

    \b
    Example:
      expgit env serve --cases cases/train.yaml --split eval=cases/eval.yaml
      expgit env serve --cases cases/train.yaml --port 0 --token-env ENV_TOKEN
    """
    if not cases and not named:
        raise UsageError("nothing to serve: give --cases FILE or --split NAME=FILE")
    current = _current(ctx)
    settings = current.settings if current is not None else Settings()
    served = _served_paths(repos, current)
    if not served:
        warn(["no repository to serve: every rollout will be refused (run in one, or "
              "give --repo PATH)"])
    settings = settings.model_copy(update={"serve": settings.serve.model_copy(
        update={"max_concurrency": concurrency})})
    token = bearer_token(token_env, settings.serve.token_env)
    if token is None and host not in LOOPBACK:
        warn([f"no token: anyone who can reach {host}:{port} can list the cases and run "
              "rollouts that read repositories on this machine (set --token-env)"])
    service = ExampleService(cases=cases, named=_named_splits(named), dataset=dataset,
                             domain=domain, host=host, port=port, token=token,
                             repositories=served, allow_hosts=allow_hosts)

    def ready(url: str, env: ExampleEnvironment) -> None:
        sizes = ", ".join(f"{name} ({len(split)})" for name, split in env.splits.items())
        click.echo(f"expgit: serving {dataset}/{domain} splits {sizes} with "
                   f"{env.describe().metadata['llm']}; Ctrl-C stops", err=True)
        click.echo(url)

    serve_example(service, settings, make_llm_options(llm_choice, model, base_url), ready)
