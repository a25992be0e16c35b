"""The service SDK: any Python environment becomes an environment service
(docs/design.md, "Environment services").

Write a class with the three members of :class:`Environment`, then::

    app = create_environment_app(MyEnvironment(), token=os.environ.get("EXPGIT_TOKEN"))
    serve_forever(app, host="127.0.0.1", port=1944)       # expgit.asgi.server

The SDK does the protocol: paging of the cases (the cursor is an opaque offset), the
execution registry (queued / running / completed / failed, a concurrency limit and a
bounded queue), ``GET /health``, the bearer token, the body size limit and 4xx answers
with one-line ``{"error": ...}`` bodies for bad requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Protocol

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse

from expgit.asgi.guards import error_response, install_guards
from expgit.core.domain import Case, Rollout
from expgit.errors import ExpgitError, InvalidInputError, UsageError
from expgit.remote.executions import ExecutionRegistry, RegistryFull
from expgit.remote.protocol import CasePage, CaseQuery, ExecutionStatus, Health, RolloutRequest

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_EXECUTION_TTL_SECONDS = 3600.0
DEFAULT_MAX_POLL_WAIT_SECONDS = 1.0
RETRY_AFTER_SECONDS = 1


class Environment(Protocol):
    """A benchmark runtime, as the SDK serves it.

    ``describe()`` — the service's Health (name, version, free-form metadata); called on
    every ``GET /health``, so it must be cheap and must not fail.

    ``query_cases(query)`` — every case matching ``query.dataset`` / ``domain`` /
    ``split`` / ``filters``, in a stable order (``cursor`` and ``limit`` are the SDK's
    business: it pages the result). Synchronous; runs in a worker thread, so it may read
    files. Raises ExpgitError for a query it cannot answer (NotFoundError: an unknown
    split -> 404; InvalidInputError: a bad filter -> 422).

    ``run_rollout(request)`` — runs ``request.case`` against the experiences the request
    names (``policy_set.root_uri`` and ``policy_set.metadata.commit``) and returns the
    Rollout, with ``policy_snapshot_id = request.execution_context.policy_snapshot_id``
    unchanged (the SDK fails the execution otherwise) and, ideally, an evaluation. Runs
    on the service's event loop: blocking work goes through ``asyncio.to_thread``. May
    raise: the execution becomes ``failed`` with the exception's message as its error.
    Must not write to the experience repository.
    """

    def describe(self) -> Health: ...

    def query_cases(self, query: CaseQuery) -> Sequence[Case]: ...

    async def run_rollout(self, request: RolloutRequest) -> Rollout: ...


def page_of(cases: Sequence[Case], cursor: str | None, limit: int) -> CasePage:
    """One page: ``cursor`` is the offset as a decimal string (None: 0); ``next_cursor``
    None at the end. A cursor that is not a non-negative integer is InvalidInputError."""
    if cursor is None:
        offset = 0
    elif cursor.isascii() and cursor.isdigit():
        offset = int(cursor)
    else:
        raise InvalidInputError(f"bad cursor {cursor[:40]!r}: pass null or a next_cursor "
                                "this service returned")
    end = offset + limit
    return CasePage(cases=list(cases[offset:end]),
                    next_cursor=str(end) if end < len(cases) else None)


class _Registries:
    """One ExecutionRegistry per serving (created on the serving loop, closed at its
    shutdown): a restarted service has forgotten every execution."""

    def __init__(self, env: Environment, *, max_concurrency: int, max_queue: int,
                 ttl_seconds: float, execution_timeout: float | None) -> None:
        self.env = env
        self.options = (max_concurrency, max_queue, ttl_seconds, execution_timeout)
        self.current: ExecutionRegistry | None = None

    def get(self) -> ExecutionRegistry:
        if self.current is None:
            concurrency, queue, ttl, timeout = self.options
            self.current = ExecutionRegistry(self.env.run_rollout, max_concurrency=concurrency,
                                             max_queue=queue, ttl_seconds=ttl,
                                             execution_timeout=timeout)
        return self.current

    async def close(self) -> None:
        if self.current is not None:
            await self.current.close()
            self.current = None


def create_environment_app(env: Environment, *, token: str | None = None,
                           max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                           max_concurrency: int = 4, max_queue: int = 256,
                           execution_ttl_seconds: float = DEFAULT_EXECUTION_TTL_SECONDS,
                           execution_timeout_seconds: float | None = None,
                           max_poll_wait_seconds: float = DEFAULT_MAX_POLL_WAIT_SECONDS,
                           admit: Callable[[RolloutRequest], None] | None = None
                           ) -> FastAPI:
    """The FastAPI app serving ``env`` (routes: :mod:`expgit.remote.protocol`).

    At most ``max_concurrency`` rollouts run at once and ``max_queue`` wait; a submission
    beyond that is ``429`` (with ``Retry-After``). Finished executions are kept
    ``execution_ttl_seconds``; ``execution_timeout_seconds`` fails a rollout that runs
    longer. ``token``: bearer token of every route but ``GET /health``.

    Long polling (an extension of the protocol, ignored by services that lack it):
    ``GET /v1/rollouts/executions/{id}?wait=S`` answers as soon as the execution has
    finished, or after ``min(S, max_poll_wait_seconds)`` with its current status. Keep
    ``max_poll_wait_seconds`` below the server's graceful shutdown time (2 s).

    ``admit(request)``, if given, runs before a rollout is queued: an ExpgitError it
    raises refuses the request with ``403`` and its message (e.g. a repository the
    service was not started for), before the environment opens anything."""
    if max_concurrency < 1:
        raise UsageError(f"max concurrency must be at least 1, not {max_concurrency}")
    if max_queue < 0:
        raise UsageError(f"max queue must be 0 or more, not {max_queue}")
    registries = _Registries(env, max_concurrency=max_concurrency, max_queue=max_queue,
                             ttl_seconds=execution_ttl_seconds,
                             execution_timeout=execution_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registries.get()
        try:
            yield
        finally:
            await registries.close()

    app = FastAPI(title="expgit environment service", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    install_guards(app, token=token, max_body_bytes=max_body_bytes)

    @app.get("/health")
    async def health() -> Health:
        described = env.describe()
        registry = registries.get()
        return described.model_copy(update={"metadata": {
            **described.metadata, "executions": registry.counts(),
            "max_concurrency": max_concurrency, "max_queue": max_queue}})

    @app.post("/v1/cases/query")
    async def query_cases(query: CaseQuery) -> CasePage:
        cases = await asyncio.to_thread(env.query_cases, query)
        return page_of(cases, query.cursor, query.limit)

    @app.post("/v1/rollouts/execute", status_code=202, response_model=ExecutionStatus)
    async def execute(request: RolloutRequest) -> ExecutionStatus | JSONResponse:
        if admit is not None:
            try:
                admit(request)
            except ExpgitError as exc:
                return error_response(403, exc.message + (f" (hint: {exc.hint})"
                                                          if exc.hint else ""))
        try:
            return registries.get().submit(request)
        except RegistryFull as exc:
            return error_response(429, exc.message,
                                  headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.get("/v1/rollouts/executions/{execution_id}")
    async def execution(execution_id: str,
                        wait: Annotated[float, Query(ge=0, le=3600)] = 0.0
                        ) -> ExecutionStatus:
        return await registries.get().wait(execution_id, min(wait, max_poll_wait_seconds))

    return app
