"""RemoteRolloutExecutor: rollouts run by an environment service (docs/design.md,
"Environment services")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel

from expgit.core.domain import Case, FreeMetadata, Rollout
from expgit.errors import UsageError
from expgit.llm.retry import RetryPolicy, Transient
from expgit.remote.http import (
    DEFAULT_REQUEST_TIMEOUT,
    HttpStats,
    RemoteServiceError,
    call_json,
    make_client,
)
from expgit.remote.protocol import (
    ExecutionContextRef,
    ExecutionStatus,
    PolicySetRef,
    RolloutRequest,
)
from expgit.train.components.evaluator import failed_evaluation
from expgit.train.context import ExecutionContext
from expgit.train.interfaces import ExperienceSet

_BUSY = (429, 503)  # queue full: wait and submit again


class _CaseFailed(Exception):
    """The case cannot complete; ``str`` is the rollout's error."""


REMOTE_KEY = "remote"


class RemoteRunNotes(BaseModel):
    """What the client noted of one case's run on a service, in
    ``rollout.metadata["remote"]``: HTTP round trips and their time, the service, the
    execution ids (two when it was submitted again), polls, and the wall time."""

    round_trips: int
    http_ms: float
    service_url: str
    execution_ids: list[str]
    polls: int
    resubmitted: bool
    wall_ms: float

    @classmethod
    def of(cls, rollout: Rollout) -> RemoteRunNotes | None:
        """The notes of a rollout run remotely; None for another."""
        raw = rollout.metadata.get(REMOTE_KEY)
        return None if raw is None else cls.model_validate(raw)


class _Attempt:
    """The bookkeeping of one case: HTTP stats, execution ids, poll count."""

    def __init__(self) -> None:
        self.stats = HttpStats()
        self.execution_ids: list[str] = []
        self.polls = 0
        self.resubmitted = False
        self.last_status = "not submitted"

    def metadata(self, url: str, started: float) -> FreeMetadata:
        return {REMOTE_KEY: RemoteRunNotes(
            round_trips=self.stats.round_trips, http_ms=round(self.stats.http_ms, 3),
            service_url=url, execution_ids=list(self.execution_ids), polls=self.polls,
            resubmitted=self.resubmitted,
            wall_ms=round((time.monotonic() - started) * 1000, 3)).model_dump(mode="json")}


