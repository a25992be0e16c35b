"""RemoteTrainingPolicyTrainer: a PolicyTrainer whose training happens in a training
service (``expgit serve``; docs/design.md, "The training service").

``train_rollouts`` checks ``GET /health`` (reachable, same mode as the run), posts each
rollout (``POST /v1/train/rollouts``, a bounded number at a time; ``429``/``503`` and
connection refusals are retried with backoff), polls each job
(``GET /v1/train/jobs/{id}``, backoff) until it is finished, and assembles one
RolloutTrainingResult from the jobs' results. A rollout whose job fails, is refused, is
forgotten by a restarted service, or does not finish within ``timeout`` seconds in all is
an error line in the result; the rest go on. Nothing is written locally: the service
trains its own repository's ``main`` (``policy_set`` is not sent).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import httpx

from expgit.core.domain import (
    PlanNotes,
    PolicyApplyResult,
    PolicyPlanItem,
    PolicyUpdatePlan,
    Rollout,
    RolloutAnalysis,
    RolloutTrainingResult,
)
from expgit.errors import UsageError
from expgit.llm.retry import RetryPolicy, Transient
from expgit.remote.http import HttpStats, RemoteServiceError, call_json, make_client
from expgit.remote.protocol import Health
from expgit.remote.training_protocol import FINISHED, TrainingJob
from expgit.train.context import PipelineContext
from expgit.train.interfaces import ExperienceSet
from expgit.train.measurement.phase_metrics import combined_apply_result

RETRY_STATUSES = (429, 503)


class RemoteTrainingPolicyTrainer:
    """Trains rollouts on a training service over HTTP: post, poll, assemble. The
    service's failures become per-rollout ``errors``; an unreachable service or a mode
    mismatch at the start raises (RemoteServiceError, UsageError) before anything is sent.
    ``stats`` counts the HTTP round trips and their milliseconds."""

    def __init__(self, url: str, *, token: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 poll_interval: float = 0.2, max_poll_interval: float = 2.0,
                 timeout: float = 900.0, request_timeout: float = 30.0,
                 max_in_flight: int = 8, max_unreachable: int = 5) -> None:
        if poll_interval <= 0 or max_poll_interval < poll_interval or timeout <= 0 \
                or request_timeout <= 0 or max_in_flight < 1 or max_unreachable < 1:
            raise UsageError("remote trainer: the intervals and timeouts must be > 0, "
                             "max_in_flight and max_unreachable >= 1")
        self.url = url.rstrip("/")
        self.token = token
        self.transport = transport
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.max_in_flight = max_in_flight
        self.max_unreachable = max_unreachable  # consecutive failed requests of one job
        self.retry_policy = RetryPolicy(max_unreachable - 1, poll_interval, max_poll_interval,
                                        jitter=False)
        self.stats = HttpStats()

    async def train_rollouts(self, rollouts: Sequence[Rollout], policy_set: ExperienceSet,
                             context: PipelineContext,
                             analyses: Sequence[RolloutAnalysis] | None = None
                             ) -> RolloutTrainingResult:
        if analyses:
            raise UsageError("the training service analyses rollouts itself: "
                             "RemoteTrainingPolicyTrainer takes no analyses")
        if not rollouts:
            return RolloutTrainingResult()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        async with make_client(self.url, token=self.token, transport=self.transport,
                               timeout=self.request_timeout,
                               max_connections=self.max_in_flight * 2) as client:
            await self._check(client, context)
            posting = asyncio.Semaphore(self.max_in_flight)
            outcomes = await asyncio.gather(*(self._one(client, r, posting, deadline)
                                              for r in rollouts))
        return assemble(rollouts, outcomes)

    # ------------------------------------------------------------------- internals
    async def _check(self, client: httpx.AsyncClient, context: PipelineContext) -> None:
        try:
            health = await call_json(client, "GET", "/health", Health, stats=self.stats)
        except RemoteServiceError as exc:
            raise RemoteServiceError(
                f"training service health check failed: {exc.message}", status=exc.status,
                reachable=exc.reachable, hint="is `expgit serve` running at this URL?"
            ) from None
        mode = health.metadata.get("mode")
        if mode != context.mode:
            raise UsageError(f"the training service at {self.url} runs in {mode!r} mode, "
                             f"this run asks for {context.mode!r}",
                             hint=f"restart it with `expgit serve --mode {context.mode}`")

    async def _one(self, client: httpx.AsyncClient, rollout: Rollout,
                   posting: asyncio.Semaphore, deadline: float) -> TrainingJob | str:
        case = rollout.case.name
        async with posting:
            job = await self._request(client, "POST", "/v1/train/rollouts", rollout,
                                      deadline, f"case {case}: submitting to the "
                                      "training service")
        if isinstance(job, str):
            return job
        delay = self.poll_interval
        while job.status not in FINISHED:
            loop = asyncio.get_running_loop()
            if loop.time() + delay > deadline:
                return (f"case {case}: training job {job.job_id} did not finish within "
                        f"{self.timeout:g}s (last status: {job.status})")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, self.max_poll_interval)
            polled = await self._request(client, "GET", f"/v1/train/jobs/{job.job_id}",
                                         None, deadline, f"case {case}: training job "
                                         f"{job.job_id}")
            if isinstance(polled, str):
                return polled
            job = polled
        return job

    async def _request(self, client: httpx.AsyncClient, method: str, path: str,
                       body: Rollout | None, deadline: float, what: str
                       ) -> TrainingJob | str:
        """One call, retried (backoff) while the service is busy or unreachable: at most
        ``max_unreachable`` attempts in a row, and never past ``deadline``. A final
        failure is returned as an error line."""
        loop = asyncio.get_running_loop()

        async def attempt(n: int) -> TrainingJob | str:
            try:
                return await call_json(client, method, path, TrainingJob, body=body,
                                       stats=self.stats)
            except RemoteServiceError as exc:
                if exc.status == 404 and method == "GET":
                    return (f"{what}: the service no longer knows this job (restarted?); "
                            "what it trained before is in git")
                if exc.status in RETRY_STATUSES or not exc.reachable:
                    raise Transient(_Failed(f"{what}: {exc.message}")) from None
                return f"{what}: {exc.message}"

        try:
            return await self.retry_policy.call(
                attempt, deadline=time.monotonic() + deadline - loop.time())
        except _Failed as exc:
            return str(exc)


class _Failed(Exception):
    """A request that failed for good: its error line."""


def assemble(rollouts: Sequence[Rollout], outcomes: Sequence[TrainingJob | str]
             ) -> RolloutTrainingResult:
    """One result of many jobs, like the streaming trainer's own ``train_rollouts``:
    analyses, gradients, the plan items (each once) and the apply results (each batch
    once; ``apply_result.metadata.batches`` lists them), errors in order, each once."""
    result = RolloutTrainingResult()
    items: dict[str, PolicyPlanItem] = {}
    applied: dict[tuple[str | None, str | None, str], PolicyApplyResult] = {}
    errors: dict[str, None] = {}
    for rollout, outcome in zip(rollouts, outcomes, strict=True):
        if isinstance(outcome, str):
            errors[outcome] = None
            continue
        errors.update(dict.fromkeys(outcome.errors))
        got = outcome.result
        if got is None:
            continue
        if got.evaluation is not None:
            result.analyses.append(RolloutAnalysis(
                rollout=rollout, evaluation=got.evaluation, trajectory=got.trajectory,
                metadata=got.analysis_metadata.model_copy(update={"job_id": outcome.job_id})))
        result.gradients.extend(got.gradients)
        for item in got.plan.items if got.plan is not None else []:
            items.setdefault(json.dumps(item.model_dump(mode="json"), sort_keys=True), item)
        if got.apply_result is not None:
            a = got.apply_result
            applied.setdefault((a.proposal_id, a.applied_commit,
                                a.updated_policy_set.commit), a)
    if items:
        result.plan = PolicyUpdatePlan(items=list(items.values()),
                                       metadata=PlanNotes(batches=len(applied)))
    result.apply_result = combined_apply_result(list(applied.values()))
    result.errors = list(errors)
    return result
