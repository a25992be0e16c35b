"""The training service (``expgit serve``; docs/design.md, "The training service"):
rollouts in over HTTP, one StreamingPolicyTrainer, results in git.

Routes (bearer token and body limit by :mod:`expgit.asgi.guards`):

* ``GET /health`` -> Health; ``metadata``: mode, main branch, job counts, limits;
* ``POST /v1/train/rollouts`` — the body is one Rollout JSON object (docs/design.md: its case,
  messages with tool calls as ToolParts, ideally its evaluation, free ``metadata``) ->
  ``202`` TrainingJob (``job_id``, ``status``). The same rollout while its job is
  unfinished -> ``200`` with that job (a retried POST trains once). A malformed or
  caseless rollout -> ``422`` and nothing is written; ``429`` when ``max_concurrency +
  max_queue`` jobs are unfinished; ``503`` while shutting down;
* ``GET /v1/train/jobs/{job_id}`` -> TrainingJob (finished: its result read from git);
  unknown (or forgotten, or from before a restart) -> ``404``.

The trainer is made, and the LLM runtime opened (when it is an async context manager,
like ``LLMRuntime``), by the app's lifespan; shutdown lets running jobs finish for
``shutdown_grace_seconds`` and closes the trainer (flushing what is pending). With a
``remote``, each update is pushed there, and shutdown pushes the side branches and
whatever is left (``/health`` reports what was pushed).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

import expgit
from expgit.asgi.guards import describe_validation_errors, error_response, install_guards
from expgit.core.domain import FreeMetadata, Rollout
from expgit.errors import InvalidInputError, NotFoundError, UsageError
from expgit.remote.protocol import Health
from expgit.remote.training_protocol import TrainingJob
from expgit.runs.wiring import LLMHandles
from expgit.service.job_view import job_status, job_view
from expgit.service.jobs import JobRegistry, QueueFullError
from expgit.service.stage_gate import StageGate
from expgit.service.training_runner import Mode, ShuttingDownError, TrainingRunner
from expgit.service.training_wiring import TrainerFactory, streaming_trainer_factory
from expgit.store.repository import ExperienceRepository
from expgit.train.remote_push import RemotePublisher

SERVICE_NAME = "expgit-training"


@dataclass(frozen=True)
class ServiceLimits:
    """None: from the repository's ``[serve]`` section."""

    max_body_bytes: int | None = None
    max_concurrency: int | None = None  # analyses + estimations at once
    max_queue: int | None = None  # unfinished jobs beyond max_concurrency
    keep_finished: int = 1000  # finished jobs remembered for GET
    shutdown_grace_seconds: float = 30.0