class RemoteRolloutExecutor:
    """Runs each case on an environment service: ``POST /v1/rollouts/execute``, then
    ``GET /v1/rollouts/executions/{id}`` until ``completed`` or ``failed``; at most
    ``max_in_flight`` cases at once; each case gets ``timeout_seconds`` overall. Polls ask
    the service to hold them up to ``long_poll`` seconds (``?wait=``, the SDK's long
    polling): while it does, the next poll follows at once, so a finished rollout is seen
    at once; a service that answers at once instead is polled with exponential backoff
    (``poll_initial`` doubling up to ``poll_max`` seconds). ``long_poll=0``: never ask.

    The request names the experience repository (``policy_set.root_uri = repo_uri``) and,
    in ``policy_set.metadata``, the snapshot's ``commit``, ``snapshot_id`` and
    ``experiences_root``; ``execution_context`` carries the pipeline's snapshot id and
    metadata; ``options`` are passed through.

    Never raises for a case: a ``failed`` execution (error = the service's error text), a
    timeout, an unreachable service, an HTTP error or garbage, and a rollout whose
    ``policy_snapshot_id`` or case name differs from the request each become a Rollout
    with ``error`` and a failed evaluation. Transient trouble is retried within the
    timeout: a full queue (429/503) is submitted again; a submission whose connection was
    refused (it never arrived), and any connection error while polling, are retried
    ``connect_retries`` times in a row (a read timeout on a submission is not: the service
    may have accepted it); a service that forgot the execution
    (404, e.g. restarted) gets the case submitted once more. Every rollout's
    ``metadata.remote`` records ``round_trips``, ``http_ms``, ``polls``, the execution
    ids and ``wall_ms``. Never writes to the repository.
    """

    def __init__(self, url: str, *, repo_uri: str, token: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, max_in_flight: int = 8,
                 poll_initial: float = 0.05, poll_max: float = 2.0,
                 timeout_seconds: float = 600, options: dict[str, Any] | None = None,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 connect_retries: int = 3, long_poll: float = 1.0) -> None:
        if max_in_flight < 1:
            raise UsageError(f"max in flight must be at least 1, not {max_in_flight}")
        if not 0 < poll_initial <= poll_max:
            raise UsageError(f"need 0 < poll_initial <= poll_max, got {poll_initial}, "
                             f"{poll_max}")
        if timeout_seconds <= 0:
            raise UsageError(f"timeout must be positive, not {timeout_seconds}")
        self.url = url
        self.repo_uri = repo_uri
        self.token = token
        self.transport = transport
        self.max_in_flight = max_in_flight
        self.poll_initial = poll_initial
        self.poll_max = poll_max
        self.timeout_seconds = timeout_seconds
        self.options = dict(options or {})
        self.request_timeout = min(request_timeout, timeout_seconds)
        self.connect_retries = connect_retries
        # a busy service: submit again, with backoff, until the case's timeout
        self.submit_policy = RetryPolicy(None, poll_initial, poll_max, jitter=False)
        if long_poll < 0:
            raise UsageError(f"long poll must be 0 or more seconds, not {long_poll}")
        self.long_poll = min(long_poll, self.request_timeout / 2)  # held polls must not time out

    def request_for(self, case: Case, policy_set: ExperienceSet,
                    context: ExecutionContext) -> RolloutRequest:
        """The RolloutRequest of one case (public for services and tests)."""
        return RolloutRequest(
            case=case,
            policy_set=PolicySetRef(root_uri=self.repo_uri, metadata={
                "commit": policy_set.commit, "snapshot_id": policy_set.id,
                "experiences_root": policy_set.root}),
            execution_context=ExecutionContextRef(
                policy_snapshot_id=context.policy_snapshot_id,
                metadata=dict(context.metadata)),
            options=dict(self.options))

    async def execute(self, cases: Sequence[Case], policy_set: ExperienceSet,
                      context: ExecutionContext) -> list[Rollout]:
        if not cases:
            return []
        slots = asyncio.Semaphore(self.max_in_flight)
        async with make_client(self.url, token=self.token, transport=self.transport,
                               timeout=self.request_timeout,
                               max_connections=self.max_in_flight) as client:

            async def one(case: Case) -> Rollout:
                async with slots:
                    rollout = await self._run_case(client, case, policy_set, context)
                if context.rollout_done is not None:
                    context.rollout_done()
                return rollout

            return list(await asyncio.gather(*(one(case) for case in cases)))

    async def _run_case(self, client: httpx.AsyncClient, case: Case,
                        policy_set: ExperienceSet, context: ExecutionContext) -> Rollout:
        attempt = _Attempt()
        started = time.monotonic()
        request = self.request_for(case, policy_set, context)
        try:
            async with asyncio.timeout(self.timeout_seconds):
                rollout = await self._until_done(client, request, attempt)
            _check(rollout, case, context)
        except TimeoutError:
            return self._failed(case, context, attempt, started,
                                f"remote rollout timed out after {self.timeout_seconds:g}s "
                                f"(last status: {attempt.last_status})")
        except _CaseFailed as exc:
            return self._failed(case, context, attempt, started, str(exc))
        rollout.metadata = {**rollout.metadata, **attempt.metadata(self.url, started)}
        if rollout.error is not None and rollout.evaluation is None:
            rollout.evaluation = failed_evaluation(case, rollout.error)
        return rollout

    def _failed(self, case: Case, context: ExecutionContext, attempt: _Attempt,
                started: float, error: str) -> Rollout:
        return Rollout(case=case, policy_snapshot_id=context.policy_snapshot_id, error=error,
                       evaluation=failed_evaluation(case, error),
                       metadata=attempt.metadata(self.url, started))

    async def _until_done(self, client: httpx.AsyncClient, request: RolloutRequest,
                          attempt: _Attempt) -> Rollout:
        status = await self._submit(client, request, attempt)
        while True:
            if status.status == "completed":
                if status.rollout is None:
                    raise _CaseFailed(f"the service reported execution "
                                      f"{status.execution_id} completed without a rollout")
                return status.rollout
            if status.status == "failed":
                raise _CaseFailed(status.error or f"execution {status.execution_id} failed "
                                  "(the service gave no error text)")
            status = await self._poll(client, request, status.execution_id, attempt)

    async def _submit(self, client: httpx.AsyncClient, request: RolloutRequest,
                      attempt: _Attempt) -> ExecutionStatus:
        refused = 0  # submissions that never arrived: at most connect_retries of them

        async def submit(n: int) -> ExecutionStatus:
            nonlocal refused
            try:
                return await call_json(client, "POST", "/v1/rollouts/execute",
                                       ExecutionStatus, body=request, stats=attempt.stats)
            except RemoteServiceError as exc:
                failed = _CaseFailed(f"cannot submit the rollout: {exc.message}")
                if exc.status in _BUSY:
                    attempt.last_status = f"service busy (HTTP {exc.status})"
                elif not exc.sent and refused < self.connect_retries:
                    refused += 1  # never arrived (connection refused): safe to send again
                    attempt.last_status = "service unreachable"
                else:
                    raise failed from None
                raise Transient(failed) from None

        status = await self.submit_policy.call(submit)  # within the case's timeout
        attempt.execution_ids.append(status.execution_id)
        attempt.last_status = status.status
        return status

    async def _poll(self, client: httpx.AsyncClient, request: RolloutRequest,
                    execution_id: str, attempt: _Attempt) -> ExecutionStatus:
        delay = self.poll_initial
        unreachable = 0
        held = self.long_poll > 0  # long polling: the first poll goes out at once
        path = f"/v1/rollouts/executions/{execution_id}"
        if self.long_poll > 0:
            path += f"?wait={self.long_poll:g}"
        while True:
            if not held:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.poll_max)
            attempt.polls += 1
            asked = time.monotonic()
            try:
                status = await call_json(client, "GET", path, ExecutionStatus,
                                         stats=attempt.stats)
            except RemoteServiceError as exc:
                held = False
                if not exc.reachable and unreachable < self.connect_retries:
                    unreachable += 1
                    attempt.last_status = "service unreachable"
                    continue
                if exc.status == 404 and not attempt.resubmitted:
                    attempt.resubmitted = True  # the service forgot it: run it again, once
                    return await self._submit(client, request, attempt)
                if exc.status == 404:
                    raise _CaseFailed(f"the service lost the execution twice (restarted?): "
                                      f"{exc.message}") from None
                raise _CaseFailed(f"polling the execution failed: {exc.message}") from None
            unreachable = 0
            held = self.long_poll > 0 and time.monotonic() - asked >= self.long_poll / 2
            attempt.last_status = status.status
            if status.execution_id != execution_id:
                raise _CaseFailed(f"asked for execution {execution_id}, the service answered "
                                  f"about {status.execution_id}")
            if status.status in ("completed", "failed"):
                return status


def _check(rollout: Rollout, case: Case, context: ExecutionContext) -> None:
    if rollout.policy_snapshot_id != context.policy_snapshot_id:
        raise _CaseFailed(
            f"the service changed policy_snapshot_id from {context.policy_snapshot_id!r} to "
            f"{rollout.policy_snapshot_id!r}; the rollout cannot be attributed to a policy")
    if rollout.case.name != case.name:
        raise _CaseFailed(f"asked to run case {case.name!r}, the service returned a rollout "
                          f"of {rollout.case.name!r}")
