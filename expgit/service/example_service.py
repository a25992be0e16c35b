"""``expgit env serve``: the example environment as an HTTP service (the SDK's app), the
LLM started with the service (before it accepts connections) and stopped with it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from expgit.asgi.server import serve_forever
from expgit.remote.sdk import create_environment_app
from expgit.runs.build import LLMOptions
from expgit.service.example_env import (
    DEFAULT_DATASET,
    DEFAULT_DOMAIN,
    ExampleEnvironment,
    load_splits,
)
from expgit.store.format.settings import ServeSettings, Settings


def example_app(env: ExampleEnvironment, *, token: str | None, serve: ServeSettings,
                runtime: AbstractAsyncContextManager[Any] | None = None) -> FastAPI:
    """The SDK's app serving ``env`` with the ``[serve]`` limits; ``runtime`` (the
    environment's LLM, if it must be opened) is entered at start-up, exited at shutdown."""
    app = create_environment_app(env, token=token, max_body_bytes=serve.max_body_bytes,
                                 max_concurrency=serve.max_concurrency,
                                 max_queue=serve.max_queue, admit=env.admit)
    if runtime is None:
        return app
    opened = runtime
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with opened, inner(app):
            yield

    app.router.lifespan_context = lifespan
    return app


@dataclass(frozen=True)
class ExampleService:
    """What ``expgit env serve`` serves: ``cases`` files (split = file stem) and
    ``named`` ones (split = name), as ``dataset``/``domain``, on ``host:port``; rollouts
    read only the ``repositories`` named (their work trees and git directories)."""

    cases: Sequence[Path] = ()
    repositories: Sequence[Path] = ()
    named: Mapping[str, Path] = field(default_factory=dict)
    dataset: str = DEFAULT_DATASET
    domain: str = DEFAULT_DOMAIN
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allow_hosts: Sequence[str] = ()


def serve_example(service: ExampleService, settings: Settings, llm: LLMOptions,
                  on_ready: Callable[[str, ExampleEnvironment], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM. The cases files are read and the LLM resolved (bad
    input or a missing model: ExpgitError) before anything starts; ``on_ready(url, env)``
    once the LLM is up and the socket accepts connections."""
    from expgit.llm.factory import open_llm  # the openai client loads only when needed

    splits = load_splits(service.cases, service.named)
    runtime = open_llm(settings.llm, choice=llm.choice, model=llm.model,
                       base_url=llm.base_url, meter=None)
    env = ExampleEnvironment(splits, runtime, repositories=service.repositories,
                             dataset=service.dataset, domain=service.domain)
    app = example_app(env, token=service.token, serve=settings.serve, runtime=runtime)
    serve_forever(app, host=service.host, port=service.port, allow_hosts=service.allow_hosts,
                  on_ready=None if on_ready is None else lambda url: on_ready(url, env))