def create_training_app(repo_path: Path | str, llm: LLMHandles | None = None, *,
                        mode: Mode = "propose", token: str | None = None,
                        limits: ServiceLimits | None = None,
                        trainer_factory: TrainerFactory | None = None,
                        routers: Sequence[APIRouter] = (), remote: str | None = None
                        ) -> FastAPI:
    """The training service of the repository at ``repo_path`` (opened now: a bad path
    or an unknown ``remote`` fails here, before serving). ``llm``: the model the default
    components use; ``trainer_factory``: other components instead (one of the two is
    needed). ``routers`` are mounted as they are (behind the same guards)."""
    if mode not in ("propose", "apply"):
        raise UsageError(f"mode must be 'propose' or 'apply', not {mode!r}")
    repo = ExperienceRepository.open(Path(repo_path))
    limits = limits or ServiceLimits()
    serve = repo.settings.serve
    concurrency = limits.max_concurrency or serve.max_concurrency
    queue = serve.max_queue if limits.max_queue is None else limits.max_queue
    if concurrency < 1 or queue < 0 or limits.shutdown_grace_seconds < 0:
        raise UsageError("service limits: max_concurrency must be >= 1, max_queue and "
                         "shutdown_grace_seconds >= 0")
    publisher = RemotePublisher(repo, remote) if remote is not None else None
    if trainer_factory is None:
        if llm is None:
            raise UsageError("the training service needs an LLM or a trainer factory")
        trainer_factory = streaming_trainer_factory(publisher=publisher)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            handles = llm
            if isinstance(llm, AbstractAsyncContextManager):
                handles = await stack.enter_async_context(llm)
            gate = StageGate(concurrency)
            trainer = trainer_factory(repo, handles, gate)
            runner = TrainingRunner(repo, trainer, JobRegistry(
                capacity=concurrency + queue, keep_finished=limits.keep_finished), mode)
            app.state.training = runner
            try:
                yield
            finally:
                await runner.shutdown(limits.shutdown_grace_seconds)
                if publisher is not None:
                    await _push_rest(publisher)

    app = FastAPI(title="expgit training service", version=expgit.__version__,
                  lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    install_guards(app, token=token, max_body_bytes=limits.max_body_bytes
                   or serve.max_body_bytes)
    app.include_router(_routes(repo, _Info(mode, concurrency, queue, publisher)))
    for router in routers:
        app.include_router(router)
    return app


@dataclass(frozen=True)
class _Info:
    mode: Mode
    max_concurrency: int
    max_queue: int
    publisher: RemotePublisher | None = None


async def _push_rest(publisher: RemotePublisher) -> None:
    """The last pushes at shutdown; what did not land is said on stderr (it stays here,
    and the next push sends it)."""
    report = await asyncio.to_thread(publisher.finish)
    for error in report.errors:
        print(f"expgit: warning: not pushed to {report.remote}: {error}", file=sys.stderr)


def _runner(request: Request) -> TrainingRunner:
    runner = getattr(request.app.state, "training", None)
    if not isinstance(runner, TrainingRunner):
        raise ShuttingDownError("the training service is not running (no lifespan)")
    return runner


def _routes(repo: ExperienceRepository, info: _Info) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health(request: Request) -> Health:
        runner = getattr(request.app.state, "training", None)
        jobs: FreeMetadata = ({**runner.registry.counts()} if isinstance(runner, TrainingRunner)
                              else {})
        return Health(service=SERVICE_NAME, version=expgit.__version__, metadata={
            "mode": info.mode, "main_branch": repo.settings.main_branch, "jobs": jobs,
            "max_concurrency": info.max_concurrency, "max_queue": info.max_queue,
            **({"remote": info.publisher.report.model_dump(mode="json")}
               if info.publisher is not None else {})})

    @router.post("/v1/train/rollouts", status_code=202, response_model=TrainingJob)
    async def submit(request: Request, response: Response) -> TrainingJob | JSONResponse:
        # the guards let only a JSON Content-Type through (a web page's form is 415)
        try:
            rollout = Rollout.model_validate_json(await request.body())
        except ValidationError as exc:
            return error_response(422, describe_validation_errors(exc.errors()))
        if not rollout.case.name.strip():
            raise InvalidInputError("invalid request: the rollout must include its case "
                                    "(case.name is blank)")
        runner = _runner(request)
        try:
            job, created = runner.submit(rollout)
        except QueueFullError as exc:
            return error_response(429, f"{exc.message} ({exc.hint})",
                                  headers={"Retry-After": "1"})
        except ShuttingDownError as exc:
            return error_response(503, exc.message, headers={"Retry-After": "5"})
        if not created:
            response.status_code = 200
        response.headers["Location"] = f"/v1/train/jobs/{job.job_id}"
        return job_status(job)

    @router.get("/v1/train/jobs/{job_id}", response_model=TrainingJob)
    async def job(job_id: str, request: Request) -> TrainingJob:
        found = _runner(request).registry.get(job_id)
        if found is None:
            raise NotFoundError(f"no training job {job_id!r}", hint="jobs live in the "
                                "service's memory: a restarted service knows none; what "
                                "they trained is in git (expgit gradients, expgit proposals)")
        if not found.finished:
            return job_status(found)
        return await asyncio.to_thread(job_view, repo, found)  # reads git

    return router


__all__ = ["SERVICE_NAME", "ServiceLimits", "create_training_app"]
